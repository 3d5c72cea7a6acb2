"""check's blind spots closed (issue 38): on a freshly upgraded database, one hand-made change at a
time that leaves every column type and index column as it was, but breaks the transport: a dropped
default or AUTOINCREMENT, a renamed identifier, a generated column that stops following Body, an added
default, a trigger, a collation, an index rebuilt as hash or descending. Each is exit 1 naming the
table and what differs, on real PostgreSQL and SQLite; the control stays exit 0."""

from __future__ import annotations

import json

import pytest

from sqltransport_schema import cli
from sqltransport_schema.engines import get
from sqltransport_schema.schema import Kind, TableName, TableSpec
from sqltransport_schema.shapes import normalise_expression
from sqltransport_schema.versions import profile

from .support import catalog

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a]
  - name: Billing
    schema: billing
    body_string: true
"""


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def table(url: str, name: str, schema: str = "public") -> str:
    return name if is_sqlite(url) else f"{schema}.{name}"


def q(url: str, name: str, schema: str = "public") -> str:
    quoted = '"' + name.replace('"', '""') + '"'
    return quoted if is_sqlite(url) else f'"{schema}".{quoted}'


def check(project, url: str, capsys, fmt: str = "json"):
    code = cli.main(["check", "--url", url, "-c", str(project.ini), "--format", fmt])
    out = capsys.readouterr().out
    return code, (json.loads(out) if fmt == "json" else out)


def drift(project, url: str, capsys) -> tuple[int, list[tuple[str, str, str]]]:
    code, payload = check(project, url, capsys)
    return code, [(f["category"], f["table"], f["detail"]) for f in payload["findings"]]


def rebuild_sqlite(url: str, spec: TableSpec, old: str, new: str) -> None:
    """SQLite alters no column in place: the table made again by our DDL, one clause changed."""
    create = get("sqlite").create_table(spec, profile("9.1"))
    assert old in create[0], create[0]
    create[0] = create[0].replace(old, new)
    catalog.execute(url, f'DROP TABLE "{spec.name.table}"', *create)


SALES = TableSpec(Kind.QUEUE, TableName("Sales"))
BILLING = TableSpec(Kind.QUEUE, TableName("Billing"), body_string=True)


@pytest.fixture
def deployed(project, db_url, capsys):
    project.deploy(db_url, TOPOLOGY)
    capsys.readouterr()
    return db_url


def test_control_is_in_sync(project, deployed, capsys):
    code, out = check(project, deployed, capsys, "text")
    assert (code, out) == (0, "in sync\n")


def test_seq_default_dropped_or_autoincrement_lost(project, deployed, capsys):
    if is_sqlite(deployed):  # RowVersion INTEGER NOT NULL: no rowid alias at all, every send fails
        rebuild_sqlite(deployed, SALES, "RowVersion INTEGER PRIMARY KEY AUTOINCREMENT", "RowVersion INTEGER NOT NULL")
        expected = (
            "column_numbering",
            "Sales",
            "rowversion: expected INTEGER PRIMARY KEY AUTOINCREMENT, found no sequence, identity or AUTOINCREMENT",
        )
    else:
        catalog.execute(deployed, 'ALTER TABLE public."Sales" ALTER COLUMN seq DROP DEFAULT')
        expected = ("column_default", "public.Sales", "seq: expected default nextval(owned sequence), found no default")
    assert drift(project, deployed, capsys) == (1, [expected])


def test_rowid_without_autoincrement_reuses_ids(project, sqlite_url, capsys):
    project.deploy(sqlite_url, TOPOLOGY)
    rebuild_sqlite(sqlite_url, SALES, "RowVersion INTEGER PRIMARY KEY AUTOINCREMENT", "RowVersion INTEGER PRIMARY KEY")
    capsys.readouterr()
    assert drift(project, sqlite_url, capsys) == (
        1,
        [
            (
                "column_numbering",
                "Sales",
                "rowversion: expected INTEGER PRIMARY KEY AUTOINCREMENT, "
                "found INTEGER PRIMARY KEY without AUTOINCREMENT (ids reused after a delete)",
            )
        ],
    )


def test_pg_seq_made_an_identity_or_its_sequence_disowned(project, pg_url, capsys):
    project.deploy(pg_url, TOPOLOGY)
    catalog.execute(pg_url, 'ALTER SEQUENCE public."Sales_seq_seq" OWNED BY NONE')
    capsys.readouterr()
    code, found = drift(project, pg_url, capsys)
    assert code == 1
    assert ("column_numbering", "public.Sales", "seq: expected owned sequence, found no sequence, identity or AUTOINCREMENT") in found
    # the default now names a sequence the column does not own: no longer "its own"
    assert [f[0] for f in found] == ["column_default", "column_numbering"]


def test_identifier_case(project, deployed, capsys):
    """PostgreSQL: the runtime's statements name headers unquoted (folded to lower case): "Headers"
    is another column to them. SQLite resolves names without case: the same rename is no drift."""
    if is_sqlite(deployed):
        catalog.execute(deployed, 'ALTER TABLE "Sales" RENAME COLUMN Headers TO "HEADERS"')
        code, found = drift(project, deployed, capsys)
        assert (code, found) == (0, [])
        return
    catalog.execute(deployed, 'ALTER TABLE public."Sales" RENAME COLUMN headers TO "Headers"')
    assert drift(project, deployed, capsys) == (
        1,
        [("column_name", "public.Sales", "headers: expected identifier headers, found Headers")],
    )


def test_generated_column_stops_following_body(project, deployed, capsys):
    if is_sqlite(deployed):
        rebuild_sqlite(deployed, BILLING, "AS (CAST(Body AS TEXT))", "AS (CAST(Headers AS TEXT))")
        expected = (
            "generated_column",
            "billing.Billing",
            "bodystring: expected generated as CAST(Body AS TEXT) virtual, found generated as CAST(Headers AS TEXT) virtual",
        )
    else:
        catalog.execute(deployed, 'ALTER TABLE billing."Billing" ALTER COLUMN bodystring DROP EXPRESSION')
        expected = (
            "generated_column",
            "billing.Billing",
            "bodystring: expected generated as encode(body, 'escape'::text) stored, found not generated",
        )
    assert drift(project, deployed, capsys) == (1, [expected])


def test_default_added(project, deployed, capsys):
    if is_sqlite(deployed):
        rebuild_sqlite(deployed, SALES, "Recoverable INTEGER NOT NULL", "Recoverable INTEGER NOT NULL DEFAULT 1")
        expected = ("column_default", "Sales", "recoverable: expected no default, found default 1")
    else:
        catalog.execute(deployed, "ALTER TABLE public.\"Sales\" ALTER COLUMN headers SET DEFAULT '{}'")
        expected = ("column_default", "public.Sales", "headers: expected no default, found default '{}'::text")
    assert drift(project, deployed, capsys) == (1, [expected])


def test_an_empty_string_default_added(project, deployed, capsys):
    """Issue 53, item 7: SQLite's `DEFAULT ''` read as no default (the quotes normalised away)."""
    if is_sqlite(deployed):
        rebuild_sqlite(deployed, SALES, "Headers TEXT NOT NULL", "Headers TEXT NOT NULL DEFAULT ''")
        expected = ("column_default", "Sales", "headers: expected no default, found default ''")
    else:
        catalog.execute(deployed, "ALTER TABLE public.\"Sales\" ALTER COLUMN headers SET DEFAULT ''")
        expected = ("column_default", "public.Sales", "headers: expected no default, found default ''::text")
    assert drift(project, deployed, capsys) == (1, [expected])


