"""Drift checks cover saga tables: live on SQLite, PostgreSQL and MariaDB, drifted one difference at a time
(on MariaDB, a saga-only engine, the topology's queue tables are not expected)."""

from __future__ import annotations

import json

import pytest

from sqltransport_schema import cli, engines
from sqltransport_schema.schema import Correlation, Kind, TableName, TableSpec

from .support.databases import connect

TOPOLOGY = """\
transport_version: "9.1"
engines: [sqlite, postgresql]
endpoints:
  - name: Sales
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
        transitional: {name: OrderNumber, type: int}
"""
SPEC = TableSpec(
    Kind.SAGA,
    TableName("Sales_OrderSaga"),
    correlation=Correlation("OrderId", "guid"),
    transitional=Correlation("OrderNumber", "int"),
    saga_prefix="Sales_",
)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def findings(project, url: str, capsys) -> tuple[int, list[tuple[str, str | None, str]]]:
    code = cli.main(["check", "--url", url, "-c", str(project.ini), "--format", "json"])
    payload = json.loads(capsys.readouterr().out)
    return code, [(f["category"], f["table"], f["detail"]) for f in payload["findings"]]


def execute(url: str, *statements: str) -> None:
    db = connect(url)
    try:
        with db.begin() as conn:
            for sql in statements:
                conn.exec_driver_sql(sql)
    finally:
        db.dispose()


@pytest.fixture
def deployed(project, saga_db, capsys):
    project.deploy(saga_db, TOPOLOGY.replace("engines: [sqlite, postgresql]", "engines: [sqlite, postgresql, mysql]"), "sagas")
    capsys.readouterr()
    return saga_db


def is_mysql(url: str) -> bool:
    return url.startswith("mysql")


def _drop_index(url: str, engine, index: str) -> str:
    if is_mysql(url):
        return f"DROP INDEX {engine.quote(index)} ON {engine.qualified(SPEC.name)}"
    return f"DROP INDEX {engine.quote(index) if is_sqlite(url) else engine.qualified(TableName(index))}"


def _names(url):
    engine = engines.get("sqlite" if is_sqlite(url) else "mysql" if is_mysql(url) else "postgresql")
    table = engine.qualified(SPEC.name)
    index = engine.correlation_index(SPEC, "OrderNumber")
    return engine, table, index


def test_a_deployed_saga_table_is_in_sync(project, deployed, capsys):
    code, found = findings(project, deployed, capsys)
    assert code == 0 and found == []


def test_missing_saga_table_is_reported(project, deployed, capsys):
    _, table, _ = _names(deployed)
    execute(deployed, f"DROP TABLE {table}")
    code, found = findings(project, deployed, capsys)
    assert code == 1
    assert [(c, d) for c, t, d in found] == [("missing_table", "saga table is not in the database")]


def test_missing_correlation_index_is_reported(project, deployed, capsys):
    engine, _, index = _names(deployed)
    execute(deployed, _drop_index(deployed, engine, index))
    code, found = findings(project, deployed, capsys)
    assert code == 1
    ((category, _table, detail),) = found
    assert category == "missing_index" and index in detail and "unique" in detail and "correlation_ordernumber" in detail


def test_missing_correlation_column_is_reported(project, deployed, capsys):
    engine, table, index = _names(deployed)
    column = engine.quote("Correlation_OrderNumber")
    execute(deployed, _drop_index(deployed, engine, index), f"ALTER TABLE {table} DROP COLUMN {column}")
    code, found = findings(project, deployed, capsys)
    assert code == 1
    categories = sorted(c for c, _, _ in found)
    assert categories == ["missing_column", "missing_index"]
    assert any(c == "missing_column" and d.startswith("correlation_ordernumber (") for c, _, d in found)


def test_a_non_unique_or_unfiltered_correlation_index_is_reported(project, deployed, capsys):
    engine, table, index = _names(deployed)
    column = engine.quote("Correlation_OrderNumber")
    execute(deployed, _drop_index(deployed, engine, index), f"CREATE INDEX {engine.quote(index)} ON {table} ({column})")
    code, found = findings(project, deployed, capsys)
    assert code == 1
    assert [c for c, _, _ in found] == ["index_columns"]
