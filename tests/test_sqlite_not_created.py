"""A command that reads a deployed database never creates one: a SQLite URL naming a file that is
not there (SQLite's default would create it empty) is one `error:` line and exit 2 for a command on
one database; for a fleet's revisions the target is not built yet (at <base>, behind, as the upgrade
that builds it finds it), for its contents (status --fleet, outbox cleanup) the target's own failed
row (a PostgreSQL target beside it read as ever); the file is still absent afterwards. What builds a database (alembic upgrade, fleet
upgrade) still creates it; :memory: and SQLite's URI form still work (db.make_engine's must_exist)."""

from __future__ import annotations

import json
import sqlite3

import pytest
import sqlalchemy as sa

from sqltransport_schema import cli, errors
from sqltransport_schema.db import make_engine

from .support.commands import run
from .support.fleets import pg_databases, pg_url, run_fleet
from .support.runtime import TOPOLOGY
from .support.topology import SINGLE_DATABASE, TENANT_PLACEMENT

# the advice repeats the URL the user gave (urls.upgrade_command)
FIX = "check the URL, or build the database there with `alembic -x url=sqlite:///{missing} upgrade head`"

# each command that only reads (or changes rows of) a database named by --url; {ini} alembic.ini, {out} a scratch path
SINGLE = {
    "check": ["check", "-c", "{ini}"],
    "check --format json": ["check", "-c", "{ini}", "--format", "json"],
    "adopt --dry-run": ["adopt", "-c", "{ini}", "--dry-run"],
    "adopt": ["adopt", "-c", "{ini}"],
    "pipeline plan": ["pipeline", "plan", "-c", "{ini}"],
    "pipeline run": ["pipeline", "run", "-c", "{ini}", "--no-spark"],
    "status": ["status", "-c", "{ini}"],
    "console": ["console", "-c", "{ini}", "--bind", "127.0.0.1:0"],
}


@pytest.fixture
def deployed(project, tmp_path):
    """A compiled project, its database built at the head, and the URL of a file that is not there."""
    project.deploy(f"sqlite:///{tmp_path / 'app.db'}", TOPOLOGY)
    return project, tmp_path / "missing.db"


@pytest.mark.parametrize(
    "command",
    [pytest.param(argv, id=name, marks=[pytest.mark.console] if name == "console" else []) for name, argv in SINGLE.items()],
)
def test_a_read_of_a_sqlite_file_that_is_not_there_is_one_error_line_and_creates_nothing(deployed, capsys, command):
    project, missing = deployed
    argv = [word.format(ini=project.ini, out=missing.parent / "out.sql") for word in command]
    code = cli.main([*argv, "--url", f"sqlite:///{missing}"])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    said = json.loads(out)["message"] if "--format" in argv else err.removeprefix("error: ").rstrip("\n")
    assert said.startswith(f"no SQLite database at {missing}") and "; nothing was created: " in said
    assert "Traceback" not in err and (err.count("\n") == 1 or "--format" in argv)
    if command[0] not in ("status", "console"):  # those name where the URL came from, and --url (test_operations)
        assert said.endswith(FIX.format(missing=missing))
    assert not missing.exists()


def test_script_url_of_another_engine_is_refused_before_opening_it(deployed, capsys):
    """script --url reads a database of the script's engine (PostgreSQL or SQL Server): a SQLite URL
    is refused from the URL alone, its file neither opened nor created."""
    project, missing = deployed
    argv = ["script", "-c", str(project.ini), "--engine", "postgresql", "-o", str(missing.parent / "out.sql")]
    assert cli.main([*argv, "--url", f"sqlite:///{missing}"]) == 2
    assert capsys.readouterr().err == "error: --url is a sqlite database; the script is for postgresql\n"
    assert not missing.exists()


def test_pipeline_tenants_leaves_an_unknown_tenants_file_uncreated(project, tmp_path, capsys):
    """--tenant-url names a database per tenant: a tenant whose file is not there is that tenant's
    failure (its rows stay in the shared table), the others are carried, and no file is made."""
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    project.deploy(shared, SINGLE_DATABASE)
    with make_engine(shared).begin() as connection:
        for tenant in ("t0", "t9"):
            connection.execute(
                sa.text(
                    'INSERT INTO "Sales_OrderSaga" ("Id", "Metadata", "Data", "PersistenceVersion", "SagaTypeVersion", "Concurrency", '
                    '"Correlation_OrderId") VALUES (:id, \'{}\', :data, \'8.0.0\', \'8.0.0\', 1, :id)'
                ),
                {"id": f"saga-{tenant}", "data": json.dumps({"TenantId": tenant})},
            )
    project.write_topology(TENANT_PLACEMENT)
    assert project.compile("tenant placement") == 0
    project.upgrade(f"sqlite:///{tmp_path / 'tenant-t0.db'}", "head", "role=tenant")
    argv = ["pipeline", "tenants", "-c", str(project.ini), "--url", shared, "--tenant-property", "TenantId"]
    argv += ["--tenant-url", f"sqlite:///{tmp_path}/tenant-{{name}}.db", "--table", "Sales_OrderSaga", "--no-spark", "--format", "json"]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 1, out + err
    outcomes = {t["tenant"]: t for t in json.loads(out)["tables"][0]["tenants"]}
    assert outcomes["t0"]["carried"] == 1 and outcomes["t0"]["error"] is None
    fix = FIX.format(missing=f"{tmp_path}/tenant-t9.db")
    assert outcomes["t9"]["error"] == f"no SQLite database at {tmp_path}/tenant-t9.db; nothing was created: {fix}"
    assert not (tmp_path / "tenant-t9.db").exists()


