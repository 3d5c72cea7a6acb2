"""check on SQL Server without a server: catalog rows written by hand as the sys.* queries of
MSSQL.Catalog.SHAPE_* return them, turned into shapes by MSSQL.Catalog.shapes_from_rows, compared by check.diff;
and those queries run over SQL Server's catalog views as SQL Server fills them (tests/support/mssql_catalog.py)."""

from __future__ import annotations

import pytest

from sqltransport_schema.check import diff
from sqltransport_schema.engines.mssql import MSSQL
from sqltransport_schema.schema import Blueprint, Kind, TableName, TableSpec
from sqltransport_schema.shapes import IndexShape
from sqltransport_schema.versions import profile

from .support.mssql_catalog import (
    DELAYED,
    QUEUE_INDEXES,
    SALES,
    SUBS,
    TABLES,
    Column,
    Index,
    SqlServerCatalog,
    column_rows,
    index_column_rows,
    index_rows,
    queue_columns,
    queue_index_columns,
    queue_indexes,
    queue_table,
)

ENGINE = MSSQL()


def check(version="9.1", specs=None, tables=TABLES, columns=None, indexes=None, index_columns=None):
    specs = specs or (TableSpec(Kind.QUEUE, TableName("Sales")),)
    live = ENGINE.catalog.shapes_from_rows(
        tables,
        queue_columns() if columns is None else column_rows(columns),
        queue_indexes() if indexes is None else index_rows(indexes),
        queue_index_columns() if index_columns is None else index_column_rows(index_columns),
    )
    return diff(Blueprint(version, ("mssql",), tuple(specs)), "a", "a", live, engine=ENGINE)


def found(report):
    return [(f.category, f.table) for f in report.findings]


def test_matching_91_queue_is_in_sync():
    report = check()
    assert report.findings == [] and report.in_sync


def test_varchar_headers_is_a_column_type():
    report = check(columns=queue_columns(headers=("varchar", -1)))
    assert found(report) == [("column_type", "dbo.Sales")]
    assert report.findings[0].detail == "headers: expected nvarchar(max) not null, found varchar(max) not null"


def test_clustered_rowversion_where_nonclustered_is_expected():
    report = check(indexes=queue_indexes(rowversion="CLUSTERED"), index_columns=queue_index_columns(rowversion="CLUSTERED"))
    assert found(report) == [("index_columns", "dbo.Sales")]
    assert "expected nonclustered index Index_RowVersion" in report.findings[0].detail
    assert "found clustered index Index_RowVersion" in report.findings[0].detail


def test_unfiltered_expires_where_filtered_is_expected():
    report = check(indexes=queue_indexes(expires_filter=None))
    assert found(report) == [("index_predicate", "dbo.Sales")]
    assert report.findings[0].detail == "Index_Expires: expected where expiresisnotnull, found no predicate"


def test_missing_include_columns():
    report = check(index_columns=queue_index_columns(include=()))
    assert found(report) == [("index_columns", "dbo.Sales")]
    assert "include (id, rowversion)" in report.findings[0].detail


def test_partial_include_columns():
    report = check(index_columns=queue_index_columns(include=("RowVersion",)))
    assert found(report) == [("index_columns", "dbo.Sales")]


@pytest.mark.parametrize("text", ["([Expires] IS NOT NULL)", "[Expires] IS NOT NULL", "(Expires is not null)"])
def test_filter_text_variants_compare_equal(text):
    assert check(indexes=queue_indexes(expires_filter=text)).findings == []


def test_missing_expires_index():
    report = check(indexes=queue_indexes(expires=False), index_columns=queue_index_columns(expires=False))
    assert found(report) == [("missing_index", "dbo.Sales")]


def test_rowversion_without_identity_is_a_column_type():
    columns = [row[:7] + (False,) + row[8:] if row[1] == "RowVersion" else row for row in queue_columns()]
    report = check(columns=columns)
    assert found(report) == [("column_type", "dbo.Sales")]
    assert report.findings[0].detail == "rowversion: expected bigint identity not null, found bigint not null"


