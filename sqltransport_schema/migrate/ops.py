"""Alembic operations for transport tables, declared: registered on `op`, rendered into revisions.

Each operation is a small declaration: the one `table` it acts on and the literal arguments that
decide its DDL (transport version, options), so a revision executes the same statements under any
later release. What the statements are is migrate/toimpl.py's (one function per kind); running or
printing them, with the checks every operation shares, is migrate/execution.py's (as Alembic keeps
ops.py apart from toimpl.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from alembic.autogenerate import renderers
from alembic.operations import MigrateOperation, Operations

from .. import wire
from ..schema import Kind, SchemaName, TableName, TableSpec, protected_by_default
from ..versions import profile
from .refusals import CONTENTS

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
TENANT_ARGUMENT = ", tenant=True"  # an operation of tenant databases (docs/tenants.md)
_IN_TENANTS = " in tenant databases"  # how descriptions say so


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


_Op = TypeVar("_Op", bound="TransportOp")


def register(op_name: str) -> Callable[[type[_Op]], type[_Op]]:
    """Register an operation as `op.<op_name>`, the call a revision makes: its entry point takes the
    table's name (schema=, catalog=) and the operation's own arguments, which `declare` turns into
    the operation (so the arguments are declared once, on the operation)."""

    def decorate(op_class: type[_Op]) -> type[_Op]:
        op_class.op_name = op_name
        entry = op_class.entry_point()
        entry.__name__ = entry.__qualname__ = op_name
        entry.__doc__ = op_class.__doc__
        setattr(op_class, op_name, classmethod(entry))
        return Operations.register_operation(op_name)(op_class)

    return decorate


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

    @classmethod
    def entry_point(cls) -> Callable[..., None]:
        """A fresh `op.<op_name>(table, schema=, catalog=, **arguments)` (one per operation: Alembic
        gives each its own documentation)."""

        def entry(
            cls: type[TransportOp],
            operations: Operations,
            table: str,
            *,
            schema: str | None = None,
            catalog: str | None = None,
            **arguments: Any,
        ) -> None:
            return operations.invoke(cls.declare(TableName(table, schema, catalog), **arguments))

        return entry

    @classmethod
    def declare(cls, name: TableName, **arguments: Any) -> TransportOp:
        """The operation a revision's call declares: its table and literal arguments."""
        return cls(name, **arguments)

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
    def tenant(self) -> bool:
        """It runs in tenant databases (`-x role=tenant`), not in the shared one: its table (or
        schema) is placed there (docs/tenants.md)."""
        return getattr(self.table, "tenant", False)

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
        elif self.kind is Kind.ARCHIVE:
            tail += f", queue={_literal(self.table.queue or '')}"
        return tail

    @classmethod
    def declare(
        cls,
        name: TableName,
        *,
        version: str,
        body_string: bool = False,
        seq_type: str = "serial",
        protected: bool | None = None,
        queue: str | None = None,
        **rest: Any,
    ) -> TransportOp:
        if protected is None:
            protected = protected_by_default(cls.kind, name.table)
        spec = TableSpec(cls.kind, name, body_string=body_string, seq_type=seq_type, protected=protected, queue=queue)
        return cls(spec, version, **rest)


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
        contents = CONTENTS[self.kind]
        how = f"discarding its {contents}" if self.discard_messages else f"if it holds no {contents}"
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


@register("create_queue")
class CreateQueueOp(_CreateTable):
    """Create a queue table shaped as the given transport version creates it."""

    lock_cost = 16

    def reverse(self) -> DropQueueOp:
        return DropQueueOp(self.table, self.version)


