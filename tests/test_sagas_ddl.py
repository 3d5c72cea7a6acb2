"""Saga DDL per engine: SQL Server and Oracle golden texts, SQL Server batches parse as T-SQL,
offline scripts for Oracle and MySQL, identifiers quoted, index names stable and within limits."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from sqltransport_schema import engines
from sqltransport_schema.schema import Correlation, Kind, TableName, TableSpec

from .support.golden import assert_golden, render
from .support.tsql import assert_parses

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


# --------------------------------------------------------------------------- SQL Server
def test_mssql_saga_ddl_matches_the_golden_script():
    assert_golden("mssql_sagas.sql", render("mssql", [ORDER, INVOICES], "GO", lifecycle))


def test_mssql_saga_ddl_follows_transport_facts_8():
    create = "\n".join(engines.get("mssql").create_saga(ORDER))
    for column in (
        "Id uniqueidentifier NOT NULL PRIMARY KEY",
        "Metadata nvarchar(max) NOT NULL",
        "Data nvarchar(max) NOT NULL",
        "PersistenceVersion varchar(23) NOT NULL",
        "SagaTypeVersion varchar(23) NOT NULL",
        "Concurrency int NOT NULL",
    ):
        assert column in create
    assert "[Correlation_OrderId] uniqueidentifier NULL" in create and "[Correlation_OrderNumber] nvarchar(200) NULL" in create
    assert (
        "CREATE UNIQUE NONCLUSTERED INDEX [Index_Correlation_OrderId] ON [dbo].[Sales_OrderSaga] ([Correlation_OrderId])\n"
        "    WHERE [Correlation_OrderId] IS NOT NULL;" in create
    )
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
    assert_golden("oracle_sagas.sql", render("oracle", [oracle_order], "/", lifecycle))


def test_oracle_names_are_sql_persistences():
    """The table is the suffix alone (SQL persistence's runtime queries that name), its primary key
    "<TABLE>_PK", index names SAGAIDX_ + 22 hex of SHA-1 over '<TABLE>/<Property>'."""
    engine = engines.get("oracle")
    create = "\n".join(engine.create_saga(ORDER))
    assert 'CREATE TABLE "ORDERSAGA" (' in create and 'CONSTRAINT "ORDERSAGA_PK" PRIMARY KEY (ID) ENABLE' in create
    assert "SALES" not in create and '"CORR_ORDERID" VARCHAR2(38)' in create
    assert engine.correlation_index(ORDER, "OrderId") == "SAGAIDX_FD8BAD844CFBBE419E43FE"  # facts §7 vector
    approved = ORDER._replace(name=TableName("xtheSaga"), saga_prefix="x")
    assert engine.correlation_index(approved, "CorrelationProperty") == "SAGAIDX_E78AFF37B286FF56612DF6"
    assert 'CREATE UNIQUE INDEX "SAGAIDX_FD8BAD844CFBBE419E43FE" ON "ORDERSAGA" ("CORR_ORDERID" ASC)' in create
    assert engine.correlation_column("P" * 40) == "CORR_" + "P" * 25  # cut to 30 characters, as upstream
    statements = engine.saga_statements(ORDER._replace(name=TableName("Sales_OrderSaga", "app")))
    assert 'FROM "APP"."ORDERSAGA"' in statements["find_saga"].sql and statements["find_saga"].sql.endswith("FOR UPDATE")
    assert statements["find_saga"].native("named")[0].count(":propertyValue") == 1


# --------------------------------------------------------------------------- names
def test_postgresql_index_names_are_sql_persistences():
    """<prefix>_i_ + SHA-1 of '<suffix>/<property>' in upper-case hex (facts §7 vectors)."""
    engine = engines.get("postgresql")
    assert engine.correlation_index(ORDER, "OrderId") == "Sales__i_9ACA1354611B1EEE42F739F02F62E0AB88D036F3"
    approved = ORDER._replace(name=TableName("ptheSaga"), saga_prefix="p")
    assert engine.correlation_index(approved, "CorrelationProperty") == "p_i_D89EC3A0705013CCFF7590FD75D03B38CD0022C9"
    expected = "Sales__i_" + hashlib.sha1(b"OrderSaga/OrderId").hexdigest().upper()
    assert engine.correlation_index(ORDER, "OrderId") == expected
    batches = engine.add_saga_correlation(ORDER, ORDER.correlation)
    assert (
        batches[2]
        == f'CREATE UNIQUE INDEX IF NOT EXISTS "{expected}" ON "public"."Sales_OrderSaga" USING btree ("Correlation_OrderId" ASC)'
    )


def test_saga_runtime_statements_are_sql_persistences_per_engine():
    """Select list in upstream's order, its parameter names and its locks."""
    for name, lock in (
        ("mssql", "WITH (UPDLOCK)"),
        ("postgresql", "FOR UPDATE"),
        ("mysql", "FOR UPDATE"),
        ("oracle", "FOR UPDATE"),
        ("sqlite", None),
    ):
        statements = engines.get(name).saga_statements(ORDER)
        find, insert, update = statements["find_saga"], statements["insert_saga"], statements["update_saga"]
        assert find.params == ("propertyValue",) and find.columns == ("Id", "SagaTypeVersion", "Concurrency", "Metadata", "Data")
        assert (
            (lock in find.sql and lock in statements["get_saga_by_id"].sql)
            if lock
            else "UPDLOCK" not in find.sql and "FOR UPDATE" not in find.sql
        )
        assert insert.params[-2:] == ("CorrelationId", "TransitionalCorrelationId")
        assert "TransitionalCorrelationId" in update.params and "CorrelationId" not in update.params  # never updated
        assert statements["find_saga_by_transitional"].params == ("TransitionalCorrelationId",)
    plain = engines.get("postgresql").saga_statements(ORDER._replace(correlation=None, transitional=None))
    assert set(plain) == {"get_saga_by_id", "insert_saga", "update_saga", "complete_saga"}
    assert plain["insert_saga"].params == ("Id", "Metadata", "Data", "PersistenceVersion", "SagaTypeVersion")


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
    assert "CREATE TABLE" in script and ('"ORDERSAGA"' in script if url == "oracle://" else "`Sales_OrderSaga`" in script)
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
    assert "UPDATE [dbo].[Sales_OrderSaga]\nSET Data = @Data" in out and "WHERE Id = @Id AND Concurrency = @Concurrency" in out
    assert "FROM [dbo].[Sales_OrderSaga] WITH (UPDLOCK)\nWHERE [Correlation_OrderId] = @propertyValue" in out
    assert cli.main(["statements", "--engine", "oracle", "--sagas", "--topology", str(project.topology), "--format", "json"]) == 0
    payload = __import__("json").loads(capsys.readouterr().out)
    find = payload["statements"]["Sales_OrderSaga: find_saga"]
    assert find["params"] == ["propertyValue"] and '"ORDERSAGA"' in find["sql"] and '"CORR_ORDERID"' in find["sql"]
    assert cli.main(["statements", "--engine", "mysql"]) == 2
    assert "holds saga tables only" in capsys.readouterr().err