def test_body_string_is_a_computed_column():
    spec = TableSpec(Kind.QUEUE, TableName("Sales"), body_string=True)
    assert check(specs=(spec,), columns=queue_columns(body_string=True)).findings == []
    assert found(check(specs=(spec,))) == [("missing_column", "dbo.Sales")]
    assert found(check(columns=queue_columns(body_string=True))) == [("extra_column", "dbo.Sales")]


def test_40_table_against_40_expectations_is_in_sync():
    # 4.0: nvarchar headers, clustered Index_RowVersion, filtered Index_Expires
    prof = profile("4.0")
    assert prof.rowversion_clustered and prof.headers_unicode
    report = check(
        version="4.0",
        indexes=queue_indexes(rowversion="CLUSTERED"),
        index_columns=queue_index_columns(rowversion="CLUSTERED"),
    )
    assert report.findings == []
    # the same table is drift for 9.1 (nonclustered expected), reported once
    report = check(indexes=queue_indexes(rowversion="CLUSTERED"), index_columns=queue_index_columns(rowversion="CLUSTERED"))
    assert found(report) == [("index_columns", "dbo.Sales")]


def test_22_table_has_plain_expires_index_and_varchar_headers():
    report = check(
        version="2.2.3",
        columns=queue_columns(headers=("varchar", -1)),
        indexes=queue_indexes(rowversion="CLUSTERED", expires_filter=None),
        index_columns=queue_index_columns(rowversion="CLUSTERED"),
    )
    assert report.findings == []