@register("drop_queue")
class DropQueueOp(_DropTable):
    """Drop a queue table; the database refuses while it holds rows unless discard_messages.

    A protected queue (error, audit, protected: true) is refused unless allow_protected. With
    `subscriptions` (the subscription table, as an address) the subscription rows naming the queue
    are deleted in the same transaction, so no publish is routed to it."""

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
    def declare(cls, name: TableName, *, subscriptions: str | None = None, **arguments: Any) -> TransportOp:
        following = None
        if subscriptions is not None:
            address = wire.parse_address(subscriptions)
            following = TableName(address.table, address.schema, address.catalog)
        return super().declare(name, subscriptions=following, **arguments)

    def reverse(self) -> CreateQueueOp:
        return CreateQueueOp(self.table, self.version)


@register("create_delayed_table")
class CreateDelayedTableOp(_CreateTable):
    """Create an endpoint's native delayed-delivery table (with BodyString when its endpoint has it)."""

    kind = Kind.DELAYED
    noun = "delayed table"
    lock_cost = 11

    def reverse(self) -> DropDelayedTableOp:
        return DropDelayedTableOp(self.table, self.version)


@register("drop_delayed_table")
class DropDelayedTableOp(_DropTable):
    """Drop a delayed-delivery table; refused while it holds rows unless discard_messages."""

    kind = Kind.DELAYED
    noun = "delayed table"
    lock_cost = 15

    def reverse(self) -> CreateDelayedTableOp:
        return CreateDelayedTableOp(self.table, self.version)


@register("create_subscription_table")
class CreateSubscriptionTableOp(_CreateTable):
    """Create the shared subscription routing table."""

    kind = Kind.SUBSCRIPTIONS
    noun = "subscription table"
    lock_cost = 10

    def reverse(self) -> DropSubscriptionTableOp:
        return DropSubscriptionTableOp(self.table, self.version)


@register("drop_subscription_table")
class DropSubscriptionTableOp(_DropTable):
    """Drop the subscription table; refused while it holds rows unless discard_messages."""

    kind = Kind.SUBSCRIPTIONS
    noun = "subscription table"
    lock_cost = 12

    def reverse(self) -> CreateSubscriptionTableOp:
        return CreateSubscriptionTableOp(self.table, self.version)


@register("create_archive_table")
class CreateArchiveTableOp(_CreateTable):
    """Create a queue's archive table (queue=: the queue it keeps messages of), where the console
    moves failed messages instead of deleting them."""

    kind = Kind.ARCHIVE
    noun = "archive table"
    lock_cost = 13

    def reverse(self) -> DropArchiveTableOp:
        return DropArchiveTableOp(self.table, self.version)


@register("drop_archive_table")
class DropArchiveTableOp(_DropTable):
    """Drop an archive table; refused while it holds archived messages unless discard_messages."""

    kind = Kind.ARCHIVE
    noun = "archive table"
    lock_cost = 15

    def reverse(self) -> CreateArchiveTableOp:
        return CreateArchiveTableOp(self.table, self.version)


@register("create_action_log")
class CreateActionLogOp(_CreateTable):
    """Create the console's action log table (who did what, when, to how many messages)."""

    kind = Kind.ACTION_LOG
    noun = "action log"
    lock_cost = 12

    def reverse(self) -> DropActionLogOp:
        return DropActionLogOp(self.table, self.version)


@register("drop_action_log")
class DropActionLogOp(_DropTable):
    """Drop the console's action log; refused while it holds logged actions unless discard_messages."""

    kind = Kind.ACTION_LOG
    noun = "action log"
    lock_cost = 12

    def reverse(self) -> CreateActionLogOp:
        return CreateActionLogOp(self.table, self.version)


# --------------------------------------------------------------------------- queue changes
@register("change_queue_version")
@dataclass
class ChangeQueueVersionOp(_OnName, TransportOp):
    """Upgrade (or downgrade) a queue table in place between transport versions.

    Reshape an existing queue table from one transport version's DDL to another's, keeping its rows."""

    table: TableName
    from_version: str
    to_version: str

    lock_cost = 6  # no statements on PostgreSQL (one layout since 8.1)

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


