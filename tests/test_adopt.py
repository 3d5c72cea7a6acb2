"""adopt: databases whose tables NServiceBus installers made, taken over without losing a message.

PostgreSQL databases are built with the PostgreSQL transport's own installer DDL
(transport-facts §7); SQL Server databases, which cannot run here, are catalog rows
shaped as the sys.* queries return them for each release's installer.
"""

from __future__ import annotations

from sqltransport_schema import adopt, cli
from sqltransport_schema.engines.mssql import MSSQL
from sqltransport_schema.schema import Blueprint, Kind, TableName, TableSpec

from .support import catalog
from .support.commands import adopt_cli, check_cli
from .support.installers import INSTALLER
from .support.mssql_catalog import TABLES, queue_columns, queue_index_columns, queue_indexes

TOPOLOGY = """\
transport_version: "9.1"
engines: [postgresql, sqlite]
endpoints:
  - name: Sales
queues:
  - name: error
"""

SEND = """INSERT INTO "public"."Sales" (Id, Expires, Headers, Body) VALUES (gen_random_uuid(), NULL, '{}', '\\x01')"""


def stamp(url):
    try:
        return [row[0] for row in catalog.execute(url, "SELECT version_num FROM alembic_version")]
    except Exception:  # noqa: BLE001 - no version table: not stamped
        return []


def test_installer_made_database_matching_the_head_is_stamped(project, pg_url, capsys):
    catalog.execute(pg_url, *INSTALLER, SEND, SEND)
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0

    code, payload = adopt_cli(project, pg_url, capsys, "--dry-run")
    assert (code, payload["status"], payload["action"]) == (0, "matches_head", "nothing")
    # one layout without BodyString since the transport's first release (each boundary release listed)
    assert payload["made_by"] == ["8.1", "8.1.13", "9.0", "9.0.2", "9.1"]
    assert stamp(pg_url) == []

    code, payload = adopt_cli(project, pg_url, capsys)
    assert (code, payload["action"], payload["matching_revision"]) == (0, "stamped", project.head())
    assert stamp(pg_url) == [project.head()]
    assert check_cli(project, pg_url, capsys) == 0
    assert catalog.read(pg_url)[("public", "Sales")].rows == 2  # nothing touched

    capsys.readouterr()
    assert cli.main(["adopt", "--url", pg_url, "-c", str(project.ini)]) == 2  # a second run: already managed
    assert f"already stamped with {project.head()}" in capsys.readouterr().err


def test_database_at_an_older_revision_is_stamped_there(project, pg_url, capsys):
    catalog.execute(pg_url, *INSTALLER)
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    first = project.head()
    project.write_topology(TOPOLOGY + "  - name: audit\n")
    project.compile("audit")
    code, payload = adopt_cli(project, pg_url, capsys)
    assert (code, payload["status"], payload["matching_revision"]) == (0, "matches_revision", first)
    assert stamp(pg_url) == [first]
    project.upgrade(pg_url)
    assert check_cli(project, pg_url, capsys) == 0


def test_differences_give_the_upgrade_plan_and_apply_runs_it(project, pg_url, capsys):
    """The installer's int4 Seq where the topology wants bigserial, and a queue it never made."""
    catalog.execute(pg_url, *INSTALLER, SEND)
    project.write_topology(TOPOLOGY.replace("engines:", "postgresql:\n  seq_type: bigserial\nengines:") + "  - name: audit\n")
    project.compile("initial")

    code, payload = adopt_cli(project, pg_url, capsys)
    assert (code, payload["status"], payload["action"]) == (1, "needs_upgrade", "nothing")
    assert stamp(pg_url) == []
    assert payload["plan"] == [
        'change Seq of queue "public"."Sales" from serial to bigserial',
        'change Seq of queue "public"."error" from serial to bigserial',
        'create queue "public"."audit" (transport 9.1)',
    ]
    tables = {t["table"]: t for t in payload["tables"]}
    assert tables["public.audit"]["status"] == "missing"
    assert tables["public.Sales"]["status"] == "other_shape"

    code, payload = adopt_cli(project, pg_url, capsys, "--apply")
    assert (code, payload["action"]) == (0, "applied")
    assert stamp(pg_url) == [project.head()]
    assert check_cli(project, pg_url, capsys) == 0
    assert catalog.read(pg_url)[("public", "Sales")].rows == 1


