"""Alembic operations for SQL persistence's tables, declared: saga tables (create, add/drop a
correlation column, drop) and outbox tables (create, drop).

Every argument that decides the DDL is a literal in the revision: the table as deployed,
the endpoint's table prefix (PostgreSQL index names derive from it) and each correlation
property's name and type. migrate/toimpl.py turns an operation into statements and
migrate/execution.py executes or prints them, as for the transport tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..schema import Correlation, Kind, TableName, TableSpec
from .ops import TENANT_ARGUMENT, TransportOp, _call, _literal, _OnSpec, register

if TYPE_CHECKING:
    from ..engines import Dialect


def _spec(
    name: TableName,
    prefix: str | None,
    correlation: tuple[str, str] | None = None,
    transitional: tuple[str, str] | None = None,
    tenant: bool = False,
) -> TableSpec:
    return TableSpec(
        Kind.SAGA,
        name,
        correlation=Correlation(*correlation) if correlation else None,
        transitional=Correlation(*transitional) if transitional else None,
        saga_prefix=prefix,
        tenant=tenant,
    )


def _placed(spec: TableSpec) -> str:
    """The tail of a call on a table placed in tenant databases (nothing for the shared one's)."""
    return TENANT_ARGUMENT if spec.tenant else ""


def _pair(correlation: Correlation) -> str:
    return f"({_literal(correlation.name)}, {_literal(correlation.type)})"


def _where(spec: TableSpec, dialect: Dialect | None) -> str:
    where = dialect.display(spec.name) if dialect else str(spec.name)
    return where + " in tenant databases" if spec.tenant else where


@dataclass
class _SagaTableOp(_OnSpec, TransportOp):
    table: TableSpec

    noun = "saga table"

    @classmethod
    def declare(
        cls,
        name: TableName,
        *,
        prefix: str | None = None,
        correlation: tuple[str, str] | None = None,
        transitional: tuple[str, str] | None = None,
        tenant: bool = False,
        **rest: Any,
    ) -> TransportOp:
        return cls(_spec(name, prefix, correlation, transitional, tenant), **rest)

    def _tail(self) -> str:
        tail = f"prefix={_literal(self.table.saga_prefix)}"
        if self.table.correlation is not None:
            tail += f", correlation={_pair(self.table.correlation)}"
        if self.table.transitional is not None:
            tail += f", transitional={_pair(self.table.transitional)}"
        return tail + _placed(self.table)


@register("create_saga_table")
class CreateSagaTableOp(_SagaTableOp):
    """Create a saga table with its correlation columns and their unique indexes."""

    adopts = True  # an existing table of SQL persistence's is adopted if it has the expected columns
    origin = "SQL persistence"
    lock_cost = 12

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
    noun: str
    drops = True
    lock_cost = 14
    guarded_rows = discarded = "rows"  # what the guard keeps, and what discard_messages loses, as described
    inverse: type[TransportOp]  # the create it reverses to

    def locked_table(self) -> TableName | None:
        return self.table.name

    def __init__(self, table: TableSpec, discard_messages: bool = False):
        super().__init__(table)
        self.discard_messages = discard_messages

    def python(self) -> str:
        return _call(self.op_name, self.table.name, self._tail() + (", discard_messages=True" if self.discard_messages else ""))

    def describe(self, dialect: Dialect | None = None) -> str:
        how = f"discarding its {self.discarded}" if self.discard_messages else f"if it holds no {self.guarded_rows}"
        return f"drop {self.noun} {_where(self.table, dialect)} ({how})"

    def reverse(self) -> TransportOp:
        return self.inverse(self.table)


@register("drop_saga_table")
class DropSagaTableOp(_DropPersistenceTable, _SagaTableOp):
    """Drop a saga table; the database refuses while it holds sagas unless discard_messages."""

    guarded_rows = discarded = "sagas"
    inverse = CreateSagaTableOp


@dataclass
class _CorrelationOp(_OnSpec, TransportOp):
    table: TableSpec  # the table (name and prefix; correlations not needed)
    correlation: Correlation

    @classmethod
    def declare(
        cls,
        name: TableName,
        *,
        prefix: str | None = None,
        property: tuple[str, str],
        tenant: bool = False,
        **rest: tuple[str, str] | None,
    ) -> TransportOp:
        pairs = {key: Correlation(*pair) if pair else None for key, pair in rest.items()}  # require=
        return cls(_spec(name, prefix, tenant=tenant), Correlation(*property), **pairs)

    def _tail(self) -> str:
        return f"prefix={_literal(self.table.saga_prefix)}, property={_pair(self.correlation)}{_placed(self.table)}"

    def locked_table(self) -> TableName | None:
        return self.table.name


@register("add_saga_correlation")
class AddSagaCorrelationOp(_CorrelationOp):
    """Add a Correlation_<property> column (NULL in existing rows) and its unique index."""

    lock_cost = 6

    def rewrite(self, dialect: Dialect) -> str | None:
        return dialect.correlation_index_build()

    def describe(self, dialect: Dialect | None = None) -> str:
        return f"add correlation property {self.correlation.name} ({self.correlation.type}) to saga table {_where(self.table, dialect)}"

    def python(self) -> str:
        return _call(self.op_name, self.table.name, self._tail())

    def reverse(self) -> DropSagaCorrelationOp:
        return DropSagaCorrelationOp(self.table, self.correlation, None)


@register("drop_saga_correlation")
class DropSagaCorrelationOp(_CorrelationOp):
    """Drop a correlation column and its index. With require (a promotion), the database refuses
    while any row has Correlation_<require> NULL: the backfill is not done."""

    lock_cost = 5

    def __init__(self, table: TableSpec, correlation: Correlation, require: Correlation | None = None):
        super().__init__(table, correlation)
        self.require = require

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
@dataclass
class _OutboxTableOp(_OnSpec, TransportOp):
    table: TableSpec

    noun = "outbox table"

    @classmethod
    def declare(cls, name: TableName, *, prefix: str | None = None, tenant: bool = False, **rest: Any) -> TransportOp:
        return cls(TableSpec(Kind.OUTBOX, name, saga_prefix=prefix, tenant=tenant), **rest)

    def _tail(self) -> str:
        return f"prefix={_literal(self.table.saga_prefix)}{_placed(self.table)}"


@register("create_outbox_table")
class CreateOutboxTableOp(_OutboxTableOp):
    """Create an endpoint's outbox table and its indexes (docs/outbox.md)."""

    adopts = True  # an outbox table SQL persistence's installer made is adopted if it has the expected columns
    origin = "SQL persistence"
    lock_cost = 12

    def describe(self, dialect: Dialect | None = None) -> str:
        return f"create outbox table {_where(self.table, dialect)}"

    def python(self) -> str:
        return _call(self.op_name, self.table.name, self._tail())

    def reverse(self) -> DropOutboxTableOp:
        return DropOutboxTableOp(self.table)


@register("drop_outbox_table")
class DropOutboxTableOp(_DropPersistenceTable, _OutboxTableOp):
    """Drop an outbox table; the database refuses while a row is not dispatched unless discard_messages."""

    guarded_rows = "undispatched messages"
    inverse = CreateOutboxTableOp


SAGA_TABLE_OPS = (CreateSagaTableOp, DropSagaTableOp)
