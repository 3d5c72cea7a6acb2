"""Alembic operations for transport tables: registered on `op`, rendered into revisions.

Each operation carries everything that decides its DDL (names, transport version,
options) as literal arguments, so a revision executes the same statements under
any later release. The dialect classes turn an operation into statements; this
module only runs or prints them.
"""

from __future__ import annotations

import copy
import json
import logging
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alembic.autogenerate import renderers
from alembic.operations import MigrateOperation, Operations
from alembic.util import CommandError
from sqlalchemy import exc

from .. import engines
from ..runtime import wire
from ..schema import Kind, SchemaName, TableName, TableSpec, protected_by_default
from ..versions import profile
from . import online
from .locks import LockPolicy, LockWait, take_lock

if TYPE_CHECKING:
    from alembic.autogenerate.api import AutogenContext
    from alembic.runtime.migration import MigrationContext

log = logging.getLogger("sqltransport_schema.migrate")

DISCARD_OPTION = "sqltransport_discard_messages"
DISCARD_TABLES_OPTION = "sqltransport_discard"  # names of tables whose compiled drop may take their rows along
RERUN_OPTION = "sqltransport_rerun"  # the Alembic command line that was run, with more -x options
PROTECTED_OPTION = "sqltransport_drop_protected"  # names of protected queues a downgrade may drop
OFFLINE_HOOK_OPTION = "sqltransport_offline_hook"  # called with each operation before its --sql output, then None
LOCK_TIMEOUT_OPTION = "sqltransport_lock_timeout"  # milliseconds an offline script's statements wait for a lock


def _literal(value: Any) -> str:
    """A Python literal in double quotes, as a black-formatted file writes it."""
    if value.__class__ is str:
        if value.isprintable() and '"' not in value and "\\" not in value:
            return '"' + value + '"'
        return json.dumps(value, ensure_ascii=False)  # JSON string syntax is valid Python
    return repr(value)


_ONLINE = ", online=True"  # the revision's choice of an online rewrite (migrate/online.py)


def _one_line(text: str) -> str:
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
    """Base of every operation here: statements per dialect, a line of Python, a description."""

    op_name = ""
    online_capable = False  # it can rewrite a queue beside the live table (online_target; migrate/online.py)

    def statements(self, dialect: engines.Dialect) -> list[str]:
        raise NotImplementedError

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        raise NotImplementedError

    def python(self) -> str:
        raise NotImplementedError

    def to_diff_tuple(self) -> tuple:
        """What `alembic check` lists for this operation."""
        return (self.op_name or type(self).__name__, self.describe())

    def locked_table(self) -> TableName | None:
        """The existing table this operation locks (None: it only creates, or touches no table)."""
        return None

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        """Why, on this engine, the operation holds its exclusive lock for as long as the table takes
        to rewrite or rebuild (None: the lock is short, whatever the table's size)."""
        return None


# --------------------------------------------------------------------------- tables
@dataclass
class _TableOp(TransportOp):
    spec: TableSpec
    version: str

    kind = Kind.QUEUE
    noun = "queue"

    def _where(self, dialect: engines.Dialect | None) -> str:
        return dialect.display(self.spec.name, profile(self.version)) if dialect else str(self.spec.name)

    def _tail(self) -> str:
        tail = f"version={_literal(self.version)}"
        if self.kind is Kind.QUEUE:
            tail += f", body_string={self.spec.body_string!r}, seq_type={_literal(self.spec.seq_type)}"
            if self.spec.protected != protected_by_default(Kind.QUEUE, self.spec.name.table):
                tail += f", protected={self.spec.protected!r}"
        elif self.kind is Kind.DELAYED and self.spec.body_string:
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
    adopts = True  # an existing table of this name is adopted if it has the expected columns

    def statements(self, dialect: engines.Dialect) -> list[str]:
        prof = profile(self.version)
        reason = dialect.unsupported(prof)
        if reason:
            raise RuntimeError(f"cannot create {self.noun} {self._where(dialect)} on {dialect.name}: {reason}")
        return dialect.create_table(self.spec, prof)

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        return f"create {self.noun} {self._where(dialect)} (transport {self.version})"

    def python(self) -> str:
        return _call(self.op_name, self.spec.name, self._tail())


