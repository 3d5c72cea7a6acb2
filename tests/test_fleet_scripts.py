"""fleet script: per target in its role, run with psql on real PostgreSQL databases (a tenant
database's script builds the tenant tables and nothing else, the shared one the rest); and per stage
for SQL Server catalogs of one server (--per-stage), each target's section after a USE of its
catalog, parsed by sqlfluff's tsql dialect (SQL Server cannot run here: where the targets are is
--from's, none of them read)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from sqltransport_schema import engines, schema, topology
from sqltransport_schema.schema import SHARED, TENANT

from .support.fleets import SECRET, pg_databases, pg_url, run_fleet, stamps
from .support.tsql import GO_LINE, assert_parses, tokenize
from .test_fleet_postgresql import example, no_secret, revisions  # noqa: F401 - example: the fixture
from .test_tenants import example_with_placement, expected, tables

MSSQL = engines.get("mssql").script
DRIVER = "driver=ODBC+Driver+18+for+SQL+Server"
ODD = "o'brien]s"  # a target, and its catalog, whose name holds a quote and a closing bracket


def mssql_fleet(root, names: list[str], stages: str, server: str = "sqlhost") -> None:
    template = f"mssql+pyodbc://app:${{FLEET_MSSQL_PASSWORD}}@{server}/tenant_{{name}}?{DRIVER}"
    listed = ", ".join(json.dumps(n) for n in names)
    (root / "fleet.yaml").write_text(f"url_template: {template}\nnames: [{listed}]\n{stages}", encoding="utf-8")


def sections(text: str) -> dict[str, str]:
    """A stage's script by target: each section from its `-- target:` line to the next one."""
    parts = re.split(r"^(?=-- target: )", text, flags=re.M)
    return {part.split(" ", 3)[2]: part for part in parts[1:]}


def without_date(text: str) -> str:
    return re.sub(r"^-- generated: .*$", "-- generated:", text, flags=re.M)


