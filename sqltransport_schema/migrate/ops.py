"""Alembic operations for transport tables, declared: registered on `op`, rendered into revisions.

Each operation is a small declaration: the one `table` it acts on and the literal arguments that
decide its DDL (transport version, options), so a revision executes the same statements under any
later release. What the statements are is migrate/toimpl.py's (one function per kind); running or
printing them, with the checks every operation shares, is migrate/execution.py's (as Alembic keeps
ops.py apart from toimpl.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alembic.autogenerate import renderers
from alembic.operations import MigrateOperation, Operations

from ..runtime import wire
from ..schema import Kind, SchemaName, TableName, TableSpec, protected_by_default
from ..versions import profile

if TYPE_CHECKING:
    from alembic.autogenerate.api import AutogenContext

    from .. import engines


def _literal(value: Any) -> str:
    """A Python literal in double quotes, as a black-formatted file writes it."""
    if value.__class__ is str:
        if value.isprintable() and '"' not in value and "\\" not in value:
            return '"' + value + '"'
        return json.dumps(value, ensure_ascii=False)  # JSON string syntax is valid Python
    return repr(value)


_ONLINE = ", online=True"  # the revision's choice of an online rewrite (migrate/online.py)


def one_line(text: str) -> str:
    """Text safe inside a `--` comment or a docstring line: control characters escaped."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def _call(op_name: str, name: TableName, tail: str) -> str:
    """op.<op_name>("table", schema=..., catalog=..., <tail>): the hot path of compile."""
    head = f"op.{op_name}({_literal(name.table)}"
    if name.schema is not None:
        head += f", schema={_literal(name.schema)}"
    if name.catalog is not None:
        head += f", catalog={_literal(name.catalog)}"
    return f"{head}, {tail})"


class TransportOp(MigrateOperation):
    """Base of every operation: the table it acts on, a line of Python, a description, and what the
    steps every operation shares (migrate/execution.py) need to know of it, with their defaults."""

    op_name = ""
    noun = ""
    table: TableSpec | TableName | SchemaName  # the one thing it acts on (a spec where its kind matters)
    version: str | None = None  # the transport version whose DDL it runs, where one decides it
    # The locks it holds on PostgreSQL until its transaction ends, as pg_locks lists them (every mode of
    # every relation, sequence, index, TOAST table, transient table of a rewrite, object and transaction
    # id: more than the lock table's entries, so a safe count), measured on PostgreSQL 15 with a little
    # room; tests/test_lock_costs.py measures each kind and fails when one takes more.
    lock_cost = 0
    adopts = False  # a create that adopts an existing table of its name if it has the expected columns
    origin = "transport"  # whose table an adopting create expects, as its refusal names it
    drops = False  # a drop: the database refuses it while rows are left, unless discard_messages
    discard_messages = False
    allow_protected = False  # the per-queue override (drop_protected:) of a protected queue's drop
    subscriptions: TableName | None = None  # a dropped queue's subscription rows are deleted from this table
    online_capable = False  # it can rewrite a queue beside the live table (online_target; migrate/online.py)
    online = False  # the revision asked for that online rewrite

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        raise NotImplementedError

    def python(self) -> str:
        raise NotImplementedError

    def to_diff_tuple(self) -> tuple:
        """What `alembic check` lists for this operation."""
        return (self.op_name or type(self).__name__, self.describe())

    @property
    def table_name(self) -> TableName | None:
        """The table it changes (the one whose lock it waits for); None for a schema."""
        return None

    @property
    def guarded(self) -> bool:
        """A drop the database refuses while rows are left (its DDL's guard)."""
        return self.drops and not self.discard_messages

    def locks(self) -> int:
        """The locks it holds on PostgreSQL until commit (lock_cost)."""
        return self.lock_cost

    def locked_table(self) -> TableName | None:
        """The existing table this operation locks (None: it only creates, or touches no table)."""
        return None

    def refuses_protected(self, allowed: frozenset[str]) -> bool:
        """A drop of a protected queue that neither its revision nor the run (allowed) lets through."""
        return False

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        """Why, on this engine, the operation holds its exclusive lock for as long as the table takes
        to rewrite or rebuild (None: the lock is short, whatever the table's size)."""
        return None

    def online_target(self, current: TableSpec) -> TableSpec:
        """The queue as this operation leaves it (an online rewrite builds that beside it)."""
        raise NotImplementedError