class _DropTable(_TableOp):
    discard_messages: bool = False
    allow_protected: bool = False  # the per-queue override (drop_protected:) of a protected queue

    def __init__(self, spec: TableSpec, version: str, discard_messages: bool = False, allow_protected: bool = False):
        super().__init__(spec, version)
        self.discard_messages = discard_messages
        self.allow_protected = allow_protected

    def statements(self, dialect: engines.Dialect) -> list[str]:
        return dialect.drop_table(self.spec, profile(self.version), self.discard_messages)

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        how = "discarding its messages" if self.discard_messages else "refused while it holds messages"
        if self.spec.protected:
            how += ", protected queue dropped by its drop_protected entry" if self.allow_protected else ", protected"
        return f"drop {self.noun} {self._where(dialect)} ({how})"

    def python(self) -> str:
        tail = self._tail() + (", discard_messages=True" if self.discard_messages else "")
        tail += ", allow_protected=True" if self.allow_protected else ""
        return _call(self.op_name, self.spec.name, tail)

    def locked_table(self) -> TableName | None:
        return self.spec.name

    def refuses_protected(self, allowed: frozenset[str]) -> bool:
        return self.spec.protected and not self.allow_protected and self.spec.name.table not in allowed


@Operations.register_operation("create_queue")
class CreateQueueOp(_CreateTable):
    op_name = "create_queue"

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
        return DropQueueOp(self.spec, self.version)


@Operations.register_operation("drop_queue")
class DropQueueOp(_DropTable):
    """A queue's drop; with `subscriptions` (the subscription table, as an address) it deletes the
    subscription rows naming the queue in the same transaction, so no publish is routed to it."""

    op_name = "drop_queue"
    subscriptions: TableName | None = None

    def __init__(
        self,
        spec: TableSpec,
        version: str,
        discard_messages: bool = False,
        allow_protected: bool = False,
        subscriptions: TableName | None = None,
    ):
        super().__init__(spec, version, discard_messages, allow_protected)
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
        return CreateQueueOp(self.spec, self.version)


@Operations.register_operation("create_delayed_table")
class CreateDelayedTableOp(_CreateTable):
    op_name = "create_delayed_table"
    kind = Kind.DELAYED
    noun = "delayed table"

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
        return DropDelayedTableOp(self.spec, self.version)


@Operations.register_operation("drop_delayed_table")
class DropDelayedTableOp(_DropTable):
    op_name = "drop_delayed_table"
    kind = Kind.DELAYED
    noun = "delayed table"

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
        return CreateDelayedTableOp(self.spec, self.version)


@Operations.register_operation("create_subscription_table")
class CreateSubscriptionTableOp(_CreateTable):
    op_name = "create_subscription_table"
    kind = Kind.SUBSCRIPTIONS
    noun = "subscription table"

    @classmethod
    def create_subscription_table(
        cls, operations: Operations, table: str, *, schema: str | None = None, catalog: str | None = None, version: str
    ) -> None:
        """Create the shared subscription routing table."""
        return operations.invoke(cls(cls._spec(table, schema, catalog), version))

    def reverse(self) -> DropSubscriptionTableOp:
        return DropSubscriptionTableOp(self.spec, self.version)


@Operations.register_operation("drop_subscription_table")
class DropSubscriptionTableOp(_DropTable):
    op_name = "drop_subscription_table"
    kind = Kind.SUBSCRIPTIONS
    noun = "subscription table"

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
        return CreateSubscriptionTableOp(self.spec, self.version)


# --------------------------------------------------------------------------- queue changes
@Operations.register_operation("change_queue_version")
@dataclass
class ChangeQueueVersionOp(TransportOp):
    """Reshape an existing queue table from one transport version's DDL to another's, keeping its rows."""

    name: TableName
    from_version: str
    to_version: str

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

    def statements(self, dialect: engines.Dialect) -> list[str]:
        return dialect.change_queue_version(TableSpec(Kind.QUEUE, self.name), profile(self.from_version), profile(self.to_version))

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        where = dialect.display(self.name, profile(self.to_version)) if dialect else str(self.name)
        return f"change queue {where} from transport {self.from_version} to {self.to_version}"

    def locked_table(self) -> TableName | None:
        return self.name

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        return dialect.version_change_rewrite(profile(self.from_version), profile(self.to_version))

    def python(self) -> str:
        return _call(
            "change_queue_version", self.name, f"from_version={_literal(self.from_version)}, to_version={_literal(self.to_version)}"
        )

    def reverse(self) -> ChangeQueueVersionOp:
        return ChangeQueueVersionOp(self.name, self.to_version, self.from_version)