def test_delayed_and_subscription_tables_in_sync():
    tables = TABLES + [(DELAYED, "dbo", "Sales.Delayed"), (SUBS, "dbo", "SubscriptionRouting")]
    columns = queue_columns() + [
        (DELAYED, "Headers", "nvarchar", -1, 0, 0, False, False, False),
        (DELAYED, "Body", "varbinary", -1, 0, 0, True, False, False),
        (DELAYED, "Due", "datetime", 8, 23, 3, False, False, False),
        (DELAYED, "RowVersion", "bigint", 8, 19, 0, False, True, False),
        (SUBS, "QueueAddress", "nvarchar", 400, 0, 0, False, False, False),
        (SUBS, "Endpoint", "nvarchar", 400, 0, 0, False, False, False),
        (SUBS, "Topic", "nvarchar", 400, 0, 0, False, False, False),
    ]
    indexes = queue_indexes() + [
        (DELAYED, 2, "Index_Due", "NONCLUSTERED", False, False, None),
        (SUBS, 1, "PK__Subscrip__6C1B8E1A3E8B1C2D", "CLUSTERED", True, False, None),
    ]
    index_columns = queue_index_columns() + [
        (DELAYED, 2, "Due", 1, False),
        (SUBS, 1, "Endpoint", 1, False),
        (SUBS, 1, "Topic", 2, False),
    ]
    specs = (
        TableSpec(Kind.QUEUE, TableName("Sales")),
        TableSpec(Kind.DELAYED, TableName("Sales.Delayed")),
        TableSpec(Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting")),
    )
    assert check(specs=specs, tables=tables, columns=columns, indexes=indexes, index_columns=index_columns).findings == []
    # a nonclustered primary key and nvarchar(100) topic: each reported once
    indexes[-1] = (SUBS, 2, "PK__Subscrip__6C1B8E1A3E8B1C2D", "NONCLUSTERED", True, False, None)
    index_columns[-2:] = [(SUBS, 2, "Endpoint", 1, False), (SUBS, 2, "Topic", 2, False)]
    columns[-1] = (SUBS, "Topic", "nvarchar", 200, 0, 0, False, False, False)
    report = check(specs=specs, tables=tables, columns=columns, indexes=indexes, index_columns=index_columns)
    assert found(report) == [("column_type", "dbo.SubscriptionRouting"), ("index_columns", "dbo.SubscriptionRouting")]
    assert "topic: expected nvarchar(200) not null, found nvarchar(100) not null" == report.findings[0].detail


def test_column_types_from_sys_columns():
    assert ENGINE.catalog.column_type("nvarchar", -1) == "nvarchar(max)"
    assert ENGINE.catalog.column_type("varchar", 255) == "varchar(255)"
    assert ENGINE.catalog.column_type("nvarchar", 400) == "nvarchar(200)"
    assert ENGINE.catalog.column_type("NVARCHAR", 400) == "nvarchar(200)"
    assert ENGINE.catalog.column_type("decimal", 9, 18, 2) == "decimal(18,2)"
    assert ENGINE.catalog.column_type("datetime", 8, 23, 3) == "datetime"


def test_names_compare_without_case():
    tables = [(SALES, "DBO", "sales")]
    indexes = [row[:2] + (row[2].upper(),) + row[3:] for row in queue_indexes()]
    assert check(tables=tables, indexes=indexes).findings == []


def test_other_engines_describe_indexes_as_before():
    assert IndexShape(("due",), name="x_Due").describe() == "index x_Due on (due)"
    assert IndexShape(("id",), unique=True).structure()[:3] == (("id",), True, None)


# a hypothetical index the Database Engine Tuning Advisor left behind: listed in sys.indexes, no index
TUNING_LEFTOVER = Index("NONCLUSTERED", "_dta_index_Sales_5_581577110__K4", ["Recoverable"], hypothetical=True)


def sales_queue(catalog: SqlServerCatalog, database: str | None = None) -> int:
    """dbo.Sales as the transport's 9.1 DDL leaves it in SQL Server's catalog views (and a tuning leftover)."""
    return catalog.create_table("dbo", "Sales", queue_table(), [*QUEUE_INDEXES, TUNING_LEFTOVER], catalog=database)


def test_read_shapes_reads_the_catalog_views_and_builds_shapes():
    server = SqlServerCatalog()
    sales_queue(server)
    live = ENGINE.catalog.read_shapes(server)
    # the four queries read the views holding tables, columns and indexes (how they are worded is theirs)
    assert set().union(*server.views_read) >= {"tables", "schemas", "columns", "types", "indexes", "index_columns"}
    # the rows the hand-written tests above use are what the queries return from such a catalog
    assert live == ENGINE.catalog.shapes_from_rows(TABLES, queue_columns(), queue_indexes(), queue_index_columns())
    assert list(live) == [ENGINE.table_key(TableName("Sales"))]  # not the MS-shipped table every database holds
    name, shape = live[ENGINE.table_key(TableName("Sales"))]
    assert name == TableName("Sales", "dbo") and shape.identity == {"rowversion"}
    assert shape.columns["headers"] == ("nvarchar(max)", False) and len(shape.columns) == 8  # sysname is not nvarchar again
    assert (
        IndexShape(("expires",), False, "expiresisnotnull", "Index_Expires", clustered=False, include=("id", "rowversion")) in shape.indexes
    )
    assert len(shape.indexes) == 2  # neither the heap's row nor the hypothetical index in sys.indexes is an index
    in_sync = Blueprint("9.1", ("mssql",), (TableSpec(Kind.QUEUE, TableName("Sales")),))
    assert diff(in_sync, "a", "a", live, engine=ENGINE).findings == []


@pytest.mark.parametrize(
    "query,wrong,right",
    [
        ("SHAPE_COLUMNS", "ty.system_type_id = c.system_type_id", "ty.user_type_id = c.user_type_id"),  # sysname shares nvarchar's
        ("SHAPE_INDEXES", "AND i.is_hypothetical = 1", "AND i.is_hypothetical = 0"),
        ("SHAPE_TABLES", "WHERE 1 = 1", "WHERE t.is_ms_shipped = 0"),
        ("SHAPE_INDEX_COLUMNS", "c.column_id = ic.index_column_id", "c.column_id = ic.column_id"),
    ],
)
def test_the_fake_catalog_catches_a_wrong_query(monkeypatch, query, wrong, right):
    """The catalog fake runs the queries: a wrong join or a dropped filter changes what check sees."""
    server = SqlServerCatalog()
    sales_queue(server)
    text = getattr(ENGINE.catalog, query)
    assert right in text, f"{query} no longer reads {right!r}: update this mutation"
    monkeypatch.setattr(ENGINE.catalog, query, text.replace(right, wrong))
    live = ENGINE.catalog.read_shapes(server)
    assert live != ENGINE.catalog.shapes_from_rows(TABLES, queue_columns(), queue_indexes(), queue_index_columns())


def test_tables_in_other_catalogs_are_read_through_their_sys_views():
    """Endpoints placed in another database (three-part names) are checked there, not reported missing."""
    server = SqlServerCatalog()  # the connection's own database holds no queue
    server.attach("logi]stics")
    sales_queue(server, database="logi]stics")
    live = ENGINE.catalog.read_shapes(server, catalogs=["logi]stics"])
    assert list(live) == [ENGINE.table_key(TableName("Sales", "dbo", "logi]stics"))]
    expected = Blueprint("9.1", ("mssql",), (TableSpec(Kind.QUEUE, TableName("Sales", None, "logi]stics")),))
    assert diff(expected, "a", "a", live, engine=ENGINE).findings == []
    # the same table in the connection's own database is another table
    elsewhere = Blueprint("9.1", ("mssql",), (TableSpec(Kind.QUEUE, TableName("Sales")),))
    assert [(f.category, f.table) for f in diff(elsewhere, "a", "a", live, engine=ENGINE).findings] == [
        ("missing_table", "dbo.Sales"),
        ("unmanaged_table", "logi]stics.dbo.Sales"),
    ]


# ------------------------------------------------------------------ issue 38: what else a DBA's schema compare shows
CATALOG_QUERIES = ("SHAPE_TABLES", "SHAPE_COLUMNS", "SHAPE_INDEXES", "SHAPE_INDEX_COLUMNS", "SHAPE_TRIGGERS", "SHAPE_DATABASES")


def test_catalog_queries_are_golden_and_parse_as_tsql():
    """Every catalog query check runs on SQL Server, for the connection's database and another one,
    held to a golden file and parsed by sqlfluff's tsql dialect."""
    from .support.golden import assert_golden
    from .support.tsql import assert_parses

    texts = []
    for query in CATALOG_QUERIES:
        for catalog in (None, "logistics"):
            sql = getattr(ENGINE.catalog, query).format(sys=ENGINE._sys(catalog))
            texts.append(f"-- {query} ({catalog or 'own database'})\n{sql}\nGO\n")
            assert_parses(sql, f"{query} {catalog}")
    assert_golden("mssql_check_catalog.sql", "\n".join(texts))


def drifted(columns=None, indexes=None, triggers=(), body_string=True, collation=None):
    """dbo.Sales (with BodyString) as the 9.1 DDL leaves it in a catalog, changed as given, read and checked."""
    server = SqlServerCatalog()
    if collation is not None:  # a database created with another default collation than the instance's
        server.db.execute('UPDATE "sys".databases SET collation_name = ? WHERE database_id = 5', (collation,))
    table = queue_table(body_string=body_string)
    for name, column in (columns or {}).items():
        table = [column if c.name == name else c for c in table]
    server.create_table("dbo", "Sales", table, indexes or QUEUE_INDEXES, triggers=triggers)
    spec = TableSpec(Kind.QUEUE, TableName("Sales"), body_string=body_string)
    report = diff(Blueprint("9.1", ("mssql",), (spec,)), "a", "a", ENGINE.catalog.read_shapes(server), engine=ENGINE)
    return [(f.category, f.table, f.detail) for f in report.findings]


def test_the_control_read_through_every_query_is_in_sync():
    assert drifted() == []
    assert drifted(collation="Latin1_General_100_CI_AS_SC_UTF8") == []  # columns take the database's default


def test_default_added_to_a_column():
    found = drifted(columns={"Recoverable": Column("Recoverable", "bit", default="((1))")})
    assert found == [("column_default", "dbo.Sales", "recoverable: expected no default, found default 1")]


def test_computed_body_string_that_stops_following_body():
    bodystring = Column("BodyString", "nvarchar", -1, nullable=True, computed=True, definition="(CONVERT([nvarchar](max),[Headers],0))")
    assert drifted(columns={"BodyString": bodystring}) == [
        (
            "generated_column",
            "dbo.Sales",
            "bodystring: expected generated as cast(body as nvarchar(max)), found generated as cast(headers as nvarchar(max))",
        )
    ]


@pytest.mark.parametrize(
    "definition", ["(CONVERT([nvarchar](max),[Body],0))", "(CONVERT([nvarchar](max),[Body]))", "(CAST([Body] AS nvarchar(max)))"]
)
def test_computed_definitions_as_sql_server_keeps_them_compare_equal(definition):
    bodystring = Column("BodyString", "nvarchar", -1, nullable=True, computed=True, definition=definition)
    assert drifted(columns={"BodyString": bodystring}) == []


def test_column_collation_other_than_the_database_default():
    headers = Column("Headers", "nvarchar", -1, collation="Latin1_General_BIN2")
    assert drifted(columns={"Headers": headers}) == [
        ("column_collation", "dbo.Sales", "headers: expected the default collation, found collation Latin1_General_BIN2")
    ]


def test_trigger_on_a_queue_is_named():
    assert drifted(triggers=["trg_Sales_audit"]) == [
        ("trigger", "dbo.Sales", "trigger trg_Sales_audit: our DDL creates no trigger on this table")
    ]


def test_descending_key_and_index_options():
    rowversion = Index("NONCLUSTERED", "Index_RowVersion", ["RowVersion"], descending=["RowVersion"])
    found = drifted(indexes=[rowversion, QUEUE_INDEXES[1]])
    assert found == [
        (
            "index_columns",
            "dbo.Sales",
            "Index_RowVersion: expected nonclustered index Index_RowVersion on (rowversion), "
            "found nonclustered index Index_RowVersion on (rowversion desc)",
        )
    ]
    rowversion = Index("NONCLUSTERED", "Index_RowVersion", ["RowVersion"], fill_factor=70, ignore_dup_key=True)
    [(category, _, detail)] = drifted(indexes=[rowversion, QUEUE_INDEXES[1]])
    assert category == "index_columns" and detail.endswith("on (rowversion) with (ignore_dup_key, fillfactor 70)")


def test_outbox_default_constraint():
    from sqltransport_schema.schema import TableSpec as Spec

    server = SqlServerCatalog()
    outbox = [
        Column("MessageId", "nvarchar", 400),
        Column("Dispatched", "bit", default="((0))"),
        Column("DispatchedAt", "datetime", nullable=True),
        Column("PersistenceVersion", "varchar", 23),
        Column("Operations", "nvarchar", -1),
    ]
    indexes = [
        Index("NONCLUSTERED", "PK__Sales_Ou__C87C0C9C1A2B3C4D", ["MessageId"], unique=True),
        Index("NONCLUSTERED", "Index_DispatchedAt", ["DispatchedAt"], filter_definition="([Dispatched]=(1))"),
    ]
    server.create_table("dbo", "Sales_OutboxData", outbox, indexes)
    spec = Spec(Kind.OUTBOX, TableName("Sales_OutboxData"), saga_prefix="Sales_")
    expected = Blueprint("9.1", ("mssql",), (spec,))
    assert diff(expected, "a", "a", ENGINE.catalog.read_shapes(server), engine=ENGINE).findings == []
    server = SqlServerCatalog()
    server.create_table("dbo", "Sales_OutboxData", [c if c.name != "Dispatched" else Column("Dispatched", "bit") for c in outbox], indexes)
    [finding] = diff(expected, "a", "a", ENGINE.catalog.read_shapes(server), engine=ENGINE).findings
    assert (finding.category, finding.detail) == ("column_default", "dispatched: expected default 0, found no default")


def test_other_catalogs_compare_collations_with_their_own_default():
    server = SqlServerCatalog()
    server.attach("logistics", collation="Latin1_General_100_CS_AS")
    server.create_table("dbo", "Sales", queue_table(), QUEUE_INDEXES, catalog="logistics")
    expected = Blueprint("9.1", ("mssql",), (TableSpec(Kind.QUEUE, TableName("Sales", None, "logistics")),))
    assert diff(expected, "a", "a", ENGINE.catalog.read_shapes(server, catalogs=["logistics"]), engine=ENGINE).findings == []


@pytest.mark.parametrize(
    "query,wrong,right",
    [
        ("SHAPE_COLUMNS", "dc.parent_column_id = c.object_id", "dc.parent_column_id = c.column_id"),
        ("SHAPE_COLUMNS", "cc.column_id = c.object_id", "cc.column_id = c.column_id"),
        ("SHAPE_TRIGGERS", "tr.parent_class = 0", "tr.parent_class = 1"),
        ("SHAPE_DATABASES", "d.database_id <> DB_ID()", "d.database_id = DB_ID()"),
    ],
)
def test_the_fake_catalog_catches_a_wrong_new_query(monkeypatch, query, wrong, right):
    """As above, for the reads of issue 38: a wrong join drops the default, the computed definition,
    the trigger or the database's collation, and check sees it."""
    text = getattr(ENGINE.catalog, query)
    assert right in text, f"{query} no longer reads {right!r}: update this mutation"
    columns = {
        "Recoverable": Column("Recoverable", "bit", default="((1))"),
        "Headers": Column("Headers", "nvarchar", -1, collation="Latin1_General_BIN2"),
    }
    before = drifted(columns=columns, triggers=["trg"])
    monkeypatch.setattr(ENGINE.catalog, query, text.replace(right, wrong))
    assert drifted(columns=columns, triggers=["trg"]) != before


# The console's tables as the project's DDL creates them (MSSQL.CREATE_ARCHIVE, CREATE_ACTION_LOG), their
# datetime2 columns as SQL Server keeps them: scale 7 (issue 53, item 4: read as datetime2(7), false drift).
ARCHIVE_TABLE = [
    Column("Id", "uniqueidentifier"),
    Column("CorrelationId", "varchar", 255, nullable=True),
    Column("ReplyToAddress", "varchar", 255, nullable=True),
    Column("Recoverable", "bit"),
    Column("Expires", "datetime", nullable=True),
    Column("Headers", "nvarchar", -1),
    Column("Body", "varbinary", -1, nullable=True),
    Column("RowVersion", "bigint", identity=True),
    Column("ArchivedAt", "datetime2"),
    Column("ArchivedWhy", "nvarchar", -1),
    Column("ArchivedBy", "nvarchar", 800),
]
ARCHIVE_INDEXES = [
    Index("CLUSTERED", "PK__error_ar__2C4DA5E1A1B2C3D4", ["RowVersion"], unique=True),
    Index("NONCLUSTERED", "Index_ArchivedAt", ["ArchivedAt"]),
]
ACTION_LOG_TABLE = [
    Column("Id", "bigint", identity=True),
    Column("At", "datetime2"),
    Column("Who", "nvarchar", 800),
    Column("Action", "nvarchar", 800),
    Column("Target", "nvarchar", -1),
    Column("Messages", "int"),
]
ACTION_LOG_INDEXES = [Index("CLUSTERED", "PK__ConsoleA__3214EC07D4C3B2A1", ["Id"], unique=True)]
CONSOLE_SPECS = (
    TableSpec(Kind.ARCHIVE, TableName("error_archive"), queue="error"),
    TableSpec(Kind.ACTION_LOG, TableName("ConsoleActions")),
)


def console_tables(archived_at: str = "datetime2") -> list[tuple[str, str, str]]:
    server = SqlServerCatalog()
    archive = [Column("ArchivedAt", archived_at) if c.name == "ArchivedAt" else c for c in ARCHIVE_TABLE]
    server.create_table("dbo", "error_archive", archive, ARCHIVE_INDEXES)
    server.create_table("dbo", "ConsoleActions", ACTION_LOG_TABLE, ACTION_LOG_INDEXES)
    report = diff(Blueprint("9.1", ("mssql",), CONSOLE_SPECS), "a", "a", ENGINE.catalog.read_shapes(server), engine=ENGINE)
    return [(f.category, f.table, f.detail) for f in report.findings]


def test_the_consoles_datetime2_columns_are_in_sync():
    assert console_tables() == []


def test_a_datetime2_of_another_scale_is_still_drift():
    assert ENGINE.catalog.column_type("datetime2", 8, 27, 7) == "datetime2"
    assert ENGINE.catalog.column_type("datetime2", 7, 23, 3) == "datetime2(3)"
    assert ENGINE.catalog.column_type("datetimeoffset", 10, 34, 7) == "datetimeoffset"
    assert ENGINE.catalog.column_type("time", 5, 16, 7) == "time"
    [(category, table, detail)] = console_tables(archived_at="datetime")
    assert (category, table) == ("column_type", "dbo.error_archive") and "archivedat" in detail and "datetime2" in detail


# ------------------------------------------------------------------ issue 53 item 4: the monitoring login
def test_a_filter_the_monitoring_login_cannot_read_is_no_drift_but_a_note():
    """`grants --monitor` grants no VIEW DEFINITION: sys.indexes.filter_definition is NULL, has_filter 1.
    Read as unfiltered, the filtered Index_Expires was false drift; it is compared as filtered and the
    report says its filter was not compared."""
    server = SqlServerCatalog()
    server.create_table("dbo", "Sales", queue_table(), QUEUE_INDEXES)
    server.as_monitoring_login()
    assert server.exec_driver_sql("SELECT has_filter, filter_definition FROM sys.indexes WHERE name = 'Index_Expires'") == [(1, None)]
    live = ENGINE.catalog.read_shapes(server)
    report = diff(Blueprint("9.1", ("mssql",), (TableSpec(Kind.QUEUE, TableName("Sales")),)), "a", "a", live, engine=ENGINE)
    assert report.findings == [] and report.in_sync
    (note,) = report.notes
    assert note.startswith("unknown: the definitions of 1 filtered index(es), default(s) or computed column(s) (dbo.Sales.Index_Expires)")
    assert "needs VIEW DEFINITION" in note and "note: unknown: the definitions" in "\n".join(report.text_lines())


def test_defaults_and_computed_columns_the_monitoring_login_cannot_read_are_no_drift_but_a_note():
    """sys.default_constraints' and sys.computed_columns' definitions are NULL to it too (the rows are there)."""
    server = SqlServerCatalog()
    table = [c if c.name != "Recoverable" else Column("Recoverable", "bit", default="((1))") for c in queue_table(body_string=True)]
    server.create_table("dbo", "Sales", table, QUEUE_INDEXES)
    server.as_monitoring_login()
    spec = TableSpec(Kind.QUEUE, TableName("Sales"), body_string=True)
    report = diff(Blueprint("9.1", ("mssql",), (spec,)), "a", "a", ENGINE.catalog.read_shapes(server), engine=ENGINE)
    # the computed BodyString is compared as there; the DEFAULT our DDL never makes is still drift
    assert [(f.category, f.detail) for f in report.findings] == [
        ("column_default", "recoverable: expected no default, found default (a definition this login cannot read: needs VIEW DEFINITION)")
    ]
    (note,) = report.notes
    assert "(dbo.Sales.Index_Expires, dbo.Sales.bodystring, dbo.Sales.recoverable)" in note


def test_an_unread_filter_where_none_is_expected_is_still_drift():
    """has_filter alone tells a filtered index from an unfiltered one: 2.2's plain Index_Expires filtered is drift."""
    report = check(
        version="2.2.3",
        columns=queue_columns(headers=("varchar", -1)),
        indexes=queue_indexes(rowversion="CLUSTERED", expires_filter=None)[:1]
        + [(SALES, 3, "Index_Expires", "NONCLUSTERED", False, True, None)],
        index_columns=queue_index_columns(rowversion="CLUSTERED"),
    )
    assert found(report) == [("index_predicate", "dbo.Sales")]
    assert report.findings[0].detail == (
        "Index_Expires: expected no predicate, found a filter whose definition this login cannot read (needs VIEW DEFINITION)"
    )


def test_a_readable_filter_is_compared_as_before():
    report = check(indexes=queue_indexes(expires_filter="([Expires]>getdate())"))
    assert found(report) == [("index_predicate", "dbo.Sales")] and report.notes == []
