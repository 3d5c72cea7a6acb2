"""The statements of each operation kind on an engine: one function per kind, registered for its
declaration (migrate/ops.py, migrate/saga_ops.py) as Alembic registers its toimpl functions.

The functions only build text; migrate/execution.py runs or prints it, with the steps every
operation shares (log line, lock policy, adoption, checkpoint, refusals).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from .. import errors
from ..schema import Kind, TableSpec
from ..versions import profile
from . import ops, saga_ops

if TYPE_CHECKING:
    from collections.abc import Callable

    from .. import engines

Op = TypeVar("Op", bound=ops.TransportOp)
_IMPLEMENTATIONS: dict[type, Callable] = {}


class CannotRunHere(errors.Unsupported):
    """The engine cannot run this operation at all (a transport version it lacks, an index it cannot rename)."""


def implementation_for(*kinds: type[Op]) -> Callable[[Callable[[Op, engines.Dialect], list[str]]], Callable]:
    """Register the decorated function as the statements of these operation kinds."""

    def register(function: Callable[[Op, engines.Dialect], list[str]]) -> Callable:
        for kind in kinds:
            _IMPLEMENTATIONS[kind] = function
        return function

    return register


def statements(operation: ops.TransportOp, dialect: engines.Dialect) -> list[str]:
    """The operation's statements on this engine (nothing to run: an empty list)."""
    for kind in type(operation).__mro__:
        function = _IMPLEMENTATIONS.get(kind)
        if function is not None:
            return function(operation, dialect)
    raise NotImplementedError(f"no implementation registered for {type(operation).__name__}")


def kinds() -> list[type]:
    """The operation kinds that have statements of their own (those revisions use)."""
    return list(_IMPLEMENTATIONS)


# --------------------------------------------------------------------------- tables
@implementation_for(
    ops.CreateQueueOp, ops.CreateDelayedTableOp, ops.CreateSubscriptionTableOp, ops.CreateArchiveTableOp, ops.CreateActionLogOp
)
def create_table(operation: ops._CreateTable, dialect: engines.Dialect) -> list[str]:
    prof = profile(operation.version)
    reason = dialect.unsupported(prof)
    if reason:
        raise CannotRunHere(f"cannot create {operation.noun} {operation.where(dialect)} on {dialect.name}: {reason}")
    return dialect.create_table(operation.table, prof)


@implementation_for(ops.DropQueueOp, ops.DropDelayedTableOp, ops.DropSubscriptionTableOp, ops.DropArchiveTableOp, ops.DropActionLogOp)
def drop_table(operation: ops._DropTable, dialect: engines.Dialect) -> list[str]:
    return dialect.drop_table(operation.table, profile(operation.version), operation.discard_messages)


# --------------------------------------------------------------------------- queue changes
@implementation_for(ops.ChangeQueueVersionOp)
def change_queue_version(operation: ops.ChangeQueueVersionOp, dialect: engines.Dialect) -> list[str]:
    spec = TableSpec(Kind.QUEUE, operation.table)
    return dialect.change_queue_version(spec, profile(operation.from_version), profile(operation.to_version))


@implementation_for(ops.AddBodyStringOp)
def add_body_string(operation: ops.AddBodyStringOp, dialect: engines.Dialect) -> list[str]:
    return dialect.add_body_string(TableSpec(Kind.QUEUE, operation.table), profile(operation.version))


@implementation_for(ops.DropBodyStringOp)
def drop_body_string(operation: ops.DropBodyStringOp, dialect: engines.Dialect) -> list[str]:
    return dialect.drop_body_string(TableSpec(Kind.QUEUE, operation.table), profile(operation.version))


@implementation_for(ops.ChangeQueueSeqTypeOp)
def change_queue_seq_type(operation: ops.ChangeQueueSeqTypeOp, dialect: engines.Dialect) -> list[str]:
    return dialect.change_seq_type(TableSpec(Kind.QUEUE, operation.table), operation.from_type, operation.to_type)


@implementation_for(ops.RenameIndexOp)
def rename_index(operation: ops.RenameIndexOp, dialect: engines.Dialect) -> list[str]:
    found = dialect.rename_index(operation.table, operation.old, operation.new)
    if found is None:
        raise CannotRunHere(f"{dialect.name} cannot rename an index in place")
    return found


# --------------------------------------------------------------------------- schemas
@implementation_for(ops.EnsureSchemaOp)
def ensure_schema(operation: ops.EnsureSchemaOp, dialect: engines.Dialect) -> list[str]:
    return dialect.create_schema(operation.table)


@implementation_for(ops.DropSchemaIfEmptyOp)
def drop_schema_if_empty(operation: ops.DropSchemaIfEmptyOp, dialect: engines.Dialect) -> list[str]:
    return dialect.drop_schema(operation.table)


# --------------------------------------------------------------------------- saga tables
@implementation_for(saga_ops.CreateSagaTableOp)
def create_saga_table(operation: saga_ops.CreateSagaTableOp, dialect: engines.Dialect) -> list[str]:
    return dialect.create_saga(operation.table)


@implementation_for(saga_ops.AddSagaCorrelationOp)
def add_saga_correlation(operation: saga_ops.AddSagaCorrelationOp, dialect: engines.Dialect) -> list[str]:
    return dialect.add_saga_correlation(operation.table, operation.correlation)


@implementation_for(saga_ops.DropSagaCorrelationOp)
def drop_saga_correlation(operation: saga_ops.DropSagaCorrelationOp, dialect: engines.Dialect) -> list[str]:
    return dialect.drop_saga_correlation(operation.table, operation.correlation, operation.require)


# --------------------------------------------------------------------------- outbox tables
@implementation_for(saga_ops.CreateOutboxTableOp)
def create_outbox_table(operation: saga_ops.CreateOutboxTableOp, dialect: engines.Dialect) -> list[str]:
    return dialect.create_outbox(operation.table)


# --------------------------------------------------------------------------- either's drop
@implementation_for(saga_ops.DropSagaTableOp, saga_ops.DropOutboxTableOp)
def drop_persistence_table(operation: saga_ops.DropSagaTableOp | saga_ops.DropOutboxTableOp, dialect: engines.Dialect) -> list[str]:
    return dialect.drop_table(operation.table, None, operation.discard_messages)