# --------------------------------------------------------------------------- SQL Server, one script per stage
@pytest.mark.slow
def test_a_stage_script_runs_each_catalogs_section_after_its_use(example, tmp_path):
    revs = revisions(example)
    stages = "stages:\n  - name: canary\n    targets: [acme]\n  - name: rest\n"
    mssql_fleet(example, ["acme", "globex", ODD], stages)
    env = {"FLEET_MSSQL_PASSWORD": SECRET}
    out = tmp_path / "stages"
    result = run_fleet(example, "script", "--out-dir", str(out), "--per-stage", "--from", "base", **env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["canary.sql", "rest.sql"]
    raw = (out / "rest.sql").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and raw.count(b"\xef\xbb\xbf") == 1  # one byte-order mark, as `script -o` writes
    rest = raw.decode("utf-8-sig")
    assert rest.startswith("-- sqltransport-schema deployment script of stage rest: 2 target(s), catalogs on sqlhost\n")
    by_target = sections(rest)
    assert list(by_target) == ["globex", ODD]
    per_target = tmp_path / "targets"
    assert run_fleet(example, "script", "--out-dir", str(per_target), "--from", "base", **env).returncode == 0
    for name, section in by_target.items():
        url = f"mssql+pyodbc://app:***@sqlhost/tenant_{name}?{DRIVER}".replace("'", "%27").replace("]", "%5D")
        head, use = section.split("\n", 1)[0], section.split("\n")[1:3]
        assert head == f"-- target: {name} ({url}), from <base> to {revs[-1]}"
        # the USE and its PRINT: the catalog bracket-quoted (] doubled), the target's name a literal (' doubled)
        tokens = [(t.kind, t.value) for t in tokenize("\n".join(use))]
        assert tokens == [
            ("word", "USE"), ("ident", f"tenant_{name}"), ("punct", ";"),
            ("word", "PRINT"), ("string", f"sqltransport-schema: target {name}"), ("punct", ";"),
        ]  # fmt: skip
        assert section.split("\n")[3:6] == ["", "GO", ""]
        # the section is the target's own script (as fleet script writes it alone), but for the batch that
        # turns execution back on after an error: the file's last, so an error stops every section after it
        alone = (per_target / f"{name}.sql").read_text(encoding="utf-8-sig")
        assert alone.startswith(head + "\n") and alone.endswith(MSSQL.CLOSING)
        body = section.split("\n", 6)[6].removesuffix(MSSQL.CLOSING).rstrip("\n")
        assert without_date(body) == without_date(alone.split("\n", 1)[1].removesuffix(MSSQL.CLOSING).rstrip("\n"))
        assert "IF OBJECT_ID(N'alembic_version', N'U') IS NULL" in section  # safe to run again: script's guards
        assert MSSQL.FIRST_STAMP.format(rev=revs[0]) in section
    assert rest.count(MSSQL.CLOSING) == 1 and rest.endswith(MSSQL.CLOSING)
    # every batch parses as T-SQL, but the USE of a catalog whose name holds `]]` (sqlfluff rejects `]]`
    # inside brackets: tests/support/tsql.py; the tokenizer read it above)
    canary = (out / "canary.sql").read_text(encoding="utf-8-sig")
    assert list(sections(canary)) == ["acme"] and "USE [tenant_acme];\nPRINT N'sqltransport-schema: target acme';\n" in canary
    for label, text in (("canary", canary), ("rest", rest)):
        for index, batch in enumerate(b for b in GO_LINE.split(text) if b.strip()):
            if "USE [tenant_o'brien]]s]" not in batch:
                assert_parses(batch, f"{label} batch {index}")
    no_secret(result.stdout, result.stderr, canary, rest)


@pytest.mark.slow
def test_where_sql_server_targets_are_comes_from_from_or_from_each_database(example, tmp_path):
    revs = revisions(example)
    mssql_fleet(example, ["acme", "globex"], "")
    env = {"FLEET_MSSQL_PASSWORD": SECRET}
    out = tmp_path / "from-first"
    result = run_fleet(example, "script", "--out-dir", str(out), "--per-stage", "--from", revs[0], **env)
    assert result.returncode == 0, result.stdout + result.stderr
    text = (out / "all.sql").read_text(encoding="utf-8-sig")
    assert [s.split("\n", 1)[0].rsplit(", ", 1)[1] for s in sections(text).values()] == [f"from {revs[0]} to {revs[-1]}"] * 2
    assert f"-- Running upgrade  -> {revs[0]}" not in text and f"-- Running upgrade {revs[0]} -> {revs[1]}" in text
    at_head = run_fleet(example, "script", "--out-dir", str(tmp_path / "none"), "--per-stage", "--from", "head", **env)
    assert at_head.returncode == 0 and not list((tmp_path / "none").glob("*"))
    assert at_head.stderr.splitlines() == ["at revision acme: no script", "at revision globex: no script"]
    # without --from each target is read, as the per-target form reads it: here no SQL Server answers
    read = run_fleet(example, "script", "--out-dir", str(tmp_path / "read"), "--per-stage", **env)
    assert read.returncode == 1, read.stdout + read.stderr
    assert [line.split(":")[0] for line in read.stderr.splitlines()] == ["failed acme", "failed globex"]
    unknown = run_fleet(example, "script", "--out-dir", str(tmp_path / "x"), "--from", "nosuchrev", **env)
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: --from nosuchrev:")
    no_secret(result.stdout, result.stderr, read.stdout, read.stderr, text)


@pytest.mark.slow
def test_a_stage_script_takes_catalogs_of_one_sql_server_only(example, tmp_path):
    env = {"FLEET_MSSQL_PASSWORD": SECRET}
    (example / "fleet.yaml").write_text(
        f"targets:\n  - name: a\n    url: mssql+pyodbc://app@one/a?{DRIVER}\n  - name: b\n    url: mssql+pyodbc://app@two/b?{DRIVER}\n"
        "  - name: pg\n    url: postgresql://postgres@127.0.0.1/app\n"
        "stages:\n  - name: sql\n    targets: [a, b]\n  - name: rest\n"
    )
    mixed = run_fleet(
        example, "script", "--out-dir", str(tmp_path / "m"), "--per-stage", "--from", "base", "--only", "a", "--only", "pg", **env
    )
    assert mixed.returncode == 2
    assert mixed.stderr.startswith("error: --per-stage: target pg is a postgresql database; a stage's script is for SQL Server catalogs")
    servers = run_fleet(example, "script", "--out-dir", str(tmp_path / "s"), "--per-stage", "--from", "base", "--stage", "sql", **env)
    assert servers.returncode == 2
    assert servers.stderr.startswith("error: --per-stage: stage sql's targets are on more than one server: one (a), two (b)")
    assert not (tmp_path / "m").exists() and not (tmp_path / "s").exists()  # nothing written, nothing read


# --------------------------------------------------------------------------- roles, on PostgreSQL
def psql(url: str, path) -> None:
    subprocess.run(["psql", "-v", "ON_ERROR_STOP=1", "-q", "-f", str(path), url], check=True, capture_output=True, text=True)


@pytest.mark.postgresql
@pytest.mark.slow
def test_each_targets_script_builds_its_roles_tables(project, tmp_path):
    project.write_topology(example_with_placement())
    assert project.compile("initial") == 0
    head = project.head()
    with pg_databases(3) as names:
        shared, *tenants = names
        listed = "".join(f"  - name: {n.rsplit('_', 1)[1]}\n    url: {pg_url(n)}\n    role: tenant\n" for n in tenants)
        (project.root / "fleet.yaml").write_text(f"targets:\n  - name: shared\n    url: {pg_url(shared)}\n{listed}", encoding="utf-8")
        out = tmp_path / "scripts"
        result = run_fleet(project.root, "script", "--out-dir", str(out))
        assert result.returncode == 0, result.stdout + result.stderr
        short = [n.rsplit("_", 1)[1] for n in tenants]
        assert sorted(p.name for p in out.iterdir()) == sorted(["shared.sql", *(f"{n}.sql" for n in short)])
        tenant_text = (out / f"{short[0]}.sql").read_text()
        assert tenant_text.splitlines()[0].endswith(f"/{tenants[0]}), role tenant, from <base> to {head}")
        assert "-- database: a tenant database (run it in each one)" in tenant_text
        assert "role" not in (out / "shared.sql").read_text().splitlines()[0]
        for _ in range(2):  # safe to run again
            psql(pg_url(shared), out / "shared.sql")
            for name, database in zip(short, tenants, strict=True):
                psql(pg_url(database), out / f"{name}.sql")
        blueprint = schema.blueprint(topology.load(project.topology))
        assert tables(pg_url(shared)) == expected(blueprint.for_role(SHARED), pg_url(shared))
        for database in tenants:
            assert tables(pg_url(database)) == expected(blueprint.for_role(TENANT), pg_url(database))
            assert stamps(pg_url(database)) == [head]
        assert blueprint.for_role(TENANT).tables and blueprint.for_role(SHARED).tables  # two different sets, both built
        status = run_fleet(project.root, "status", "--check")
        assert status.returncode == 0, status.stdout + status.stderr  # each database as its role's blueprint says
        again = run_fleet(project.root, "script", "--out-dir", str(tmp_path / "again"))
        assert again.returncode == 0 and len(again.stderr.splitlines()) == 3  # every target at the revision: no script