def test_a_missing_saga_table_is_in_the_plan(project, pg_url, capsys):
    catalog.execute(pg_url, *INSTALLER)
    project.write_topology(
        TOPOLOGY.replace(
            "  - name: Sales\n", "  - name: Sales\n    sagas:\n      - name: OrderSaga\n        correlation: {name: OrderId, type: guid}\n"
        )
    )
    project.compile("initial")
    code, payload = adopt_cli(project, pg_url, capsys, "--apply")
    assert (code, payload["action"]) == (0, "applied")
    assert [line for line in payload["plan"] if "Sales_OrderSaga" in line] == [payload["plan"][-1]]
    assert check_cli(project, pg_url, capsys) == 0


def test_a_table_that_is_no_queue_is_not_adoptable(project, db_url, capsys):
    quoted = '"Sales"' if db_url.startswith("sqlite") else '"public"."Sales"'
    catalog.execute(db_url, f"CREATE TABLE {quoted} (Id INTEGER, Note TEXT)")
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    capsys.readouterr()
    code = cli.main(["adopt", "--url", db_url, "-c", str(project.ini)])
    out = capsys.readouterr().out
    assert code == 2
    assert "not a transport table" in out and "missing_column" in out and "not adoptable" in out
    assert stamp(db_url) == []


def test_sqlite_database_made_by_the_project_ddl_is_adopted(project, sqlite_url, capsys):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(sqlite_url)
    catalog.execute(sqlite_url, "DROP TABLE alembic_version")  # as if another tool had made the tables
    code, payload = adopt_cli(project, sqlite_url, capsys)
    assert (code, payload["action"]) == (0, "stamped")
    assert check_cli(project, sqlite_url, capsys) == 0


# --------------------------------------------------------------------------- SQL Server, from catalog rows
ENGINE = MSSQL()


def judge_rows(version="9.1", **kw):
    live = ENGINE.catalog.shapes_from_rows(
        TABLES,
        queue_columns(headers=kw.pop("headers", ("nvarchar", -1))),
        queue_indexes(**{k: v for k, v in kw.items() if k in ("rowversion", "expires_filter", "expires")}),
        queue_index_columns(**{k: v for k, v in kw.items() if k in ("rowversion", "expires")}),
    )
    spec = TableSpec(Kind.QUEUE, TableName("Sales"))
    found = adopt.examine([("head", Blueprint(version, ("mssql",), (spec,)))], live, ENGINE)
    return found.verdicts[0], found


def test_sql_server_release_is_read_from_the_structure():
    verdict, found = judge_rows()
    # nonclustered RowVersion: the fix of 4.3.2, 5.0.3 and 6.0.1, kept since
    assert verdict.status == "matches" and verdict.versions == ("4.3.2", "5.0.3", "6.0.1", "8.1", "8.1.13", "9.0", "9.0.2", "9.1")
    assert found.status == "matches_head"

    # 2.2.2-2.2.5 and 3.0.0-3.0.2 (upstream-conformance §5): varchar headers, clustered RowVersion,
    # unfiltered Index_Expires
    verdict, found = judge_rows(headers=("varchar", -1), rowversion="CLUSTERED", expires_filter=None)
    assert verdict.status == "other_shape" and verdict.versions == ("2.2.2", "3.0")
    assert [op.describe() for op in found.plan] == ['change queue "Sales" from transport 3.0 to 9.1']

    # 1.x: no Index_Expires at all
    verdict, _ = judge_rows(headers=("varchar", -1), rowversion="CLUSTERED", expires=False)
    assert verdict.versions == ("1.0",)

    # 3.1 to 4.3.1 (and 5.0 to 5.0.2, 6.0.0): clustered RowVersion, filtered index, nvarchar headers
    verdict, found = judge_rows(rowversion="CLUSTERED")
    assert verdict.versions == ("3.1", "4.1", "5.0", "6.0")
    assert [op.describe() for op in found.plan] == ['change queue "Sales" from transport 6.0 to 9.1']


def test_sql_server_table_of_no_release_is_not_adoptable():
    verdict, found = judge_rows(headers=("nvarchar", 400))
    assert verdict.status == "not_transport" and found.status == "not_adoptable"
    assert [f.category for f in verdict.differences] == ["column_type"]