def test_fleet_reads_of_a_missing_sqlite_target_create_nothing(project):
    """A fleet of a PostgreSQL database, a SQLite file and a SQLite target whose file is not there:
    fleet status reports it at <base>, behind; the reads of its contents report it (and only it)
    failed with the reason; the upgrade then builds it."""
    root = project.root
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    head = project.head()
    missing = root / "gone.db"
    with pg_databases(1) as (name,):
        fleet = f"targets:\n  - name: pg\n    url: {pg_url(name)}\n  - name: here\n    url: sqlite:///here.db\n"
        (root / "fleet.yaml").write_text(fleet)
        assert run_fleet(root, "upgrade").returncode == 0
        (root / "fleet.yaml").write_text(fleet + "  - name: gone\n    url: sqlite:///gone.db\n")
        reason = (
            "no SQLite database at gone.db; nothing was created: "
            "check the target's URL in the fleet file, or build it with `sqltransport-schema fleet upgrade`"
        )

        for extra in ([], ["--check"]):
            result = run_fleet(root, "status", *extra, "--format", "json")
            assert result.returncode == 1, result.stdout + result.stderr
            rows = {row["name"]: row for row in json.loads(result.stdout)["targets"]}
            assert rows["gone"]["state"] == "behind" and rows["gone"]["revision"] is None and rows["gone"]["behind"] == 1
            assert rows["pg"]["state"] == rows["here"]["state"] == "at_head" and rows["pg"]["revision"] == head
            assert not missing.exists()
        text = run_fleet(root, "status")
        assert "gone: at <base>, 1 behind" in text.stdout.splitlines() and "Traceback" not in text.stderr
        assert not missing.exists()

        for command in (["status", "--fleet"], ["outbox", "cleanup", "--fleet", "--older-than", "1d"]):
            result = run(root, *command, "--format", "json")
            assert result.returncode == 1, result.stdout + result.stderr
            rows = {row["name"]: row for row in json.loads(result.stdout)["targets"]}
            assert rows["gone"]["error"] == reason and "error" not in rows["pg"] and "error" not in rows["here"]
            assert not missing.exists()

        dry = run_fleet(root, "upgrade", "--dry-run", "--format", "json")  # the upgrade would build it: from <base>
        assert dry.returncode == 0, dry.stdout + dry.stderr
        outcomes = {t["name"]: (t["outcome"], t["from"]) for t in json.loads(dry.stdout)["targets"]}
        assert outcomes == {"pg": ("at_revision", head), "here": ("at_revision", head), "gone": ("would_upgrade", None)}
        assert not missing.exists()
        script = run_fleet(root, "script", "-o", "scripts", "--only", "gone")
        assert "failed gone: a sqlite database" in script.stdout + script.stderr and not missing.exists()

        built = run_fleet(root, "upgrade")  # what builds a database still creates it
        assert built.returncode == 0, built.stdout + built.stderr
        assert sqlite3.connect(missing).execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]


def test_a_fleets_control_database_that_is_not_there_is_not_created(project):
    root = project.root
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    query = "query:\n  url: sqlite:///control.db\n  sql: SELECT name FROM tenants\n"
    (root / "fleet.yaml").write_text("url_template: sqlite:///{name}.db\n" + query)
    result = run_fleet(root, "status")
    assert result.returncode == 2 and "no SQLite database at control.db; nothing was created" in result.stderr
    assert result.stderr.count("\n") == 1 and not (root / "control.db").exists()


def test_must_exist_refuses_only_a_file_that_is_not_there(tmp_path):
    """:memory: and the URI form (its own mode) open as before; a file removed after the engine was
    made is still not created (SQLite's mode=rw), the connection fails instead."""
    for url in ("sqlite://", "sqlite:///:memory:", f"sqlite:///file:{tmp_path / 'uri.db'}?mode=rwc&uri=true"):
        engine = make_engine(url, must_exist=True)
        with engine.connect() as connection:
            assert connection.execute(sa.text("SELECT 1")).scalar() == 1
        engine.dispose()
    assert (tmp_path / "uri.db").exists()  # the URI's own mode=rwc created it, as the URL asked

    missing = tmp_path / "missing.db"
    with pytest.raises(errors.NotFound, match=f"^no SQLite database at {missing}; nothing was created: "):
        make_engine(f"sqlite:///{missing}", must_exist=True)
    there = tmp_path / "there.db"
    sqlite3.connect(there).close()
    engine = make_engine(f"sqlite:///{there}", must_exist=True)
    with engine.connect() as connection:
        assert connection.execute(sa.text("SELECT 1")).scalar() == 1
    there.unlink()
    with pytest.raises(sa.exc.OperationalError, match="unable to open database file"):
        engine.connect()
    assert not there.exists()
    engine.dispose()
    make_engine(f"sqlite:///{missing}").dispose()  # without must_exist: as before (creates on connect)