class _OnSpec:
    """An operation whose `table` is a TableSpec (its kind and shape matter)."""

    table: TableSpec

    @property
    def table_name(self) -> TableName:
        return self.table.name


class _OnName:
    """An operation whose `table` is an existing table's name."""

    table: TableName

    @property
    def table_name(self) -> TableName:
        return self.table

    def locked_table(self) -> TableName | None:
        return self.table


# --------------------------------------------------------------------------- tables
@dataclass
class _TableOp(_OnSpec, TransportOp):
    table: TableSpec
    version: str

    kind = Kind.QUEUE
    noun = "queue"

    def where(self, dialect: engines.Dialect | None) -> str:
        """The table as messages name it (as the engine displays it, given one)."""
        return dialect.display(self.table.name, profile(self.version)) if dialect else str(self.table.name)

    def _tail(self) -> str:
        tail = f"version={_literal(self.version)}"
        if self.kind is Kind.QUEUE:
            tail += f", body_string={self.table.body_string!r}, seq_type={_literal(self.table.seq_type)}"
            if self.table.protected != protected_by_default(Kind.QUEUE, self.table.name.table):
                tail += f", protected={self.table.protected!r}"
        elif self.kind is Kind.DELAYED and self.table.body_string:
            tail += ", body_string=True"
        return tail

    @classmethod
    def _spec(
        cls,
        table: str,
        schema: str | None,
        catalog: str | None,
        body_string: bool = False,
        seq_type: str = "serial",
        protected: bool | None = None,
    ) -> TableSpec:
        if protected is None:
            protected = protected_by_default(cls.kind, table)
        return TableSpec(cls.kind, TableName(table, schema, catalog), body_string=body_string, seq_type=seq_type, protected=protected)


class _CreateTable(_TableOp):
    adopts = True

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        return f"create {self.noun} {self.where(dialect)} (transport {self.version})"

    def python(self) -> str:
        return _call(self.op_name, self.table.name, self._tail())

    def locks(self) -> int:
        """A table created with BodyString also runs the column's addition."""
        return self.lock_cost + (AddBodyStringOp.lock_cost if self.table.body_string else 0)


class _DropTable(_TableOp):
    drops = True

    def __init__(self, table: TableSpec, version: str, discard_messages: bool = False, allow_protected: bool = False):
        super().__init__(table, version)
        self.discard_messages = discard_messages
        self.allow_protected = allow_protected

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        how = "discarding its messages" if self.discard_messages else "refused while it holds messages"
        if self.table.protected:
            how += ", protected queue dropped by its drop_protected entry" if self.allow_protected else ", protected"
        return f"drop {self.noun} {self.where(dialect)} ({how})"

    def python(self) -> str:
        tail = self._tail() + (", discard_messages=True" if self.discard_messages else "")
        tail += ", allow_protected=True" if self.allow_protected else ""
        return _call(self.op_name, self.table.name, tail)

    def locked_table(self) -> TableName | None:
        return self.table.name

    def refuses_protected(self, allowed: frozenset[str]) -> bool:
        return self.table.protected and not self.allow_protected and self.table.name.table not in allowed


@Operations.register_operation("create_queue")
class CreateQueueOp(_CreateTable):
    op_name = "create_queue"
    lock_cost = 16

    @classmethod
    def create_queue(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        version: str,
        body_string: bool = False,
        seq_type: str = "serial",
        protected: bool | None = None,
    ) -> None:
        """Create a queue table shaped as the given transport version creates it."""
        return operations.invoke(cls(cls._spec(table, schema, catalog, body_string, seq_type, protected), version))

    def reverse(self) -> DropQueueOp:
        return DropQueueOp(self.table, self.version)


