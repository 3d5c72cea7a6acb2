"""sqltransport-schema check: a deployed database compared with the topology its stamp records,
on real SQLite and PostgreSQL, drifted on purpose one difference at a time."""

from __future__ import annotations

import json

import pytest
from alembic import command

from sqltransport_schema import cli
from sqltransport_schema.check import diff
from sqltransport_schema.engines import get
from sqltransport_schema.schema import Blueprint, Kind, TableName, TableSpec
from sqltransport_schema.shapes import normalise_predicate, where_clause
from sqltransport_schema.versions import profile

from .support import catalog

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a]
queues:
  - name: error
"""
WITH_AUDIT = TOPOLOGY + "  - name: audit\n"


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def table(url: str, name: str) -> str:
    return name if is_sqlite(url) else f"public.{name}"


def q(url: str, name: str) -> str:
    quoted = '"' + name.replace('"', '""') + '"'
    return quoted if is_sqlite(url) else '"public".' + quoted


def run(project, url: str, *extra: str) -> int:
    return cli.main(["check", "--url", url, "-c", str(project.ini), *extra])


def findings(project, url: str, capsys) -> tuple[int, list[tuple[str, str | None]], dict]:
    code = run(project, url, "--format", "json")
    payload = json.loads(capsys.readouterr().out)
    return code, [(f["category"], f["table"]) for f in payload["findings"]], payload


@pytest.fixture
def deployed(project, db_url, capsys):
    project.deploy(db_url, TOPOLOGY)
    capsys.readouterr()
    return db_url


def test_clean_database_is_in_sync(project, deployed, capsys):
    assert run(project, deployed) == 0
    assert capsys.readouterr().out == "in sync\n"
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found, payload["status"]) == (0, [], "in_sync")
    assert payload["deployed_revision"] == payload["head_revision"] == project.head()
    assert payload["unapplied_revisions"] == [] and payload["counts"] == {}


def test_dropped_index(project, deployed, capsys):
    catalog.execute(deployed, f"DROP INDEX {q(deployed, 'Sales.Delayed_Due')}")
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found) == (1, [("missing_index", table(deployed, "Sales.Delayed"))])
    assert "Sales.Delayed_Due" in payload["findings"][0]["detail"]


def test_renamed_index_is_one_finding(project, deployed, capsys):
    if is_sqlite(deployed):  # SQLite cannot rename an index: the same index made under another name
        catalog.execute(deployed, 'DROP INDEX "Sales.Delayed_Due"', 'CREATE INDEX "DueIndex" ON "Sales.Delayed" (Due)')
    else:
        catalog.execute(deployed, f'ALTER INDEX {q(deployed, "Sales.Delayed_Due")} RENAME TO "DueIndex"')
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found) == (1, [("index_name", table(deployed, "Sales.Delayed"))])
    assert payload["findings"][0]["detail"] == "index Sales.Delayed_Due on (due) is named DueIndex"


def test_changed_index_predicate(project, deployed, capsys):
    if is_sqlite(deployed):
        catalog.execute(deployed, 'DROP INDEX "Sales_Expires"', 'CREATE INDEX "Sales_Expires" ON "Sales" (Expires)')
        where = "Sales"
    else:
        catalog.execute(
            deployed,
            f"DROP INDEX {q(deployed, 'Sales.Delayed_Due')}",
            f"""CREATE INDEX "Sales.Delayed_Due" ON {q(deployed, 'Sales.Delayed')} (Due) WHERE Due > '2000-01-01'""",
        )
        where = "Sales.Delayed"
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found) == (1, [("index_predicate", table(deployed, where))])


def test_extra_column(project, deployed, capsys):
    catalog.execute(deployed, f"ALTER TABLE {q(deployed, 'error')} ADD COLUMN Note TEXT")
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found) == (1, [("extra_column", table(deployed, "error"))])
    assert payload["findings"][0]["detail"] == "note (text null)"


def test_changed_column_type(project, deployed, capsys):
    if is_sqlite(deployed):  # SQLite alters no types: rebuild the table as the migrations did, Headers changed
        engine = get("sqlite")
        create = engine.create_queue(TableSpec(Kind.QUEUE, TableName("error")), profile("9.1"))
        create[0] = create[0].replace("Headers TEXT NOT NULL", "Headers VARCHAR(100) NOT NULL")
        catalog.execute(deployed, 'DROP TABLE "error"', *create)
        expected = "headers: expected text not null, found varchar(100) not null"
    else:
        catalog.execute(deployed, f"ALTER TABLE {q(deployed, 'error')} ALTER COLUMN Headers TYPE varchar(100)")
        expected = "headers: expected text not null, found character varying(100) not null"
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found) == (1, [("column_type", table(deployed, "error"))])
    assert payload["findings"][0]["detail"] == expected


def test_nullability_is_part_of_the_column_type(project, pg_url, capsys):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(pg_url)
    catalog.execute(pg_url, 'ALTER TABLE "public"."error" ALTER COLUMN Headers DROP NOT NULL')
    capsys.readouterr()
    code, found, payload = findings(project, pg_url, capsys)
    assert (code, found) == (1, [("column_type", "public.error")])
    assert payload["findings"][0]["detail"] == "headers: expected text not null, found text null"


def test_missing_table(project, deployed, capsys):
    catalog.execute(deployed, f"DROP TABLE {q(deployed, 'error')}")
    code, found, _ = findings(project, deployed, capsys)
    assert (code, found) == (1, [("missing_table", table(deployed, "error"))])


def test_unmanaged_table_is_information_only(project, deployed, capsys):
    catalog.execute(deployed, f"CREATE TABLE {q(deployed, 'Stranger')} (x INTEGER)")
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found, payload["status"]) == (0, [("unmanaged_table", table(deployed, "Stranger"))], "in_sync")
    assert payload["findings"][0]["severity"] == "info"
    assert run(project, deployed) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "in sync" and lines[0].startswith("info: unmanaged_table: ")


def test_unapplied_revision(project, deployed, capsys):
    first = project.head()
    project.write_topology(WITH_AUDIT)
    assert project.compile("add audit") == 0
    capsys.readouterr()
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found) == (1, [("unapplied_revisions", None)])
    assert payload["deployed_revision"] == first
    assert payload["unapplied_revisions"] == [project.head()]


def test_table_of_another_revision_is_extra_managed(project, deployed, capsys):
    project.write_topology(WITH_AUDIT)
    project.compile("add audit")
    project.upgrade(deployed)
    audit = project.head()
    project.write_topology(TOPOLOGY + "drop_protected:\n  - name: audit\n")
    assert project.compile("drop audit") == 0
    command.stamp(project.config(deployed), "head")  # stamped, never run: audit is still there
    capsys.readouterr()
    code, found, payload = findings(project, deployed, capsys)
    assert (code, found) == (1, [("extra_managed_table", table(deployed, "audit"))])
    assert audit in payload["findings"][0]["detail"]


def test_several_differences_each_once_in_markdown(project, deployed, capsys):
    catalog.execute(
        deployed,
        f"DROP TABLE {q(deployed, 'error')}",
        f"ALTER TABLE {q(deployed, 'Sales')} ADD COLUMN Note TEXT",
        f"CREATE TABLE {q(deployed, 'Stranger')} (x INTEGER)",
    )
    code, found, payload = findings(project, deployed, capsys)
    assert code == 1
    assert sorted(found) == sorted(
        [
            ("missing_table", table(deployed, "error")),
            ("extra_column", table(deployed, "Sales")),
            ("unmanaged_table", table(deployed, "Stranger")),
        ]
    )
    assert payload["counts"] == {"missing_table": 1, "extra_column": 1, "unmanaged_table": 1}
    assert run(project, deployed, "--format", "markdown") == 1
    text = capsys.readouterr().out
    assert text.startswith("### sqltransport-schema check: drift (2 difference(s))")
    assert "| Severity | Category | Table | Detail |" in text
    assert sum(line.startswith("| drift |") for line in text.splitlines()) == 2


def test_database_not_stamped_is_an_error(project, db_url, capsys):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    if is_sqlite(db_url):
        catalog.execute(db_url, "CREATE TABLE t (x INTEGER)")  # the file exists, unstamped
    capsys.readouterr()
    assert run(project, db_url) == 2
    assert "stamped with 0 revisions" in capsys.readouterr().err


def test_unreachable_database_is_an_error(project, capsys, tmp_path):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    capsys.readouterr()
    assert run(project, "postgresql://postgres@127.0.0.1:1/nowhere", "--format", "json") == 2
    assert json.loads(capsys.readouterr().out)["status"] == "error"
    assert run(project, f"sqlite:///{tmp_path / 'missing.db'}") == 2
    assert "no SQLite database" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()


def test_missing_config_is_an_error(tmp_path, sqlite_url, capsys):
    assert cli.main(["check", "--url", sqlite_url, "-c", str(tmp_path / "nope.ini")]) == 2
    assert "no such Alembic configuration" in capsys.readouterr().err


# ------------------------------------------------------------------ the pure core, no database
def test_predicates_normalise_alike():
    assert normalise_predicate("(expires IS NOT NULL)") == normalise_predicate("WHERE Expires IS NOT NULL") == "expiresisnotnull"
    assert normalise_predicate(where_clause('CREATE INDEX "a where b" ON "t" (Expires) WHERE [Expires] IS NOT NULL')) == "expiresisnotnull"
    assert where_clause('CREATE INDEX "x" ON "where" (Due)') is None


def test_diff_reports_an_empty_database_as_missing_tables():
    engine = get("postgresql")
    expected = Blueprint(
        "9.1", ("postgresql",), (TableSpec(Kind.QUEUE, TableName("Sales")), TableSpec(Kind.QUEUE, TableName("error", "ops")))
    )
    report = diff(expected, "a", "a", {}, engine=engine)
    assert [(f.category, f.table) for f in report.findings] == [("missing_table", "ops.error"), ("missing_table", "public.Sales")]
    assert not report.in_sync


RICH = """\
transport_version: "9.1"
postgresql:
  seq_type: bigserial
