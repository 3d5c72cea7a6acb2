"""Each engine's column table (Dialect.COLUMNS) is the one source of a table kind's columns: the
CREATE templates stay readable SQL for DBAs, so these tests hold their text to the table, and the
adoptable-column sets, check's expected shapes and the pipeline's layouts are read from it."""

from __future__ import annotations

import re

import pytest

from sqltransport_schema import engines
from sqltransport_schema.pipeline import layouts
from sqltransport_schema.schema import Kind, TableName, TableSpec
from sqltransport_schema.versions import profile

TRANSPORT_KINDS = (Kind.QUEUE, Kind.DELAYED, Kind.SUBSCRIPTIONS)
# every version boundary of the CREATE texts (scripts, headers type, delayed, subscriptions, PostgreSQL)
VERSIONS = ("1.0", "2.2.3", "2.2.6", "3.0", "3.1", "4.1", "5.0", "6.3.1", "8.1", "9.1")
_CREATE = re.compile(r"CREATE TABLE\s+(?:IF NOT EXISTS\s+)?[^(]*\(")
_CONSTRAINT = re.compile(r"^(PRIMARY\s+KEY|CONSTRAINT|UNIQUE|CHECK|FOREIGN\s+KEY)\b", re.IGNORECASE)


def created_columns(batches: list[str]) -> list[list[str]]:
    """The column names of every CREATE TABLE in the batches, in order, unquoted."""
    out = []
    for batch in batches:
        for match in _CREATE.finditer(batch):
            depth, start, pieces = 1, match.end(), []
            i = start
            while depth:
                ch = batch[i]
                if ch == "(":
                    depth += 1
                elif ch == ")":
                    depth -= 1
                if (ch == "," and depth == 1) or depth == 0:
                    pieces.append(batch[start:i].strip())
                    start = i + 1
                i += 1
            names = [re.split(r"\s", p, maxsplit=1)[0].strip('[]"') for p in pieces if p and not _CONSTRAINT.match(p)]
            out.append(names)
    return out


def cases():
    for name in engines.TRANSPORT_ENGINES:
        dialect = engines.get(name)
        for version in VERSIONS:
            prof = profile(version)
            if dialect.unsupported(prof):
                continue
            for kind in TRANSPORT_KINDS:
                if (kind is Kind.DELAYED and not prof.delayed_delivery) or (kind is Kind.SUBSCRIPTIONS and not prof.subscriptions):
                    continue
                yield pytest.param(dialect, prof, kind, id=f"{name}-{version}-{kind.value}")


@pytest.mark.parametrize("dialect, prof, kind", list(cases()))
def test_create_text_names_exactly_the_column_table(dialect, prof, kind):
    spec = TableSpec(kind, TableName("Sales.Orders", dialect.default_schema))
    assert created_columns(dialect.create_table(spec, prof)) == [list(dialect.column_names(kind))]


@pytest.mark.parametrize("name", ["sqlite", "mssql"])
def test_body_string_is_the_one_column_beyond_the_table(name):
    dialect = engines.get(name)
    spec = TableSpec(Kind.QUEUE, TableName("Sales", dialect.default_schema), body_string=True)
    created = created_columns(dialect.create_table(spec, profile("9.1")))
    if name == "sqlite":  # a generated column in the CREATE text
        assert created == [list(dialect.column_names(Kind.QUEUE)) + ["BodyString"]]
    else:  # an ALTER TABLE ADD after the CREATE
        assert created == [list(dialect.column_names(Kind.QUEUE))]


@pytest.mark.parametrize("name", engines.TRANSPORT_ENGINES)
def test_adoptable_columns_and_expected_shapes_come_from_the_table(name):
    dialect = engines.get(name)
    for kind in TRANSPORT_KINDS:
        names = {c.lower() for c in dialect.column_names(kind)}
        assert dialect.expected[kind.value] == names
        spec = TableSpec(kind, TableName("Sales", dialect.default_schema))
        assert set(dialect.expected_shape(spec, profile("9.1")).columns) == names


@pytest.mark.parametrize("name", engines.TRANSPORT_ENGINES)
def test_pipeline_layout_of_an_engine_has_its_columns(name):
    """A layout is named for the transport whose columns it has; an engine's own tables have the
    columns of the layout it declares (SQLite's are SQL Server's)."""
    dialect = engines.get(name)
    for kind in TRANSPORT_KINDS:
        assert layouts.layout(dialect.pipeline.layout, kind).columns == dialect.column_names(kind)


@pytest.mark.parametrize("name", ["postgresql", "mysql", "sqlite", "mssql", "oracle"])
def test_the_outbox_creates_exactly_its_column_table(name):
    dialect = engines.get(name)
    spec = TableSpec(Kind.OUTBOX, TableName("Sales_OutboxData", dialect.default_schema), saga_prefix="Sales_")
    assert created_columns(dialect.create_outbox(spec)) == [[c.name for c in dialect.OUTBOX_COLUMNS]]
