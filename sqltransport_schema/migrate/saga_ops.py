"""Alembic operations for SQL persistence's tables, declared: saga tables (create, add/drop a
correlation column, drop) and outbox tables (create, drop).

Every argument that decides the DDL is a literal in the revision: the table as deployed,
the endpoint's table prefix (PostgreSQL index names derive from it) and each correlation
property's name and type. migrate/toimpl.py turns an operation into statements and
migrate/execution.py executes or prints them, as for the transport tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from alembic.operations import Operations

from ..schema import Correlation, Kind, TableName, TableSpec
from .ops import TransportOp, _call, _literal, _OnSpec

if TYPE_CHECKING:
    from ..engines import Dialect


def _spec(
    table: str,
    schema: str | None,
    catalog: str | None,
    prefix: str | None,
    correlation: tuple[str, str] | None = None,
    transitional: tuple[str, str] | None = None,
) -> TableSpec:
    return TableSpec(
        Kind.SAGA,
        TableName(table, schema, catalog),
        correlation=Correlation(*correlation) if correlation else None,
        transitional=Correlation(*transitional) if transitional else None,
        saga_prefix=prefix,
    )


def _pair(correlation: Correlation) -> str:
    return f"({_literal(correlation.name)}, {_literal(correlation.type)})"


def _where(spec: TableSpec, dialect: Dialect | None) -> str:
    return dialect.display(spec.name) if dialect else str(spec.name)


@dataclass
class _SagaTableOp(_OnSpec, TransportOp):
    table: TableSpec

    noun = "saga table"

    def _tail(self) -> str:
        tail = f"prefix={_literal(self.table.saga_prefix)}"
        if self.table.correlation is not None:
            tail += f", correlation={_pair(self.table.correlation)}"
        if self.table.transitional is not None:
            tail += f", transitional={_pair(self.table.transitional)}"
        return tail


@Operations.register_operation("create_saga_table")
class CreateSagaTableOp(_SagaTableOp):
    op_name = "create_saga_table"
    adopts = True  # an existing table of SQL persistence's is adopted if it has the expected columns
    origin = "SQL persistence"
    lock_cost = 12

    @classmethod
    def create_saga_table(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        prefix: str | None = None,
        correlation: tuple[str, str] | None = None,
        transitional: tuple[str, str] | None = None,
    ) -> None:
        """Create a saga table with its correlation columns and their unique indexes."""
        return operations.invoke(cls(_spec(table, schema, catalog, prefix, correlation, transitional)))

    def describe(self, dialect: Dialect | None = None) -> str:
        props = ", ".join(c.name for c in self.table.correlations)
        return f"create saga table {_where(self.table, dialect)} (correlation {props})"

    def python(self) -> str:
        return _call(self.op_name, self.table.name, self._tail())

    def reverse(self) -> DropSagaTableOp:
        return DropSagaTableOp(self.table)


class _DropPersistenceTable:
    """A drop of a SQL persistence table: refused by the database while rows it keeps are left,
    unless discard_messages (the table's kind says which rows: every saga, undispatched messages)."""

    table: TableSpec
    drops = True
    lock_cost = 14

    def locked_table(self) -> TableName | None:
        return self.table.name

    def __init__(self, table: TableSpec, discard_messages: bool = False):
        super().__init__(table)
        self.discard_messages = discard_messages

    def python(self) -> str:
        return _call(self.op_name, self.table.name, self._tail() + (", discard_messages=True" if self.discard_messages else ""))


@Operations.register_operation("drop_saga_table")
class DropSagaTableOp(_DropPersistenceTable, _SagaTableOp):
    op_name = "drop_saga_table"

    @classmethod
    def drop_saga_table(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        prefix: str | None = None,
        correlation: tuple[str, str] | None = None,
        transitional: tuple[str, str] | None = None,
        discard_messages: bool = False,
    ) -> None:
        """Drop a saga table; the database refuses while it holds sagas unless discard_messages."""
        return operations.invoke(cls(_spec(table, schema, catalog, prefix, correlation, transitional), discard_messages))

    def describe(self, dialect: Dialect | None = None) -> str:
        how = "discarding its sagas" if self.discard_messages else "refused while it holds sagas"
        return f"drop saga table {_where(self.table, dialect)} ({how})"

    def reverse(self) -> CreateSagaTableOp:
        return CreateSagaTableOp(self.table)


@dataclass
class _CorrelationOp(_OnSpec, TransportOp):
    table: TableSpec  # the table (name and prefix; correlations not needed)
    correlation: Correlation

    def _tail(self) -> str:
        return f"prefix={_literal(self.table.saga_prefix)}, property={_pair(self.correlation)}"

    def locked_table(self) -> TableName | None:
        return self.table.name


@Operations.register_operation("add_saga_correlation")
class AddSagaCorrelationOp(_CorrelationOp):
    op_name = "add_saga_correlation"
    lock_cost = 6

    @classmethod
    def add_saga_correlation(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        prefix: str | None = None,
        property: tuple[str, str],
    ) -> None:
        """Add a Correlation_<property> column (NULL in existing rows) and its unique index."""
        return operations.invoke(cls(_spec(table, schema, catalog, prefix), Correlation(*property)))

    def rewrite(self, dialect: Dialect) -> str | None:
        return dialect.correlation_index_build()

    def describe(self, dialect: Dialect | None = None) -> str:
        return f"add correlation property {self.correlation.name} ({self.correlation.type}) to saga table {_where(self.table, dialect)}"

    def python(self) -> str:
        return _call(self.op_name, self.table.name, self._tail())

    def reverse(self) -> DropSagaCorrelationOp:
        return DropSagaCorrelationOp(self.table, self.correlation, None)


@Operations.register_operation("drop_saga_correlation")
class DropSagaCorrelationOp(_CorrelationOp):
    op_name = "drop_saga_correlation"
    lock_cost = 5

    def __init__(self, table: TableSpec, correlation: Correlation, require: Correlation | None = None):
        super().__init__(table, correlation)
        self.require = require

    @classmethod
    def drop_saga_correlation(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        prefix: str | None = None,
        property: tuple[str, str],
        require: tuple[str, str] | None = None,
    ) -> None:
        """Drop a correlation column and its index. With require (a promotion), the database refuses
        while any row has Correlation_<require> NULL: the backfill is not done."""
        return operations.invoke(
            cls(_spec(table, schema, catalog, prefix), Correlation(*property), Correlation(*require) if require else None)
        )

    def describe(self, dialect: Dialect | None = None) -> str:
        text = f"drop correlation property {self.correlation.name} of saga table {_where(self.table, dialect)}"
        if self.require is not None:
            text += f" (promoting {self.require.name}; refused while any row lacks it)"
        return text

    def python(self) -> str:
        tail = self._tail() + (f", require={_pair(self.require)}" if self.require is not None else "")
        return _call(self.op_name, self.table.name, tail)

    def reverse(self) -> AddSagaCorrelationOp:
        return AddSagaCorrelationOp(self.table, self.correlation)


# --------------------------------------------------------------------------- outbox tables
def _outbox(table: str, schema: str | None, catalog: str | None, prefix: str | None) -> TableSpec:
    return TableSpec(Kind.OUTBOX, TableName(table, schema, catalog), saga_prefix=prefix)


@dataclass
class _OutboxTableOp(_OnSpec, TransportOp):
    table: TableSpec

    noun = "outbox table"

    def _tail(self) -> str:
        return f"prefix={_literal(self.table.saga_prefix)}"


@Operations.register_operation("create_outbox_table")
class CreateOutboxTableOp(_OutboxTableOp):
    op_name = "create_outbox_table"
    adopts = True  # an outbox table SQL persistence's installer made is adopted if it has the expected columns
    origin = "SQL persistence"
    lock_cost = 12

    @classmethod
    def create_outbox_table(
        cls, operations: Operations, table: str, *, schema: str | None = None, catalog: str | None = None, prefix: str | None = None
    ) -> None:
        """Create an endpoint's outbox table and its indexes (docs/outbox.md)."""
        return operations.invoke(cls(_outbox(table, schema, catalog, prefix)))

    def describe(self, dialect: Dialect | None = None) -> str:
        return f"create outbox table {_where(self.table, dialect)}"

    def python(self) -> str:
        return _call(self.op_name, self.table.name, self._tail())

    def reverse(self) -> DropOutboxTableOp:
        return DropOutboxTableOp(self.table)


@Operations.register_operation("drop_outbox_table")
class DropOutboxTableOp(_DropPersistenceTable, _OutboxTableOp):
    op_name = "drop_outbox_table"

    @classmethod
    def drop_outbox_table(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        prefix: str | None = None,
        discard_messages: bool = False,
    ) -> None:
        """Drop an outbox table; the database refuses while a row is not dispatched unless discard_messages."""
        return operations.invoke(cls(_outbox(table, schema, catalog, prefix), discard_messages))

    def describe(self, dialect: Dialect | None = None) -> str:
        how = "discarding its rows" if self.discard_messages else "refused while it holds undispatched messages"
        return f"drop outbox table {_where(self.table, dialect)} ({how})"

    def reverse(self) -> CreateOutboxTableOp:
        return CreateOutboxTableOp(self.table)


SAGA_TABLE_OPS = (CreateSagaTableOp, DropSagaTableOp)