@pytest.mark.parametrize("empty", ["''", "('')", '""', "(( '' ))"])
def test_an_empty_string_is_an_expression_not_none(empty):
    assert normalise_expression(empty) == "''" != normalise_expression(None)
    assert normalise_expression("((0))") == "0"


def test_trigger_on_a_queue_is_named(project, deployed, capsys):
    if is_sqlite(deployed):
        catalog.execute(deployed, 'CREATE TRIGGER "audit_sales" AFTER INSERT ON "Sales" BEGIN SELECT 1; END')
    else:
        catalog.execute(
            deployed,
            "CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
            'CREATE TRIGGER "audit_sales" BEFORE INSERT ON public."Sales" FOR EACH ROW EXECUTE FUNCTION public.noop()',
        )
    code, found = drift(project, deployed, capsys)
    assert (code, found) == (1, [("trigger", table(deployed, "Sales"), "trigger audit_sales: our DDL creates no trigger on this table")])
    code, text = check(project, deployed, capsys, "text")
    assert code == 1 and f"drift: trigger: {table(deployed, 'Sales')}: trigger audit_sales" in text
    code, markdown = check(project, deployed, capsys, "markdown")
    assert code == 1 and f"| drift | trigger | {table(deployed, 'Sales')} | trigger audit_sales" in markdown


