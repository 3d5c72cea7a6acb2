"""Saga DDL per engine: SQL Server and Oracle golden texts, SQL Server batches parse as T-SQL,
offline scripts for Oracle and MySQL, identifiers quoted, index names stable and within limits."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sqltransport_schema import engines
from sqltransport_schema.schema import Correlation, Kind, TableName, TableSpec

from .test_mssql_ddl import assert_parses

GOLDEN = Path(__file__).parent / "golden"
BIN = Path(sys.executable).parent

ORDER = TableSpec(
    Kind.SAGA,
    TableName("Sales_OrderSaga"),
    correlation=Correlation("OrderId", "guid"),
    transitional=Correlation("OrderNumber", "string"),
    saga_prefix="Sales_",
)
INVOICES = TableSpec(
    Kind.SAGA,
    TableName("Bill_Invoices", "billing", "finance"),
    correlation=Correlation("PlacedAt", "datetimeoffset"),
    transitional=Correlation("InvoiceNumber", "int"),
    saga_prefix="Bill_",
)


def lifecycle(engine_name: str, spec: TableSpec) -> list[tuple[str, list[str]]]:
    """Every saga operation of the engine, labelled: create, add, promote (guarded), abandon, drop."""
    engine = engines.get(engine_name)
    return [
        ("create_saga_table", engine.create_saga(spec)),
        ("add_saga_correlation", engine.add_saga_correlation(spec, spec.transitional)),
        ("drop_saga_correlation (promotion, guarded)", engine.drop_saga_correlation(spec, spec.correlation, spec.transitional)),
        ("drop_saga_correlation (abandoned transition)", engine.drop_saga_correlation(spec, spec.transitional, None)),
        ("drop_saga_table (refused while it holds sagas)", engine.drop_table(spec, None, discard_messages=False)),
        ("drop_saga_table (discarding)", engine.drop_table(spec, None, discard_messages=True)),
    ]


def render(engine_name: str, specs: list[TableSpec], separator: str) -> str:
    out = []
    for spec in specs:
        for label, batches in lifecycle(engine_name, spec):
            out.append(f"-- {label}: {spec.name.table}")
            for batch in batches:
                out += [batch, separator]
    return "\n".join(out) + "\n"


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SQLTRANSPORT_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} differs; review and rerun with SQLTRANSPORT_UPDATE_GOLDEN=1"


# --------------------------------------------------------------------------- SQL Server
def test_mssql_saga_ddl_matches_the_golden_script():
    assert_golden("mssql_sagas.sql", render("mssql", [ORDER, INVOICES], "GO"))


def test_mssql_saga_ddl_follows_transport_facts_8():
    create = "\n".join(engines.get("mssql").create_saga(ORDER))
    for column in ("Id uniqueidentifier NOT NULL PRIMARY KEY", "Metadata nvarchar(max) NOT NULL", "Data nvarchar(max) NOT NULL",
                   "PersistenceVersion varchar(23) NOT NULL", "SagaTypeVersion varchar(23) NOT NULL", "Concurrency int NOT NULL"):
        assert column in create
    assert "[Correlation_OrderId] uniqueidentifier NULL" in create and "[Correlation_OrderNumber] nvarchar(200) NULL" in create
    assert "CREATE UNIQUE NONCLUSTERED INDEX [Index_Correlation_OrderId] ON [dbo].[Sales_OrderSaga] ([Correlation_OrderId])\n" \
           "    WHERE [Correlation_OrderId] IS NOT NULL;" in create
    invoices = "\n".join(engines.get("mssql").create_saga(INVOICES))
    assert "[finance].[billing].[Bill_Invoices]" in invoices and "[finance].sys.columns" in invoices
    assert "datetimeoffset NULL" in invoices and "[Correlation_InvoiceNumber] bigint NULL" in invoices


MSSQL_BATCHES = {
    f"{label}#{i}:{spec.name.table}": sql
    for spec in (ORDER, INVOICES)
    for label, batches in lifecycle("mssql", spec)
    for i, sql in enumerate(batches)
}


@pytest.mark.parametrize("label", list(MSSQL_BATCHES))
def test_mssql_saga_batches_parse_as_tsql(label):
    assert_parses(MSSQL_BATCHES[label], label)


def test_mssql_promotion_throws_in_the_database_with_backfill_advice():
    (batch,) = engines.get("mssql").drop_saga_correlation(ORDER, ORDER.correlation, ORDER.transitional)
    guard, drop = batch.index("THROW 50000"), batch.index("ALTER TABLE [dbo].[Sales_OrderSaga] DROP COLUMN [Correlation_OrderId]")
    assert "IF EXISTS (SELECT * FROM [dbo].[Sales_OrderSaga] WHERE [Correlation_OrderNumber] IS NULL)" in batch
    assert guard < drop
    assert "UPDATE [dbo].[Sales_OrderSaga] SET [Correlation_OrderNumber] = <the saga data''s OrderNumber>" in batch


# --------------------------------------------------------------------------- Oracle
def test_oracle_saga_ddl_matches_the_golden_script():
    oracle_order = ORDER._replace(transitional=Correlation("OrderNumber", "int"))
    assert_golden("oracle_sagas.sql", render("oracle", [oracle_order], "/"))


def test_oracle_names_are_upper_case_and_within_30_characters():
    engine = engines.get("oracle")
    spec = ORDER._replace(name=TableName("S" * 30))
    create = "\n".join(engine.create_saga(spec))
    assert '"' + "S" * 30 + '"' in create and '"CORR_ORDERID" VARCHAR2(38)' in create
    for c in spec.correlations:
        index = engine.correlation_index(spec, c.name)
        assert len(index) == 30 and index == index.upper() and index.startswith("SAGA_I_")
        assert index == engine.correlation_index(spec, c.name)  # stable


# --------------------------------------------------------------------------- names
def test_postgresql_index_names_hash_table_and_property_and_fit_63_bytes():
    engine = engines.get("postgresql")
    expected = "Sales__i_" + hashlib.sha1(b"Sales_OrderSaga\0OrderId").hexdigest()
    assert engine.correlation_index(ORDER, "OrderId") == expected
    long_prefix = "Ä" * 40 + "_"
    spec = ORDER._replace(name=TableName(long_prefix + "OrderSaga"), saga_prefix=long_prefix)
    name = engine.correlation_index(spec, "OrderId")
    assert len(name.encode("utf-8")) <= 63 and name.endswith(hashlib.sha1((spec.name.table + "\0OrderId").encode()).hexdigest())
    other = spec._replace(name=TableName(long_prefix + "OtherSaga"))
    assert engine.correlation_index(other, "OrderId") != name  # the cut prefix never merges two tables' indexes


# --------------------------------------------------------------------------- offline scripts
TOPOLOGY = """\
transport_version: "9.1"
engines: [mysql, oracle]
endpoints:
  - name: Sales
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
queues:
  - name: error
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("url", ["oracle://", "mysql://"])
def test_offline_scripts_hold_saga_tables_only(project, url):
    project.write_topology(TOPOLOGY)
    assert project.compile("sagas") == 0
    result = run(str(BIN / "alembic"), "-c", str(project.ini), "-x", f"url={url}", "upgrade", "head", "--sql", cwd=project.root)
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert "CREATE TABLE" in script and ("SALES_ORDERSAGA" in script if url == "oracle://" else "`Sales_OrderSaga`" in script)
    assert "error" not in script.replace("alembic_version", "")  # the queue is skipped on saga-only engines
    if url == "oracle://":
        assert "\n/\n" in script and '"CORR_ORDERID" VARCHAR2(38)' in script