@dataclass
class _BodyStringOp(TransportOp):
    name: TableName
    version: str
    online: bool = False  # PostgreSQL queues: rewrite beside the live table (migrate/online.py)

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        where = dialect.display(self.name, profile(self.version)) if dialect else str(self.name)
        return f"{self.op_name.replace('_', ' ')} column of {where}"

    def python(self) -> str:
        return _call(self.op_name, self.name, f"version={_literal(self.version)}{_ONLINE if self.online else ''}")

    def locked_table(self) -> TableName | None:
        return self.name


@Operations.register_operation("add_body_string")
class AddBodyStringOp(_BodyStringOp):
    op_name = "add_body_string"
    online_capable = True

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

    def statements(self, dialect: engines.Dialect) -> list[str]:
        return dialect.add_body_string(TableSpec(Kind.QUEUE, self.name), profile(self.version))

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        return dialect.body_string_rewrite(profile(self.version))

    def online_target(self, current: TableSpec) -> TableSpec:
        """The queue as this operation leaves it (an online rewrite builds that beside it)."""
        return current._replace(body_string=True)

    def reverse(self) -> DropBodyStringOp:
        return DropBodyStringOp(self.name, self.version)


@Operations.register_operation("drop_body_string")
class DropBodyStringOp(_BodyStringOp):
    op_name = "drop_body_string"

    @classmethod
    def drop_body_string(
        cls, operations: Operations, table: str, *, schema: str | None = None, catalog: str | None = None, version: str
    ) -> None:
        """Drop the computed BodyString column (it holds no data of its own)."""
        return operations.invoke(cls(TableName(table, schema, catalog), version))

    def statements(self, dialect: engines.Dialect) -> list[str]:
        return dialect.drop_body_string(TableSpec(Kind.QUEUE, self.name), profile(self.version))

    def reverse(self) -> AddBodyStringOp:
        return AddBodyStringOp(self.name, self.version)


@Operations.register_operation("change_queue_seq_type")
@dataclass
class ChangeQueueSeqTypeOp(TransportOp):
    """PostgreSQL: widen (or narrow) a queue's Seq column and its sequence."""

    online_capable = True

    name: TableName
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

    def statements(self, dialect: engines.Dialect) -> list[str]:
        return dialect.change_seq_type(TableSpec(Kind.QUEUE, self.name), self.from_type, self.to_type)

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        where = dialect.display(self.name) if dialect else str(self.name)
        return f"change Seq of queue {where} from {self.from_type} to {self.to_type}"

    def python(self) -> str:
        tail = f"from_type={_literal(self.from_type)}, to_type={_literal(self.to_type)}{_ONLINE if self.online else ''}"
        return _call("change_queue_seq_type", self.name, tail)

    def online_target(self, current: TableSpec) -> TableSpec:
        """The queue as this operation leaves it (an online rewrite builds that beside it)."""
        return current._replace(seq_type=self.to_type)

    def locked_table(self) -> TableName | None:
        return self.name

    def rewrite(self, dialect: engines.Dialect) -> str | None:
        return dialect.seq_type_rewrite(self.from_type, self.to_type)

    def reverse(self) -> ChangeQueueSeqTypeOp:
        return ChangeQueueSeqTypeOp(self.name, self.to_type, self.from_type, self.online)


@Operations.register_operation("rename_index")
@dataclass
class RenameIndexOp(TransportOp):
    """Give an index of a transport table the name the installers give it (adopt: a table that an
    earlier release of this project deployed under other index names)."""

    name: TableName
    old: str
    new: str

    @classmethod
    def rename_index(
        cls, operations: Operations, table: str, *, schema: str | None = None, catalog: str | None = None, old: str, new: str
    ) -> None:
        """Rename an index of a transport table in place (no rebuild)."""
        return operations.invoke(cls(TableName(table, schema, catalog), old, new))

    def statements(self, dialect: engines.Dialect) -> list[str]:
        statements = dialect.rename_index(self.name, self.old, self.new)
        if statements is None:
            raise NotImplementedError(f"{dialect.name} cannot rename an index in place")
        return statements

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        where = dialect.display(self.name) if dialect else str(self.name)
        return f"rename index {self.old} of {where} to {self.new}"

    def python(self) -> str:
        return _call("rename_index", self.name, f"old={_literal(self.old)}, new={_literal(self.new)}")

    def locked_table(self) -> TableName | None:
        return self.name

    def reverse(self) -> RenameIndexOp:
        return RenameIndexOp(self.name, self.new, self.old)