def test_collation_changed(project, deployed, capsys):
    if is_sqlite(deployed):
        rebuild_sqlite(deployed, SALES, "Headers TEXT NOT NULL", "Headers TEXT NOT NULL COLLATE NOCASE")
        expected = ("column_collation", "Sales", "headers: expected the default collation, found collation NOCASE")
    else:
        catalog.execute(deployed, 'ALTER TABLE public."Sales" ALTER COLUMN headers TYPE text COLLATE "C"')
        expected = ("column_collation", "public.Sales", "headers: expected the default collation, found collation C")
    assert drift(project, deployed, capsys) == (1, [expected])


def test_index_rebuilt_descending(project, deployed, capsys):
    due = q(deployed, "Sales.Delayed_Due")
    catalog.execute(deployed, f"DROP INDEX {due}", f'CREATE INDEX "Sales.Delayed_Due" ON {q(deployed, "Sales.Delayed")} (Due DESC)')
    assert drift(project, deployed, capsys) == (
        1,
        [
            (
                "index_columns",
                table(deployed, "Sales.Delayed"),
                "Sales.Delayed_Due: expected index Sales.Delayed_Due on (due), found index Sales.Delayed_Due on (due desc)",
            )
        ],
    )


def test_index_rebuilt_using_hash(project, pg_url, capsys):
    """SQLite has btree indexes only; PostgreSQL's hash index serves no ORDER BY or range scan."""
    project.deploy(pg_url, TOPOLOGY)
    catalog.execute(
        pg_url, 'DROP INDEX public."Sales.Delayed_Due"', 'CREATE INDEX "Sales.Delayed_Due" ON public."Sales.Delayed" USING hash (Due)'
    )
    capsys.readouterr()
    assert drift(project, pg_url, capsys) == (
        1,
        [
            (
                "index_columns",
                "public.Sales.Delayed",
                "Sales.Delayed_Due: expected index Sales.Delayed_Due on (due), found index Sales.Delayed_Due using hash on (due)",
            )
        ],
    )