# --------------------------------------------------------------------------- statements CLI
def test_statements_cli_prints_every_saga_statement(project, capsys):
    from sqltransport_schema import cli

    project.write_topology(TOPOLOGY.replace("engines: [mysql, oracle]", "engines: [mssql, mysql, oracle]"))
    assert cli.main(["statements", "--engine", "mssql", "--sagas", "--topology", str(project.topology)]) == 0
    out = capsys.readouterr().out
    for name in ("get_saga_by_id", "find_saga", "insert_saga", "update_saga", "complete_saga"):
        assert f"-- Sales_OrderSaga: {name}:" in out
    assert "UPDATE [dbo].[Sales_OrderSaga] SET Data = @Data" in out and "WHERE Id = @Id AND Concurrency = @Concurrency" in out
    assert cli.main(["statements", "--engine", "oracle", "--sagas", "--topology", str(project.topology), "--format", "json"]) == 0
    payload = __import__("json").loads(capsys.readouterr().out)
    find = payload["statements"]["Sales_OrderSaga: find_saga"]
    assert find["params"] == ["CorrelationValue"] and '"SALES_ORDERSAGA"' in find["sql"] and '"CORR_ORDERID"' in find["sql"]
    assert cli.main(["statements", "--engine", "mysql"]) == 2
    assert "holds saga tables only" in capsys.readouterr().err