# --------------------------------------------------------------------------- schemas
@dataclass
class _SchemaOp(TransportOp):
    schema: SchemaName

    def python(self) -> str:
        catalog = f", catalog={_literal(self.schema.catalog)}" if self.schema.catalog is not None else ""
        return f"op.{self.op_name}({_literal(self.schema.schema)}{catalog})"


@Operations.register_operation("ensure_schema")
class EnsureSchemaOp(_SchemaOp):
    op_name = "ensure_schema"

    @classmethod
    def ensure_schema(cls, operations: Operations, schema: str, *, catalog: str | None = None) -> None:
        """Create a database schema unless it exists (never the dialect's default schema)."""
        return operations.invoke(cls(SchemaName(schema, catalog)))

    def statements(self, dialect: engines.Dialect) -> list[str]:
        return dialect.create_schema(self.schema)

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        return f"ensure schema {self.schema.schema!r} exists"

    def reverse(self) -> DropSchemaIfEmptyOp:
        return DropSchemaIfEmptyOp(self.schema)


@Operations.register_operation("drop_schema_if_empty")
class DropSchemaIfEmptyOp(_SchemaOp):
    op_name = "drop_schema_if_empty"

    @classmethod
    def drop_schema_if_empty(cls, operations: Operations, schema: str, *, catalog: str | None = None) -> None:
        """Drop a database schema only when nothing is left in it."""
        return operations.invoke(cls(SchemaName(schema, catalog)))

    def statements(self, dialect: engines.Dialect) -> list[str]:
        return dialect.drop_schema(self.schema)

    def describe(self, dialect: engines.Dialect | None = None) -> str:
        return f"drop schema {self.schema.schema!r} if it is empty"

    def reverse(self) -> EnsureSchemaOp:
        return EnsureSchemaOp(self.schema)


# --------------------------------------------------------------------------- execution
# Refusals are Alembic CommandErrors: `alembic` prints them as one `FAILED: ...` line.
class StructureMismatch(CommandError):
    """A table of that name exists but is not the transport table the revision would create."""


class ProtectedQueue(CommandError):
    """A migration step would drop a protected queue without its per-queue override."""


class DropRefused(CommandError):
    """The database refused to drop a table that still holds rows."""


# What each kind of table holds, as a refused drop names it.
CONTENTS = {Kind.QUEUE: "messages", Kind.DELAYED: "delayed messages", Kind.SUBSCRIPTIONS: "subscription rows", Kind.SAGA: "saga instances"}


def rerun(context: MigrationContext, *options: str) -> str:
    """The command to run again with more `-x` options (env.py knows the command line)."""
    build = context.opts.get(RERUN_OPTION)
    return build(list(options), context.opts) if build else "alembic " + "".join(f"-x {o} " for o in options) + "upgrade head"


def _discards(operation: TransportOp, context: MigrationContext) -> bool:
    """A drop whose rows go with it: -x discard_messages=true, or its table listed in -x discard=."""
    if getattr(operation, "discard_messages", None) is not False:
        return False
    return bool(context.opts.get(DISCARD_OPTION)) or operation.spec.name.table in context.opts.get(DISCARD_TABLES_OPTION, ())


@dataclass
class _Refusals:
    """The drops one run refused. After the first, the run goes on only to find the others (nothing
    more is changed, and all of it is rolled back), so that one refusal names every table and one
    rerun lets them all through."""

    protected: dict[str, str] = field(default_factory=dict)  # table name -> as displayed
    holding: dict[str, tuple[str, str]] = field(default_factory=dict)  # table name -> (noun and where, contents)


_refusals: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _refuse_protected(context: MigrationContext, dialect: engines.Dialect, operation: _DropTable) -> None:
    _refusals.setdefault(context, _Refusals()).protected[operation.spec.name.table] = operation._where(dialect)


def _refuse_holding(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp) -> None:
    where = f"{operation.noun} {dialect.display(operation.spec.name)}"
    _refusals.setdefault(context, _Refusals()).holding[operation.spec.name.table] = (where, CONTENTS[operation.spec.kind])


def _merged(context: MigrationContext, option: str, names: list[str]) -> str:
    """`option=a,b`: the names the run was given already, then those it refused."""
    given = [name for name in context.opts.get(option, ()) if name not in names]
    return ",".join([*sorted(given), *names])