@Operations.register_operation("drop_queue")
class DropQueueOp(_DropTable):
    """A queue's drop; with `subscriptions` (the subscription table, as an address) it deletes the
    subscription rows naming the queue in the same transaction, so no publish is routed to it."""

    op_name = "drop_queue"
    lock_cost = 18

    def __init__(
        self,
        table: TableSpec,
        version: str,
        discard_messages: bool = False,
        allow_protected: bool = False,
        subscriptions: TableName | None = None,
    ):
        super().__init__(table, version, discard_messages, allow_protected)
        self.subscriptions = subscriptions

    def python(self) -> str:
        text = super().python()
        if self.subscriptions is None:
            return text
        address = wire.Address(*self.subscriptions).format()
        return f"{text[:-1]}, subscriptions={_literal(address)})"

    @classmethod
    def drop_queue(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        version: str,
        body_string: bool = False,
        seq_type: str = "serial",
        protected: bool | None = None,
        discard_messages: bool = False,
        allow_protected: bool = False,
        subscriptions: str | None = None,
    ) -> None:
        """Drop a queue table; the database refuses while it holds rows unless discard_messages.

        A protected queue (error, audit, protected: true) is refused unless allow_protected.
        subscriptions: the subscription table's address; the rows naming the queue are deleted.
        """
        spec = cls._spec(table, schema, catalog, body_string, seq_type, protected)
        following = None
        if subscriptions is not None:
            address = wire.parse_address(subscriptions)
            following = TableName(address.table, address.schema, address.catalog)
        return operations.invoke(cls(spec, version, discard_messages, allow_protected, following))

    def reverse(self) -> CreateQueueOp:
        return CreateQueueOp(self.table, self.version)


@Operations.register_operation("create_delayed_table")
class CreateDelayedTableOp(_CreateTable):
    op_name = "create_delayed_table"
    kind = Kind.DELAYED
    noun = "delayed table"
    lock_cost = 11

    @classmethod
    def create_delayed_table(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        version: str,
        body_string: bool = False,
    ) -> None:
        """Create an endpoint's native delayed-delivery table (with BodyString when its endpoint has it)."""
        return operations.invoke(cls(cls._spec(table, schema, catalog, body_string), version))

    def reverse(self) -> DropDelayedTableOp:
        return DropDelayedTableOp(self.table, self.version)


@Operations.register_operation("drop_delayed_table")
class DropDelayedTableOp(_DropTable):
    op_name = "drop_delayed_table"
    kind = Kind.DELAYED
    noun = "delayed table"
    lock_cost = 15

    @classmethod
    def drop_delayed_table(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        version: str,
        body_string: bool = False,
        discard_messages: bool = False,
    ) -> None:
        """Drop a delayed-delivery table; refused while it holds rows unless discard_messages."""
        return operations.invoke(cls(cls._spec(table, schema, catalog, body_string), version, discard_messages))

    def reverse(self) -> CreateDelayedTableOp:
        return CreateDelayedTableOp(self.table, self.version)


@Operations.register_operation("create_subscription_table")
class CreateSubscriptionTableOp(_CreateTable):
    op_name = "create_subscription_table"
    kind = Kind.SUBSCRIPTIONS
    noun = "subscription table"
    lock_cost = 10

    @classmethod
    def create_subscription_table(
        cls, operations: Operations, table: str, *, schema: str | None = None, catalog: str | None = None, version: str
    ) -> None:
        """Create the shared subscription routing table."""
        return operations.invoke(cls(cls._spec(table, schema, catalog), version))

    def reverse(self) -> DropSubscriptionTableOp:
        return DropSubscriptionTableOp(self.table, self.version)


@Operations.register_operation("drop_subscription_table")
class DropSubscriptionTableOp(_DropTable):
    op_name = "drop_subscription_table"
    kind = Kind.SUBSCRIPTIONS
    noun = "subscription table"
    lock_cost = 12

    @classmethod
    def drop_subscription_table(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        version: str,
        discard_messages: bool = False,
    ) -> None:
        """Drop the subscription table; refused while it holds rows unless discard_messages."""
        return operations.invoke(cls(cls._spec(table, schema, catalog), version, discard_messages))

    def reverse(self) -> CreateSubscriptionTableOp:
        return CreateSubscriptionTableOp(self.table, self.version)