SAGA_TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
"""


def test_saga_metadata_renamed_to_lower_case(project, pg_url, capsys):
    """The saga statements quote "Metadata": metadata is another column to them."""
    project.deploy(pg_url, SAGA_TOPOLOGY)
    catalog.execute(pg_url, 'ALTER TABLE public."Sales_OrderSaga" RENAME COLUMN "Metadata" TO metadata')
    capsys.readouterr()
    assert drift(project, pg_url, capsys) == (
        1,
        [("column_name", "public.Sales_OrderSaga", "metadata: expected identifier Metadata, found metadata")],
    )


def test_alembic_check_through_env_reports_the_same_differences(project, deployed, capsys):
    """Our comparators: `alembic check` lists each of check's findings as ('transport_drift', category, table, detail)."""
    from alembic import command
    from alembic.util.exc import AutogenerateDiffsDetected

    if is_sqlite(deployed):
        rebuild_sqlite(deployed, SALES, "RowVersion INTEGER PRIMARY KEY AUTOINCREMENT", "RowVersion INTEGER PRIMARY KEY")
        catalog.execute(deployed, 'CREATE TRIGGER "audit_sales" AFTER INSERT ON "Sales" BEGIN SELECT 1; END')
        catalog.execute(deployed, 'DROP INDEX "Sales.Delayed_Due"', 'CREATE INDEX "Sales.Delayed_Due" ON "Sales.Delayed" (Due DESC)')
    else:
        catalog.execute(
            deployed,
            'ALTER TABLE public."Sales" ALTER COLUMN seq DROP DEFAULT',
            'ALTER TABLE public."Sales" RENAME COLUMN headers TO "Headers"',
            'ALTER TABLE billing."Billing" ALTER COLUMN bodystring DROP EXPRESSION',
            'ALTER TABLE public."Sales" ALTER COLUMN id SET DEFAULT gen_random_uuid()',
            'DROP INDEX public."Sales.Delayed_Due"',
            'CREATE INDEX "Sales.Delayed_Due" ON public."Sales.Delayed" USING hash (Due)',
        )
    code, found = drift(project, deployed, capsys)
    assert code == 1 and len(found) == (3 if is_sqlite(deployed) else 5)
    with pytest.raises(AutogenerateDiffsDetected) as raised:
        command.check(project.config(deployed))
    reported = raised.value.args[0]
    for category, name, detail in found:
        assert repr(("transport_drift", category, name, detail)) in reported
    assert reported.count("transport_drift") == len(found)


def test_adopt_refuses_a_database_with_such_a_difference(project, pg_url, capsys):
    """The transport's installer made the tables, then Seq lost its default: stamping it would declare
    a queue every send fails on managed and in sync. adopt names the difference and writes nothing."""
    from .support.commands import adopt_cli
    from .support.installers import INSTALLER

    catalog.execute(pg_url, *INSTALLER)
    project.write_topology('transport_version: "9.1"\nendpoints:\n  - name: Sales\nqueues:\n  - name: error\n')
    assert project.compile("initial") == 0
    code, payload = adopt_cli(project, pg_url, capsys, "--dry-run")
    assert (code, payload["status"]) == (0, "matches_head")  # the control: as the installer left it
    catalog.execute(pg_url, 'ALTER TABLE public."Sales" ALTER COLUMN seq DROP DEFAULT')
    code, payload = adopt_cli(project, pg_url, capsys)
    assert (code, payload["status"], payload["action"]) == (2, "not_adoptable", "nothing")
    sales = next(t for t in payload["tables"] if t["table"] == "public.Sales")
    assert sales["status"] == "not_transport"
    assert [(d["category"], d["detail"]) for d in sales["differences"]] == [
        ("column_default", "seq: expected default nextval(owned sequence), found no default")
    ]
    assert catalog.execute(pg_url, "SELECT count(*) FROM pg_tables WHERE tablename = 'alembic_version'") == [(0,)]


SAGA_AND_OUTBOX = """\
transport_version: "9.1"
engines: [sqlite, postgresql, mysql]
endpoints:
  - name: Sales
    outbox: true
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
"""


