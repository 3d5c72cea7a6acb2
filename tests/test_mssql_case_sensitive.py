"""A case-sensitive SQL Server database (a `_CS_` collation, which the transport supports), issue 53
item 1: identifiers, the catalog's own included, match only in their exact case there, so every
catalog name the project writes is spelled as the catalog spells it (sys views lower case,
INFORMATION_SCHEMA upper case). The SQL Server-shaped catalog (support/mssql_catalog.py) made
case-sensitive refuses a name in another case as SQL Server does ("Invalid object name" 208,
"Invalid column name" 207), and every SQL Server text is held to the same rule."""

from __future__ import annotations

import re
import sqlite3

import pytest

from sqltransport_schema.engines.catalog import Catalog as NeutralCatalog
from sqltransport_schema.engines.mssql import MSSQL
from sqltransport_schema.engines.mssql.live_bus import LiveBus
from sqltransport_schema.engines.mssql.sagas import Sagas
from sqltransport_schema.schema import Correlation, Kind, TableName, TableSpec
from sqltransport_schema.versions import profile

from .support.mssql_catalog import (
    CASE_SENSITIVE_COLLATION,
    QUEUE_INDEXES,
    Column,
    SqlServerCatalog,
    case_problems,
    queue_table,
)
from .test_sql_server_versions import RELEASES, release_texts, templates

ENGINE = MSSQL()


def case_sensitive_catalog() -> SqlServerCatalog:
    server = SqlServerCatalog(CASE_SENSITIVE_COLLATION)
    server.create_table("dbo", "Sales", queue_table(), QUEUE_INDEXES)
    return server


def test_the_neutral_column_listing_fails_in_a_case_sensitive_database():
    """Why: the listing SQL Server inherited (lower-case information_schema.columns) is refused there."""
    with pytest.raises(sqlite3.OperationalError, match="Invalid object name 'information_schema.columns'"):
        case_sensitive_catalog().exec_driver_sql(NeutralCatalog.EXISTING_COLUMNS)
    # the same query runs where names compare without case: the catalog fixture itself reads it
    assert SqlServerCatalog().exec_driver_sql(NeutralCatalog.EXISTING_COLUMNS)


def test_sql_servers_column_listing_runs_in_a_case_sensitive_database():
    columns = ENGINE.catalog.existing_columns(case_sensitive_catalog())
    assert columns[ENGINE.table_key(TableName("Sales", "dbo"))] == {
        "id", "correlationid", "replytoaddress", "recoverable", "expires", "headers", "body", "rowversion",
    }  # fmt: skip


def test_check_reads_a_case_sensitive_database():
    live = ENGINE.catalog.read_shapes(case_sensitive_catalog())
    assert ENGINE.table_key(TableName("Sales", "dbo")) in live


def test_the_sagas_type_check_runs_in_a_case_sensitive_database():
    """The installer's check of an existing correlation column (SQL persistence's INFORMATION_SCHEMA read)."""
    server = SqlServerCatalog(CASE_SENSITIVE_COLLATION)
    server.create_table("dbo", "Orders", [Column("Id", "uniqueidentifier"), Column("Correlation_OrderId", "nvarchar", 400, nullable=True)])
    spec = TableSpec(Kind.SAGA, TableName("Orders", "dbo"), correlation=Correlation("OrderId", "string"))
    (verify,) = [batch for batch in ENGINE.add_saga_correlation(spec, spec.correlations[0]) if "DECLARE @found" in batch]
    (query,) = re.findall(r"= \((.*?)\n\);", verify, re.S)
    assert server.exec_driver_sql(query.replace("N'", "'")) == [("nvarchar",)]
    lower = query.replace("DATA_TYPE", "data_type").replace("TABLE_SCHEMA", "table_schema")
    with pytest.raises(sqlite3.OperationalError, match="Invalid column name 'data_type'"):
        server.exec_driver_sql(lower.replace("N'", "'"))


def test_the_case_rule_reads_what_sql_server_would_refuse():
    assert case_problems("SELECT name FROM sys.tables") == []
    assert case_problems("SELECT Name FROM SYS.Tables") == ["Invalid object name 'SYS.Tables'.", "Invalid column name 'Name'."]
    assert case_problems("SELECT TABLE_NAME FROM [nsb].INFORMATION_SCHEMA.COLUMNS") == []
    assert case_problems("SELECT table_name FROM INFORMATION_SCHEMA.Columns") == [
        "Invalid object name 'INFORMATION_SCHEMA.Columns'.",
        "Invalid column name 'table_name'.",
    ]


def every_text() -> list[tuple[str, str]]:
    """Every SQL Server text the project runs or prints that reads the catalog: each release's DDL and
    runtime statements, the saga and outbox DDL, check's catalog reads, grants, status and retry."""
    texts = []
    for version in RELEASES:
        ddl, runtime = release_texts(version)
        texts += [(f"{version} ddl", text) for text in ddl] + [(f"{version} runtime", text) for text in runtime]
        for name, statement in ENGINE.runtime_statements(profile(version), TableName("Sales", "dbo", "nsb"), peek_batch_size=10).items():
            texts.append((f"{version} {name}", statement.sql))
    spec = TableSpec(Kind.SAGA, TableName("Orders", "dbo", "nsb"), correlation=Correlation("OrderId", "string"))
    texts += [("saga", text) for text in ENGINE.create_table(spec, profile("9.1"))]
    for section in (Sagas, MSSQL.Catalog, MSSQL.Grants, LiveBus):
        texts += [(section.__name__, text) for text in templates(section)]
    return texts


def test_every_sql_server_text_spells_the_catalog_in_its_exact_case():
    texts = every_text()
    assert any("INFORMATION_SCHEMA" in text for _, text in texts) and any("sys.indexes" in text for _, text in texts)
    problems = {label: found for label, text in texts if (found := case_problems(text))}
    assert problems == {}