# --------------------------------------------------------------------------- queue changes
@Operations.register_operation("change_queue_version")
@dataclass
class ChangeQueueVersionOp(_OnName, TransportOp):
    """Reshape an existing queue table from one transport version's DDL to another's, keeping its rows."""

    table: TableName
    from_version: str
    to_version: str

    lock_cost = 6  # no statements on PostgreSQL (one layout since 8.1)

    @classmethod
    def change_queue_version(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        from_version: str,
        to_version: str,
    ) -> None:
        """Upgrade (or downgrade) a queue table in place between transport versions."""
        return operations.invoke(cls(TableName(table, schema, catalog), from_version, to_version))

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        where = dialect.display(self.table, profile(self.to_version)) if dialect else str(self.table)
        return f"change queue {where} from transport {self.from_version} to {self.to_version}"

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        return dialect.version_change_rewrite(profile(self.from_version), profile(self.to_version))

    def python(self) -> str:
        return _call(
            "change_queue_version", self.table, f"from_version={_literal(self.from_version)}, to_version={_literal(self.to_version)}"
        )

    def reverse(self) -> ChangeQueueVersionOp:
        return ChangeQueueVersionOp(self.table, self.to_version, self.from_version)


@dataclass
class _BodyStringOp(_OnName, TransportOp):
    table: TableName
    version: str
    online: bool = False  # PostgreSQL queues: rewrite beside the live table (migrate/online.py)

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        where = dialect.display(self.table, profile(self.version)) if dialect else str(self.table)
        return f"{self.op_name.replace('_', ' ')} column of {where}"

    def python(self) -> str:
        return _call(self.op_name, self.table, f"version={_literal(self.version)}{_ONLINE if self.online else ''}")


@Operations.register_operation("add_body_string")
class AddBodyStringOp(_BodyStringOp):
    op_name = "add_body_string"
    online_capable = True
    lock_cost = 20  # a rewrite: the table, its transient copy, their TOAST tables and indexes

    @classmethod
    def add_body_string(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        version: str,
        online: bool = False,
    ) -> None:
        """Add the computed BodyString column to a queue or delayed table (online=True: a PostgreSQL
        queue is rewritten beside the live one, docs/live-migrations.md)."""
        return operations.invoke(cls(TableName(table, schema, catalog), version, online))

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        return dialect.body_string_rewrite(profile(self.version))

    def online_target(self, current: TableSpec) -> TableSpec:
        return current._replace(body_string=True)

    def reverse(self) -> DropBodyStringOp:
        return DropBodyStringOp(self.table, self.version)


@Operations.register_operation("drop_body_string")
class DropBodyStringOp(_BodyStringOp):
    op_name = "drop_body_string"
    lock_cost = 4

    @classmethod
    def drop_body_string(
        cls, operations: Operations, table: str, *, schema: str | None = None, catalog: str | None = None, version: str
    ) -> None:
        """Drop the computed BodyString column (it holds no data of its own)."""
        return operations.invoke(cls(TableName(table, schema, catalog), version))

    def reverse(self) -> AddBodyStringOp:
        return AddBodyStringOp(self.table, self.version)


