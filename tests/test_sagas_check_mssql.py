"""check of SQL Server saga tables without a server: catalog rows as the sys.* queries return them."""

from __future__ import annotations

from sqltransport_schema.check import diff
from sqltransport_schema.engines.mssql import MSSQL
from sqltransport_schema.schema import Blueprint, Correlation, Kind, TableName, TableSpec

from .support.mssql_catalog import column_rows, index_column_rows, index_rows

ENGINE = MSSQL()
SAGA = 901578250
SPEC = TableSpec(
    Kind.SAGA,
    TableName("Sales_OrderSaga"),
    correlation=Correlation("OrderId", "guid"),
    transitional=Correlation("PlacedAt", "datetimeoffset"),
    saga_prefix="Sales_",
)
TABLES = [(SAGA, "dbo", "Sales_OrderSaga")]


def columns(placed_at=("datetimeoffset", 10, 34, 7)):
    rows = [
        (SAGA, "Id", "uniqueidentifier", 16, 0, 0, False, False, False),
        (SAGA, "Metadata", "nvarchar", -1, 0, 0, False, False, False),
        (SAGA, "Data", "nvarchar", -1, 0, 0, False, False, False),
        (SAGA, "PersistenceVersion", "varchar", 23, 0, 0, False, False, False),
        (SAGA, "SagaTypeVersion", "varchar", 23, 0, 0, False, False, False),
        (SAGA, "Concurrency", "int", 4, 10, 0, False, False, False),
        (SAGA, "Correlation_OrderId", "uniqueidentifier", 16, 0, 0, True, False, False),
    ]
    if placed_at:
        rows.append((SAGA, "Correlation_PlacedAt", placed_at[0], placed_at[1], placed_at[2], placed_at[3], True, False, False))
    return rows


def indexes(filtered=True, placed_at=True):
    rows = [
        (SAGA, 1, "PK__Sales_Or__3214EC07A1B2C3D4", "CLUSTERED", True, False, None),
        (SAGA, 2, "Index_Correlation_OrderId", "NONCLUSTERED", True, filtered, "([Correlation_OrderId] IS NOT NULL)" if filtered else None),
    ]
    if placed_at:
        rows.append((SAGA, 3, "Index_Correlation_PlacedAt", "NONCLUSTERED", True, True, "([Correlation_PlacedAt] IS NOT NULL)"))
    return rows


def index_columns(placed_at=True):
    rows = [(SAGA, 1, "Id", 1, False), (SAGA, 2, "Correlation_OrderId", 1, False)]
    if placed_at:
        rows.append((SAGA, 3, "Correlation_PlacedAt", 1, False))
    return rows


def check(cols=None, idx=None, idx_cols=None, tables=TABLES):
    live = ENGINE.catalog.shapes_from_rows(
        tables,
        column_rows(columns() if cols is None else cols),
        index_rows(indexes() if idx is None else idx),
        index_column_rows(index_columns() if idx_cols is None else idx_cols),
    )
    return diff(Blueprint("9.1", ("mssql",), (SPEC,)), "a", "a", live, engine=ENGINE)


def found(report):
    return [(f.category, f.table) for f in report.findings]


def test_a_saga_table_as_the_ddl_creates_it_is_in_sync():
    assert check().findings == []


def test_missing_saga_table():
    assert found(check(tables=[], cols=[], idx=[], idx_cols=[])) == [("missing_table", "dbo.Sales_OrderSaga")]


def test_missing_correlation_column_and_index():
    report = check(cols=columns(placed_at=None), idx=indexes(placed_at=False), idx_cols=index_columns(placed_at=False))
    assert sorted(found(report)) == [("missing_column", "dbo.Sales_OrderSaga"), ("missing_index", "dbo.Sales_OrderSaga")]


def test_unfiltered_correlation_index_and_wrong_type():
    report = check(idx=indexes(filtered=False), cols=columns(placed_at=("datetime", 8, 23, 3)))
    assert sorted(f.category for f in report.findings) == ["column_type", "index_predicate"]