@register("add_body_string")
class AddBodyStringOp(_BodyStringOp):
    """Add the computed BodyString column to a queue or delayed table (online=True: a PostgreSQL
    queue is rewritten beside the live one, docs/live-migrations.md)."""

    online_capable = True
    lock_cost = 20  # a rewrite: the table, its transient copy, their TOAST tables and indexes

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        return dialect.body_string_rewrite(profile(self.version))

    def online_target(self, current: TableSpec) -> TableSpec:
        return current._replace(body_string=True)

    def reverse(self) -> DropBodyStringOp:
        return DropBodyStringOp(self.table, self.version)


@register("drop_body_string")
class DropBodyStringOp(_BodyStringOp):
    """Drop the computed BodyString column (it holds no data of its own)."""

    lock_cost = 4

    def reverse(self) -> AddBodyStringOp:
        return AddBodyStringOp(self.table, self.version)


@register("change_queue_seq_type")
@dataclass
class ChangeQueueSeqTypeOp(_OnName, TransportOp):
    """Change the PostgreSQL Seq column between serial and bigserial, keeping rows and order
        (online=True: rewritten beside the live table, docs/live-migrations.md).

    PostgreSQL: widen (or narrow) a queue's Seq column and its sequence."""

    online_capable = True
    lock_cost = 26  # a rewrite, and both indexes rebuilt

    table: TableName
    from_type: str
    to_type: str
    online: bool = False  # rewrite beside the live table (migrate/online.py)

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


@register("rename_index")
@dataclass
class RenameIndexOp(_OnName, TransportOp):
    """Rename an index of a transport table in place (no rebuild).

    Give an index of a transport table the name the installers give it (adopt: a table that an
    earlier release of this project deployed under other index names)."""

    table: TableName
    old: str
    new: str

    lock_cost = 4

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

    @classmethod
    def entry_point(cls) -> Callable[..., None]:
        def entry(cls: type[_SchemaOp], operations: Operations, schema: str, *, catalog: str | None = None, tenant: bool = False) -> None:
            return operations.invoke(cls(SchemaName(schema, catalog, tenant)))

        return entry

    def python(self) -> str:
        catalog = f", catalog={_literal(self.table.catalog)}" if self.table.catalog is not None else ""
        return f"op.{self.op_name}({_literal(self.table.schema)}{catalog}{TENANT_ARGUMENT if self.table.tenant else ''})"


@register("ensure_schema")
class EnsureSchemaOp(_SchemaOp):
    """Create a database schema unless it exists (never the dialect's default schema)."""

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        return f"ensure schema {self.table.schema!r} exists{_IN_TENANTS if self.table.tenant else ''}"

    def reverse(self) -> DropSchemaIfEmptyOp:
        return DropSchemaIfEmptyOp(self.table)


@register("drop_schema_if_empty")
class DropSchemaIfEmptyOp(_SchemaOp):
    """Drop a database schema only when nothing is left in it."""

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        return f"drop schema {self.table.schema!r} if it is empty{_IN_TENANTS if self.table.tenant else ''}"

    def reverse(self) -> EnsureSchemaOp:
        return EnsureSchemaOp(self.table)


CREATE_OPS = {
    Kind.QUEUE: CreateQueueOp,
    Kind.DELAYED: CreateDelayedTableOp,
    Kind.SUBSCRIPTIONS: CreateSubscriptionTableOp,
    Kind.ARCHIVE: CreateArchiveTableOp,
    Kind.ACTION_LOG: CreateActionLogOp,
}
DROP_OPS = {
    Kind.QUEUE: DropQueueOp,
    Kind.DELAYED: DropDelayedTableOp,
    Kind.SUBSCRIPTIONS: DropSubscriptionTableOp,
    Kind.ARCHIVE: DropArchiveTableOp,
    Kind.ACTION_LOG: DropActionLogOp,
}


@renderers.dispatch_for(TransportOp)
def _render(autogen_context: AutogenContext, operation: TransportOp) -> str:
    return operation.python()