def refusal(context: MigrationContext) -> CommandError | None:
    """Every drop this run refused, as one line with the one command that lets them all through."""
    found = _refusals.get(context)
    if found is None:
        return None
    fn = context.opts.get("fn")
    downgrade = fn is not None and fn.__name__ == "downgrade"
    sentences, options = [], []
    if found.protected:
        names = list(found.protected)
        tables = ", ".join(found.protected.values())
        sentences.append(
            f"refusing to drop protected queue{'s' if len(names) > 1 else ''} {tables}: error and audit queues, "
            "and queues marked protected: true, are never dropped by a migration without an override"
        )
        options.append(f"drop_protected={_merged(context, PROTECTED_OPTION, names)}")
    if found.holding:
        names = list(found.holding)
        kinds = {contents for _, contents in found.holding.values()}
        if len(names) == 1:
            where, contents = next(iter(found.holding.values()))
            sentences.append(f"refusing to drop {where}: it still holds {contents}")
        elif len(kinds) == 1:
            tables = ", ".join(where for where, _ in found.holding.values())
            sentences.append(f"refusing to drop {tables}: they still hold {kinds.pop()}")
        else:
            tables = ", ".join(f"{where} ({contents})" for where, contents in found.holding.values())
            sentences.append(f"refusing to drop {tables}: they still hold rows")
        options.append("discard_messages=true" if downgrade else f"discard={_merged(context, DISCARD_TABLES_OPTION, names)}")
    command = rerun(context, *options)
    it = "them" if len(found.protected) + len(found.holding) > 1 else "it"
    if not found.holding:
        return ProtectedQueue(f"{'; '.join(sentences)}. To drop {it}: {command}")
    if len(found.holding) > 1:
        rows = "their rows"
    else:
        rows = ("its " if it == "it" else "the ") + next(iter(found.holding.values()))[1]
    queues = any(where.startswith("queue ") for where, _ in found.holding.values())
    first = "Move or consume them first (sqltransport-schema pipeline plan/run), or d" if queues else "D"
    return DropRefused(f"{'; '.join(sentences)}. {first}rop {it} with {rows}: {command}")


class _RunState:
    """What one migration run learns about its database once, instead of per operation."""

    def __init__(self, context: MigrationContext, dialect: engines.Dialect):
        self.context = context
        self.dialect = dialect
        self.locks = 0  # held by the operations since the last commit (LOCK_COSTS)
        self.ops = 0
        self.limit = lock_budget(dialect.lock_table_capacity(context.connection))
        self._existing: dict | None = None

    def existing_columns(self) -> dict:
        if self._existing is None:
            self._existing = self.dialect.catalog.existing_columns(self.context.connection)
        return self._existing


_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _state(context: MigrationContext, dialect: engines.Dialect) -> _RunState:
    state = _states.get(context)
    if state is None:
        state = _states[context] = _RunState(context, dialect)
    return state