def test_saga_and_outbox_tables_on_every_saga_engine(project, saga_db, capsys):
    """The outbox's Dispatched default is expected (dropping it is drift); a trigger on a saga table and a
    default added to its Data are drift too; on MariaDB as on the others."""
    project.deploy(saga_db, SAGA_AND_OUTBOX)
    capsys.readouterr()
    assert drift(project, saga_db, capsys) == (0, [])  # the control
    mysql, sqlite = saga_db.startswith("mysql"), is_sqlite(saga_db)
    saga = '`Sales_OrderSaga`' if mysql else ('"Sales_OrderSaga"' if sqlite else 'public."Sales_OrderSaga"')
    outbox = '`Sales_OutboxData`' if mysql else ('"Sales_OutboxData"' if sqlite else 'public."Sales_OutboxData"')
    name = "Sales_OrderSaga" if mysql or sqlite else "public.Sales_OrderSaga"
    outbox_name = "Sales_OutboxData" if mysql or sqlite else "public.Sales_OutboxData"
    if sqlite:
        catalog.execute(saga_db, f"CREATE TRIGGER saga_audit AFTER UPDATE ON {saga} BEGIN SELECT 1; END")
        spec = TableSpec(Kind.OUTBOX, TableName("Sales_OutboxData"), saga_prefix="Sales_")
        rebuild_sqlite(saga_db, spec, "Dispatched INTEGER NOT NULL DEFAULT 0", "Dispatched INTEGER NOT NULL")
        dropped = "dispatched: expected default 0, found no default"
    elif mysql:
        catalog.execute(saga_db, f"CREATE TRIGGER saga_audit BEFORE UPDATE ON {saga} FOR EACH ROW SET NEW.Concurrency = NEW.Concurrency")
        catalog.execute(saga_db, f"ALTER TABLE {outbox} ALTER COLUMN Dispatched DROP DEFAULT")
        dropped = "dispatched: expected default b'0', found no default"
    else:
        catalog.execute(
            saga_db,
            "CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
            f"CREATE TRIGGER saga_audit BEFORE UPDATE ON {saga} FOR EACH ROW EXECUTE FUNCTION public.noop()",
            f'ALTER TABLE {outbox} ALTER COLUMN "Dispatched" DROP DEFAULT',
        )
        dropped = "dispatched: expected default false, found no default"
    assert drift(project, saga_db, capsys) == (
        1,
        [
            ("column_default", outbox_name, dropped),
            ("trigger", name, "trigger saga_audit: our DDL creates no trigger on this table"),
        ],
    )


def test_mariadb_correlation_index_rebuilt_descending_or_as_hash(project, mysql_url, capsys):
    project.deploy(mysql_url, SAGA_AND_OUTBOX)
    index = get("mysql").correlation_index(TableSpec(Kind.SAGA, TableName("Sales_OrderSaga"), saga_prefix="Sales_"), "OrderId")
    catalog.execute(
        mysql_url,
        f"DROP INDEX `{index}` ON `Sales_OrderSaga`",
        f"CREATE UNIQUE INDEX `{index}` ON `Sales_OrderSaga` (Correlation_OrderId DESC)",
    )
    capsys.readouterr()
    code, found = drift(project, mysql_url, capsys)
    assert (code, [f[:2] for f in found]) == (1, [("index_columns", "Sales_OrderSaga")])
    assert found[0][2].endswith(f"found unique index {index} on (correlation_orderid desc)")


def test_adopt_refuses_a_sqlite_queue_without_autoincrement(project, sqlite_url, capsys):
    """Tables another tool made (no stamp), one of them rebuilt without AUTOINCREMENT: not stamped."""
    from .support.commands import adopt_cli

    project.deploy(sqlite_url, TOPOLOGY)
    catalog.execute(sqlite_url, "DROP TABLE alembic_version")
    rebuild_sqlite(sqlite_url, SALES, "RowVersion INTEGER PRIMARY KEY AUTOINCREMENT", "RowVersion INTEGER PRIMARY KEY")
    code, payload = adopt_cli(project, sqlite_url, capsys)
    assert (code, payload["status"], payload["action"]) == (2, "not_adoptable", "nothing")
    [sales] = [t for t in payload["tables"] if t["table"] == "Sales"]
    assert [d["category"] for d in sales["differences"]] == ["column_numbering"]
    assert catalog.execute(sqlite_url, "SELECT count(*) FROM sqlite_master WHERE name = 'alembic_version'") == [(0,)]