@Operations.register_operation("change_queue_seq_type")
@dataclass
class ChangeQueueSeqTypeOp(_OnName, TransportOp):
    """PostgreSQL: widen (or narrow) a queue's Seq column and its sequence."""

    online_capable = True
    lock_cost = 26  # a rewrite, and both indexes rebuilt

    table: TableName
    from_type: str
    to_type: str
    online: bool = False  # rewrite beside the live table (migrate/online.py)

    @classmethod
    def change_queue_seq_type(
        cls,
        operations: Operations,
        table: str,
        *,
        schema: str | None = None,
        catalog: str | None = None,
        from_type: str,
        to_type: str,
        online: bool = False,
    ) -> None:
        """Change the PostgreSQL Seq column between serial and bigserial, keeping rows and order
        (online=True: rewritten beside the live table, docs/live-migrations.md)."""
        return operations.invoke(cls(TableName(table, schema, catalog), from_type, to_type, online))

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        where = dialect.display(self.table) if dialect else str(self.table)
        return f"change Seq of queue {where} from {self.from_type} to {self.to_type}"

    def python(self) -> str:
        tail = f"from_type={_literal(self.from_type)}, to_type={_literal(self.to_type)}{_ONLINE if self.online else ''}"
        return _call("change_queue_seq_type", self.table, tail)

    def online_target(self, current: TableSpec) -> TableSpec:
        return current._replace(seq_type=self.to_type)

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        return dialect.seq_type_rewrite(self.from_type, self.to_type)

    def reverse(self) -> ChangeQueueSeqTypeOp:
        return ChangeQueueSeqTypeOp(self.table, self.to_type, self.from_type, self.online)


@Operations.register_operation("rename_index")
@dataclass
class RenameIndexOp(_OnName, TransportOp):
    """Give an index of a transport table the name the installers give it (adopt: a table that an
    earlier release of this project deployed under other index names)."""

    table: TableName
    old: str
    new: str

    lock_cost = 4

    @classmethod
    def rename_index(
        cls, operations: Operations, table: str, *, schema: str | None = None, catalog: str | None = None, old: str, new: str
    ) -> None:
        """Rename an index of a transport table in place (no rebuild)."""
        return operations.invoke(cls(TableName(table, schema, catalog), old, new))

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        where = dialect.display(self.table) if dialect else str(self.table)
        return f"rename index {self.old} of {where} to {self.new}"

    def python(self) -> str:
        return _call("rename_index", self.table, f"old={_literal(self.old)}, new={_literal(self.new)}")

    def reverse(self) -> RenameIndexOp:
        return RenameIndexOp(self.table, self.new, self.old)


# --------------------------------------------------------------------------- schemas
@dataclass
class _SchemaOp(TransportOp):
    table: SchemaName  # the schema (named `table` as every operation's one subject is)

    lock_cost = 2

    def python(self) -> str:
        catalog = f", catalog={_literal(self.table.catalog)}" if self.table.catalog is not None else ""
        return f"op.{self.op_name}({_literal(self.table.schema)}{catalog})"


@Operations.register_operation("ensure_schema")
class EnsureSchemaOp(_SchemaOp):
    op_name = "ensure_schema"

    @classmethod
    def ensure_schema(cls, operations: Operations, schema: str, *, catalog: str | None = None) -> None:
        """Create a database schema unless it exists (never the dialect's default schema)."""
        return operations.invoke(cls(SchemaName(schema, catalog)))

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        return f"ensure schema {self.table.schema!r} exists"

    def reverse(self) -> DropSchemaIfEmptyOp:
        return DropSchemaIfEmptyOp(self.table)


@Operations.register_operation("drop_schema_if_empty")
class DropSchemaIfEmptyOp(_SchemaOp):
    op_name = "drop_schema_if_empty"

    @classmethod
    def drop_schema_if_empty(cls, operations: Operations, schema: str, *, catalog: str | None = None) -> None:
        """Drop a database schema only when nothing is left in it."""
        return operations.invoke(cls(SchemaName(schema, catalog)))

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        return f"drop schema {self.table.schema!r} if it is empty"

    def reverse(self) -> EnsureSchemaOp:
        return EnsureSchemaOp(self.table)


CREATE_OPS = {Kind.QUEUE: CreateQueueOp, Kind.DELAYED: CreateDelayedTableOp, Kind.SUBSCRIPTIONS: CreateSubscriptionTableOp}
DROP_OPS = {Kind.QUEUE: DropQueueOp, Kind.DELAYED: DropDelayedTableOp, Kind.SUBSCRIPTIONS: DropSubscriptionTableOp}


@renderers.dispatch_for(TransportOp)
def _render(autogen_context: AutogenContext, operation: TransportOp) -> str:
    return operation.python()