endpoints:
  - name: Billing
    schema: billing
    body_string: true
    instances: [b-1]
subscriptions:
  table: Subs
  schema: billing
"""


def test_schemas_body_string_and_bigserial_are_in_sync(project, db_url, capsys):
    project.deploy(db_url, RICH, "rich")
    capsys.readouterr()
    assert run(project, db_url) == 0
    assert capsys.readouterr().out == "in sync\n"


def test_older_transport_version_on_sqlite(project, sqlite_url, capsys):
    project.deploy(sqlite_url, 'transport_version: "3.0"\nengines: [sqlite]\nendpoints:\n  - name: Sales\n', "old")
    capsys.readouterr()
    assert run(project, sqlite_url) == 0, capsys.readouterr()
    assert capsys.readouterr().out == "in sync\n"


def test_check_with_url_runs_from_a_folder_without_alembic_ini(project, pg_url, tmp_path, monkeypatch, capsys):
    project.deploy(pg_url, TOPOLOGY)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert cli.main(["check", "--url", pg_url]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "in sync" and "note: no alembic.ini" in out
    _sql(pg_url, 'ALTER TABLE "public"."Sales" ADD COLUMN extra int')
    assert cli.main(["check", "--url", pg_url, "--format", "json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert [(f["category"], f["table"]) for f in payload["findings"]] == [("extra_column", "public.Sales")]
    assert payload["head_revision"] is None and payload["notes"][0].startswith("no alembic.ini")
    assert list(elsewhere.iterdir()) == []


def _sql(url: str, statement: str) -> None:
    from sqltransport_schema.db import make_engine

    engine = make_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(statement)
    engine.dispose()