def run(operations: Operations, operation: TransportOp) -> None:
    """Execute (online) or print (offline, --sql) the operation's statements."""
    context = operations.migration_context
    dialect = engines.for_sqlalchemy(context.dialect.name)
    if _discards(operation, context):
        operation = copy.copy(operation)  # a drop (of a table or saga table), now discarding its rows
        operation.discard_messages = True
    batches = operation.statements(dialect)
    description = operation.describe(dialect)
    impl = context.impl
    if dialect.saga_only and not batches:
        log.info("skipped on %s, which holds saga tables only: %s", dialect.name, description)
        return
    if not batches and isinstance(operation, _SchemaOp):
        return  # an engine without schemas (SQLite): nothing to do, nothing to report
    guarded = getattr(operation, "discard_messages", None) is False  # a drop the database refuses while rows are left
    probe = guarded and dialect.ddl_savepoints and not context.as_sql
    if isinstance(operation, _DropTable) and operation.refuses_protected(context.opts.get(PROTECTED_OPTION, frozenset())):
        _refuse_protected(context, dialect, operation)
        if probe:
            _probe(context, dialect, operation, batches)  # would the rerun be refused for its rows too?
        return
    if context in _refusals:  # a drop was refused: the rest of the run only looks for other refusals
        if probe:
            _probe(context, dialect, operation, batches)
        return
    if context.as_sql:
        hook = context.opts.get(OFFLINE_HOOK_OPTION)
        if hook is not None:
            hook(operation)
        impl.static_output(f"-- {_one_line(description[0].upper() + description[1:])}")
        if online.wanted(operation, context) and dialect.online.supported:
            impl.static_output(f"-- {online.OFFLINE_NOTE}")
        separator = getattr(impl, "batch_separator", None)
        timeout = context.opts.get(LOCK_TIMEOUT_OPTION, 0) if operation.locked_table() is not None else 0

        def write(batch: str) -> None:
            batch = dialect.script.bounded(batch, timeout)
            impl.static_output(batch if separator else dialect.script.statement(batch, impl.command_terminator))
            if separator:
                impl.static_output(separator)

        for batch in batches:
            write(batch)
        following = getattr(operation, "subscriptions", None)
        if following is not None:  # a dropped queue's subscription rows, in the same transaction
            impl.static_output(f"-- Delete the subscription rows naming {_one_line(dialect.display(operation.spec.name))}")
            for batch in dialect.script_delete_subscribers_of(following, operation.spec.name):
                write(batch)
        if hook is not None:
            hook(None)
        return
    log.info("%s", description)
    state = _state(context, dialect)
    if online.wanted(operation, context):
        rewritten = online.rewrite(context, dialect, operation, description)
        if dialect.online.supported:
            state.locks = state.ops = 0  # the online steps committed the run's transaction first
        if rewritten:
            return
    if getattr(operation, "adopts", False):
        _adopt_or_refuse(state, operation)
    _checkpoint(state, operation)
    # no_parameters: the driver gets the text as is, so a '%' or ':' in a quoted name stays literal
    connection = context.connection.execution_options(no_parameters=True)
    locked = operation.locked_table()
    if locked is not None and batches:
        take_lock(context.connection, dialect, locked, context.opts.get(online.POLICY_OPTION) or LockPolicy(), description)
    savepoint = context.connection.begin_nested() if guarded and batches and dialect.ddl_savepoints else None
    try:
        for batch in batches:
            connection.exec_driver_sql(batch)
        _delete_subscribers(operation, dialect, context.connection)
    except exc.DBAPIError as error:
        if dialect.lock_timed_out(error.orig):  # env.py rolls the run back and retries it (migrate/locks.py)
            raise LockWait(description, _table_of(operation)) from None
        if guarded and "refusing to drop" in str(error.orig):
            _refuse_holding(context, dialect, operation)
            if savepoint is None:
                raise refusal(context) from None
            savepoint.rollback()  # the run goes on, to find the other refusals
            return
        lines = str(error.orig).strip().splitlines()
        if lines and "refusing to" in lines[0]:  # another guard of the engine's DDL (e.g. a saga promotion)
            raise CommandError(lines[0]) from None
        raise
    if savepoint is not None:
        savepoint.commit()


def _probe(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp, batches: list[str]) -> None:
    """Whether the database refuses this drop for the rows left, found in a savepoint that is always
    rolled back (its locks with it): the run refused a drop already and changes nothing more."""
    connection = context.connection.execution_options(no_parameters=True)
    savepoint = context.connection.begin_nested()
    try:
        for batch in batches:
            connection.exec_driver_sql(batch)
    except exc.DBAPIError as error:
        savepoint.rollback()
        if dialect.lock_timed_out(error.orig):
            raise LockWait(operation.describe(dialect), _table_of(operation)) from None
        if "refusing to drop" in str(error.orig):
            _refuse_holding(context, dialect, operation)
            return
        raise
    savepoint.rollback()


Operations.implementation_for(TransportOp)(run)


def _delete_subscribers(operation: TransportOp, dialect: engines.Dialect, connection: Any) -> None:
    """After a queue's drop, in its transaction: delete the subscription rows naming the queue
    (where the subscription table exists), and log how many."""
    subscriptions = getattr(operation, "subscriptions", None)
    if subscriptions is None or not dialect.table_exists(connection, subscriptions):
        return
    statement, values = dialect.delete_subscribers_of(subscriptions, operation.spec.name)
    deleted = dialect.execute(connection, statement, values).rowcount
    queue, table = dialect.display(operation.spec.name), dialect.display(subscriptions)
    log.info("deleted %d subscription row(s) naming %s from %s", max(deleted, 0), queue, table)


def _table_of(operation: TransportOp) -> TableName | None:
    """The table an operation changes (the one whose lock it waits for), if it names one."""
    spec = getattr(operation, "spec", None)
    name = spec.name if spec is not None else getattr(operation, "name", None)
    return name if isinstance(name, TableName) else None


