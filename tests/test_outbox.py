"""SQL persistence's outbox table (docs/outbox.md): `outbox: true` on an endpoint, its DDL per engine as
the installer leaves it (live on SQLite, PostgreSQL and MariaDB; SQL Server and Oracle as golden text,
SQL Server parsed as T-SQL), adoption of an installer-made table without a second index, drift, and
the drop refused while a message is not dispatched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.util import CommandError

from sqltransport_schema import cli, engines
from sqltransport_schema.grants import runtime_plan
from sqltransport_schema.schema import Kind, TableName, TableSpec, blueprint
from sqltransport_schema.topology import TopologyError, loads

from .support.catalog import execute
from .support.databases import connect
from .support.golden import assert_golden, render
from .support.scripts import run_pg, script, split
from .support.tsql import GO_LINE, assert_parses

HEAD = 'transport_version: "9.1"\nengines: [sqlite, postgresql, mysql]\nendpoints:\n  - name: Sales.Api\n'
WITH_OUTBOX = HEAD + "    outbox: true\n"
TABLE = "Sales_Api_OutboxData"
SPEC = TableSpec(Kind.OUTBOX, TableName(TABLE), saga_prefix="Sales_Api_")
BILLING = TableSpec(Kind.OUTBOX, TableName("Bill_OutboxData", "billing", "finance"), saga_prefix="Bill_")


# --------------------------------------------------------------------------- topology
def test_outbox_true_declares_the_endpoints_outbox_table_with_its_saga_prefix():
    topology = loads(WITH_OUTBOX + "    table_prefix: Orders_\n    sagas:\n      - name: OrderSaga\n")
    tables = {spec.name.table: spec for spec in blueprint(topology).tables}
    assert tables["Orders_OutboxData"] == TableSpec(Kind.OUTBOX, TableName("Orders_OutboxData"), saga_prefix="Orders_")
    assert blueprint(topology).tables[-1].kind is Kind.OUTBOX  # after the saga tables
    assert TABLE not in {spec.name.table for spec in blueprint(loads(HEAD)).tables}


def test_a_send_only_endpoint_has_no_outbox():
    with pytest.raises(TopologyError, match="send-only and handles no messages, so it has no outbox"):
        loads(WITH_OUTBOX + "    send_only: true\n")


def test_oracle_limits_the_outbox_tables_prefix():
    text = WITH_OUTBOX.replace("[sqlite, postgresql, mysql]", "[oracle]") + "    table_prefix: A_very_long_table_prefix_of_30_\n"
    with pytest.raises(TopologyError, match="outbox table of endpoint 'Sales.Api' on oracle: table prefix"):
        loads(text)


def test_the_snapshot_round_trips_an_outbox_table():
    from sqltransport_schema.schema import Blueprint

    print_ = blueprint(loads(WITH_OUTBOX))
    assert '"kind": "outbox", "table": "Sales_Api_OutboxData", "endpoint": "Sales.Api", "prefix": "Sales_Api_"' in print_.to_snapshot()
    read = Blueprint.from_snapshot(print_.to_snapshot())
    assert read.tables == print_.tables
    assert read.owners == print_.owners == {print_.tables[-1].name: "Sales.Api"}  # the endpoint it belongs to


def test_the_runtime_login_of_the_endpoint_may_use_its_outbox_only():
    text = WITH_OUTBOX + "  - name: Billing\n    schema: billing\n    outbox: true\n"
    plan = runtime_plan(loads(text), "Sales.Api")
    assert [(g.need, g.table.table) for g in plan.tables if g.need == "outbox"] == [("outbox", TABLE)]
    grants = "\n".join(engines.get("postgresql").grants.runtime(plan, "sales"))
    assert f'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "public"."{TABLE}" TO "sales";' in grants
    assert "Billing_OutboxData" not in grants


# --------------------------------------------------------------------------- DDL text per engine
def lifecycle(engine_name: str, spec: TableSpec) -> list[tuple[str, list[str]]]:
    engine = engines.get(engine_name)
    return [
        ("create_outbox_table", engine.create_outbox(spec)),
        ("drop_outbox_table (refused while a message is not dispatched)", engine.drop_table(spec, None, discard_messages=False)),
        ("drop_outbox_table (discarding)", engine.drop_table(spec, None, discard_messages=True)),
    ]


def test_mssql_outbox_ddl_matches_the_golden_script():
    assert_golden("mssql_outbox.sql", render("mssql", [SPEC._replace(name=TableName(TABLE, "dbo")), BILLING], "GO", lifecycle))


def test_mssql_outbox_follows_upstream_conformance_8():
    create = "\n".join(engines.get("mssql").create_outbox(SPEC))
    for column in (
        "MessageId nvarchar(200) NOT NULL PRIMARY KEY NONCLUSTERED",
        "Dispatched bit NOT NULL DEFAULT 0",
        "DispatchedAt datetime,",
        "PersistenceVersion varchar(23) NOT NULL",
        "Operations nvarchar(max) NOT NULL",
    ):
        assert column in create
    assert f"CREATE INDEX Index_DispatchedAt ON [dbo].[{TABLE}] (DispatchedAt)\n    WHERE Dispatched = 1;" in create


MSSQL_BATCHES = {
    f"{label}#{i}:{spec.name.table}": sql
    for spec in (SPEC, BILLING)
    for label, batches in lifecycle("mssql", spec)
    for i, sql in enumerate(batches)
}


@pytest.mark.parametrize("label", list(MSSQL_BATCHES))
def test_mssql_outbox_batches_parse_as_tsql(label):
    assert_parses(MSSQL_BATCHES[label], label)


def test_oracle_outbox_ddl_matches_the_golden_script():
    assert_golden("oracle_outbox.sql", render("oracle", [SPEC], "/", lifecycle))


def test_oracle_names_the_outbox_as_sql_persistence_does():
    oracle = engines.get("oracle")
    create = "\n".join(oracle.create_outbox(SPEC))
    assert 'CREATE TABLE "SALES_API_OD"' in create
    assert 'CONSTRAINT "SALES_API_OD_PK" PRIMARY KEY (MESSAGEID)' in create
    assert 'CREATE INDEX "SALES_API_OD_IX" ON "SALES_API_OD" (DISPATCHED, DISPATCHEDAT)' in create
    assert "DISPATCHED NUMBER(1,0) DEFAULT 0 NOT NULL CHECK (DISPATCHED IN (0, 1))" in create


def test_postgresql_index_names_are_the_installers_unprefixed_ones():
    create = engines.get("postgresql").create_outbox(SPEC)
    assert create[1:] == [
        f'CREATE INDEX IF NOT EXISTS "Index_DispatchedAt" ON "public"."{TABLE}" USING btree ("DispatchedAt" ASC NULLS LAST)',
        f'CREATE INDEX IF NOT EXISTS "Index_Dispatched" ON "public"."{TABLE}" USING btree ("Dispatched" ASC NULLS LAST)',
    ]


# --------------------------------------------------------------------------- compile
def test_compile_creates_and_drops_the_outbox_table(project):
    project.write_topology(WITH_OUTBOX)
    assert project.compile("outbox") == 0
    text = project.revisions()[-1].read_text()
    assert f'op.create_outbox_table("{TABLE}", prefix="Sales_Api_")' in text
    assert f'op.drop_outbox_table("{TABLE}", prefix="Sales_Api_")' in text  # the downgrade
    project.write_topology(HEAD)
    assert project.compile("no outbox") == 0
    assert f'op.drop_outbox_table("{TABLE}", prefix="Sales_Api_")' in project.revisions()[-1].read_text().split("def downgrade")[0]
    assert cli.main(["compile", "--check", "-c", str(project.ini), "--topology", str(project.topology)]) == 0


# --------------------------------------------------------------------------- live: SQLite, PostgreSQL, MariaDB
def _quote(url: str, name: str = TABLE) -> str:
    return f"`{name}`" if url.startswith("mysql") else f'"{name}"'


def indexes(url: str) -> list[tuple[str, tuple[str, ...]]]:
    db = connect(url)
    try:
        return sorted((i["name"], tuple(c.lower() for c in i["column_names"])) for i in sa.inspect(db).get_indexes(TABLE))
    finally:
        db.dispose()


def store(url: str, message_id: str, dispatched: bool = False) -> None:
    flag = ("true" if dispatched else "false") if url.startswith("postgresql") else ("1" if dispatched else "0")
    columns = '"MessageId", "Dispatched", "PersistenceVersion", "Operations"' if url.startswith("postgresql") else None
    columns = columns or "MessageId, Dispatched, PersistenceVersion, Operations"
    execute(url, f"INSERT INTO {_quote(url)} ({columns}) VALUES ('{message_id}', {flag}, '8.0.0', '[]')")


def findings(project, url: str, capsys) -> tuple[int, list[tuple[str, str]]]:
    capsys.readouterr()
    code = cli.main(["check", "--url", url, "-c", str(project.ini), "--format", "json"])
    payload = json.loads(capsys.readouterr().out)
    return code, [(f["category"], f["detail"]) for f in payload["findings"]]


def expected_indexes(url: str) -> list[tuple[str, tuple[str, ...]]]:
    prefix = f"{TABLE}_" if url.startswith("sqlite") else ""
    return sorted([(prefix + "Index_Dispatched", ("dispatched",)), (prefix + "Index_DispatchedAt", ("dispatchedat",))])


def test_the_outbox_is_created_checked_and_its_drift_found(project, saga_db, capsys):
    url = project.deploy(saga_db, WITH_OUTBOX, "outbox")
    assert indexes(url) == expected_indexes(url)
    store(url, "m-1")
    assert findings(project, url, capsys) == (0, [])
    index = expected_indexes(url)[0][0]
    execute(url, f"DROP INDEX {_quote(url, index)}" + (f" ON {_quote(url)}" if url.startswith("mysql") else ""))
    code, found = findings(project, url, capsys)
    assert code == 1 and any(index in detail for _category, detail in found), found


TWO_OUTBOXES = (
    'transport_version: "9.1"\nengines: [postgresql]\nendpoints:\n  - name: Sales\n    outbox: true\n  - name: Billing\n    outbox: true\n'
)


def test_two_outboxes_in_one_postgresql_schema_are_refused_with_the_fix(tmp_path, capsys):
    (tmp_path / "topology.yaml").write_text(TWO_OUTBOXES)
    assert cli.main(["validate", "--topology", str(tmp_path / "topology.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {tmp_path / 'topology.yaml'}:7:13: endpoint 'Billing' has an outbox"), err
    assert "as endpoint 'Sales' (at" in err[0] and ":5:13)" in err[0]
    assert "Index_DispatchedAt and Index_Dispatched" in err[0] and "CREATE INDEX IF NOT EXISTS" in err[0]
    assert "Give endpoint 'Billing' its own schema (schema: under the endpoint)" in err[0]
    loads(TWO_OUTBOXES.replace("[postgresql]", "[sqlite, mysql, mssql]"))  # index names per table, or prefixed: no clash


def test_two_outboxes_in_two_postgresql_schemas_keep_upstreams_index_names_and_check_in_sync(project, pg_url, capsys):
    url = project.deploy(pg_url, TWO_OUTBOXES + "    schema: billing\n", "two outboxes")
    db = connect(url)
    try:
        inspector = sa.inspect(db)
        found = {
            (schema, i["name"])
            for schema, table in (("public", "Sales_OutboxData"), ("billing", "Billing_OutboxData"))
            for i in inspector.get_indexes(table, schema=schema)
        }
    finally:
        db.dispose()
    names = {"Index_DispatchedAt", "Index_Dispatched"}
    assert found == {("public", name) for name in names} | {("billing", name) for name in names}
    assert findings(project, url, capsys) == (0, [])


def test_the_drop_is_refused_while_a_message_is_not_dispatched(project, saga_db):
    url = project.deploy(saga_db, WITH_OUTBOX, "outbox")
    store(url, "m-1", dispatched=True)
    store(url, "m-2")
    project.write_topology(HEAD)
    assert project.compile("no outbox") == 0
    with pytest.raises(CommandError, match="refusing to drop outbox table"):
        project.upgrade(url)
    execute(url, f"UPDATE {_quote(url)} SET {_quote(url, 'Dispatched')} = {'true' if url.startswith('postgresql') else '1'}")
    project.upgrade(url)  # dispatched rows wait for cleanup only: the drop goes ahead
    db = connect(url)
    try:
        assert TABLE not in sa.inspect(db).get_table_names()
    finally:
        db.dispose()


def test_a_discarded_outbox_is_dropped_with_its_undispatched_messages(project, saga_db):
    url = project.deploy(saga_db, WITH_OUTBOX, "outbox")
    store(url, "m-1")
    project.write_topology(HEAD + f"discard:\n  - name: {TABLE}\n")
    assert project.compile("discard the outbox") == 0
    assert "discard_messages=True" in project.revisions()[-1].read_text()
    project.upgrade(url)
    db = connect(url)
    try:
        assert TABLE not in sa.inspect(db).get_table_names()
    finally:
        db.dispose()


# The installer's DDL, written here from upstream-conformance §8 (PostgreSQL and MySQL).
INSTALLER = {
    "postgresql": [
        f'''create table if not exists "public"."{TABLE}" (
            "MessageId" character varying(200) primary key,
            "Dispatched" boolean not null default false,
            "DispatchedAt" timestamp,
            "PersistenceVersion" character varying(23),
            "Operations" jsonb not null)''',
        f'create index if not exists "Index_DispatchedAt" on "public"."{TABLE}" using btree ("DispatchedAt" asc nulls last)',
        f'create index if not exists "Index_Dispatched" on "public"."{TABLE}" using btree ("Dispatched" asc nulls last)',
    ],
    "mysql": [
        f"""create table if not exists `{TABLE}` (
            MessageId nvarchar(200) not null,
            Dispatched bit not null default 0,
            DispatchedAt datetime,
            PersistenceVersion varchar(23) not null,
            Operations json not null,
            primary key (MessageId)) default charset=ascii""",
        f"create index Index_DispatchedAt on `{TABLE}` (DispatchedAt)",
        f"create index Index_Dispatched on `{TABLE}` (Dispatched)",
    ],
}


@pytest.mark.parametrize("engine", ["postgresql", "mysql"])
def test_an_installer_made_outbox_is_adopted_without_a_second_index(project, engine, request, capsys):
    url = request.getfixturevalue("pg_url" if engine == "postgresql" else "mysql_url")
    execute(url, *INSTALLER[engine])
    store(url, "m-1")
    before = indexes(url)
    project.write_topology(WITH_OUTBOX)
    assert project.compile("outbox") == 0
    capsys.readouterr()
    code = cli.main(["adopt", "--url", url, "-c", str(project.ini), "--format", "json", "--apply"])
    report = json.loads(capsys.readouterr().out)
    (outbox,) = [t for t in report["tables"] if t["kind"] == "outbox"]
    assert outbox["status"] == "matches", report
    assert code == 0, report
    project.upgrade(url)  # a run of the create over the installer's table adds nothing
    assert indexes(url) == before == expected_indexes(url)
    assert findings(project, url, capsys) == (0, [])


# --------------------------------------------------------------------------- status
def test_status_reports_waiting_and_dispatched_outbox_rows(project, db_url, capsys):
    url = project.deploy(db_url, WITH_OUTBOX.replace("[sqlite, postgresql, mysql]", "[sqlite, postgresql]"), "outbox")
    store(url, "m-1")
    store(url, "m-2")
    store(url, "m-3", dispatched=True)
    stamp = "2020-01-01 00:00:00"
    execute(url, f"UPDATE {_quote(url)} SET {_quote(url, 'DispatchedAt')} = '{stamp}' WHERE {_quote(url, 'MessageId')} = 'm-3'")
    capsys.readouterr()
    assert cli.main(["status", "--url", url, "-c", str(project.ini), "--format", "json"]) == 0
    (outbox,) = [t for t in json.loads(capsys.readouterr().out)["tables"] if t["kind"] == "outbox"]
    assert (outbox["name"], outbox["depth"], outbox["undispatched"], outbox["dispatched"]) == (TABLE, 3, 2, 1)
    assert outbox["oldest_dispatched_at"].startswith("2020-01-01T00:00:00") and outbox["oldest_dispatched_age_seconds"] > 3600
    assert cli.main(["status", "--url", url, "-c", str(project.ini)]) == 0
    assert "2 not dispatched, 1 dispatched awaiting cleanup" in capsys.readouterr().out


# --------------------------------------------------------------------------- scripts
SCRIPTED = 'transport_version: "9.1"\nengines: [mssql, postgresql]\nendpoints:\n  - name: Sales.Api\n    outbox: true\n'


def test_postgresql_script_creates_the_outbox_in_its_endpoints_file_and_runs_twice(project, pg_url, tmp_path, capsys):
    project.write_topology(SCRIPTED)
    assert project.compile("outbox") == 0
    files = split(project, tmp_path, "postgresql")
    assert f'"{TABLE}"' in files["01-Sales.Api.sql"] and f'"{TABLE}"' not in files["00-shared.sql"]
    for _ in range(2):
        for text in files.values():
            run_pg(pg_url, text)
    assert indexes(pg_url) == expected_indexes(pg_url)
    assert findings(project, pg_url, capsys) == (0, [])


def test_mssql_script_holds_the_outbox_and_parses(project, tmp_path):
    project.write_topology(SCRIPTED)
    assert project.compile("outbox") == 0
    whole = script(project, tmp_path, "mssql")
    assert f"CREATE TABLE [dbo].[{TABLE}]" in whole and "CREATE INDEX Index_DispatchedAt" in whole
    for i, chunk in enumerate(c for c in GO_LINE.split(whole) if c.strip()):
        assert_parses(chunk, f"batch {i}")


def test_docs_describe_the_outbox():
    text = (Path(__file__).resolve().parents[1] / "docs" / "outbox.md").read_text(encoding="utf-8")
    for word in ("outbox: true", "OutboxData", "Index_DispatchedAt", "discard:", "check", "adopt"):
        assert word in text