def _adopt_or_refuse(state: _RunState, operation: _CreateTable) -> None:
    """A table that already exists is adopted (IF NOT EXISTS) only if it has the transport's columns."""
    dialect = state.dialect
    found = state.existing_columns().get(dialect.table_key(operation.spec.name))
    if found is None:
        return
    version = getattr(operation, "version", None)
    where = dialect.display(operation.spec.name, profile(version) if version else None)
    missing = sorted(dialect.expected_columns(operation.spec) - found)
    if missing:
        raise StructureMismatch(
            f"{operation.noun} {where} already exists "
            f"but lacks the column(s) {', '.join(missing)} of a {getattr(operation, 'origin', 'transport')} {operation.noun}: "
            "it is not a table this topology can adopt. Rename or move the existing table, or rename "
            f"the {operation.noun} in topology.yaml"
        )
    log.info("adopting existing %s %s", operation.noun, where)


# The locks each operation holds on PostgreSQL until its transaction ends, as pg_locks lists them
# (every mode of every relation, sequence, index, TOAST table, transient table of a rewrite, object
# and transaction id: more than the lock table's entries, so a safe count), measured on PostgreSQL
# 15 with a little room; tests/test_lock_costs.py measures each kind and fails when one takes more.
LOCK_COSTS = {  # by operation class
    "CreateQueueOp": 16,
    "CreateDelayedTableOp": 11,
    "CreateSubscriptionTableOp": 10,
    "DropQueueOp": 18,
    "DropDelayedTableOp": 15,
    "DropSubscriptionTableOp": 12,
    "AddBodyStringOp": 20,  # a rewrite: the table, its transient copy, their TOAST tables and indexes
    "DropBodyStringOp": 4,
    "ChangeQueueSeqTypeOp": 26,  # a rewrite, and both indexes rebuilt
    "ChangeQueueVersionOp": 6,  # no statements on PostgreSQL (one layout since 8.1)
    "RenameIndexOp": 4,
    "EnsureSchemaOp": 2,
    "DropSchemaIfEmptyOp": 2,
    "CreateSagaTableOp": 12,
    "DropSagaTableOp": 14,
    "AddSagaCorrelationOp": 6,
    "DropSagaCorrelationOp": 5,
}
# What a migration's transaction holds besides its operations' own locks: the catalog read of
# the tables to adopt, information_schema's relations, alembic_version, the run's advisory lock.
TRANSACTION_LOCKS = 64
# The share of the server's lock table one migration fills before it commits part-way: the rest
# stays for the sessions sending and receiving meanwhile.
LOCK_TABLE_SHARE = 0.75


def lock_cost(operation: TransportOp) -> int:
    """The locks the operation holds on PostgreSQL until commit (LOCK_COSTS; a table created with
    BodyString also runs the column's addition)."""
    cost = LOCK_COSTS[type(operation).__name__]
    if isinstance(operation, _CreateTable) and operation.spec.body_string:
        cost += LOCK_COSTS["AddBodyStringOp"]
    return cost


def lock_budget(capacity: int | None) -> int | None:
    """The locks one migration transaction may hold on a server whose lock table has `capacity`
    entries (None: no limit)."""
    if capacity is None:
        return None
    return max(int(capacity * LOCK_TABLE_SHARE) - TRANSACTION_LOCKS, 4 * max(LOCK_COSTS.values()))


def _checkpoint(state: _RunState, operation: TransportOp) -> None:
    """Commit between operations when the next one would overflow the server's lock table.

    Each operation counts by the locks it holds until commit (LOCK_COSTS). Only very large
    revisions reach this (on PostgreSQL's defaults, some 300 table creations or 180 Seq
    rewrites). Every operation is idempotent (IF NOT EXISTS, IF EXISTS, guarded steps), so an
    upgrade that fails or is killed after a checkpoint continues where it stopped when run again.
    """
    cost = lock_cost(operation)
    if state.limit is not None and state.locks and state.locks + cost > state.limit:
        log.info("committing after %d operations holding about %d locks (server lock table limit)", state.ops, state.locks)
        with state.context.autocommit_block():
            pass
        state.locks = state.ops = 0
    state.locks += cost
    state.ops += 1


@renderers.dispatch_for(TransportOp)
def _render(autogen_context: AutogenContext, operation: TransportOp) -> str:
    return operation.python()
