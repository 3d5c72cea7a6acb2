"""`compile --check`'s replay of the history, without a database.

Each revision's operations are read (its upgrade() run against a recording `op`) and applied to
the blueprint its down revision leaves (revisions.History: a merge's parents merged). Every
argument compile writes is held to the table it applies to and to the revision's SNAPSHOT, and the
tables they leave must be exactly the ones the SNAPSHOT records: a hand edit of any argument
(body_string, version, seq_type, a correlation property...) or a deleted or added operation is
named with its file and operation. A scratch database would miss what its engine does not express.

Arguments a SNAPSHOT does not record are the revision's choices and are not held to anything:
discard_messages, allow_protected, online. A queue drop's subscriptions, where written, must name
the subscription table the revision keeps (revisions compiled before drops took their subscription
rows along write none).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext

from .. import errors, wire
from ..revisions import History
from ..schema import Blueprint, Correlation, Kind, TableName, TableSpec, kept_subscription_table
from ..versions import profile
from . import ops, saga_ops
from .ops import _literal
from .saga_ops import _pair

if TYPE_CHECKING:
    from alembic.script import Script, ScriptDirectory

_SPEC_ARGUMENTS = (("body_string", "body_string"), ("seq_type", "seq_type"), ("protected", "protected"))
_SAGA_ARGUMENTS = (("saga_prefix", "prefix"), ("correlation", "correlation"), ("transitional", "transitional"))
_PLACEMENT = (("tenant", "tenant"),)  # SQL persistence's tables: in the shared database or in every tenant one
_PERSISTENCE_ARGUMENTS = {Kind.SAGA: _SAGA_ARGUMENTS + _PLACEMENT, Kind.OUTBOX: _SAGA_ARGUMENTS[:1] + _PLACEMENT}
_PERSISTENCE_TABLE_OPS = (*saga_ops.SAGA_TABLE_OPS, saga_ops.CreateOutboxTableOp, saga_ops.DropOutboxTableOp)


class Mismatch(errors.Conflict):
    """An operation that does not fit the table it applies to, or the revision's SNAPSHOT."""


def recorded_operations(revision: Script) -> list:
    """The operations the revision's upgrade() invokes, in order, none of them run."""
    recorded: list = []
    with Operations.context(MigrationContext.configure(dialect_name="sqlite")) as operations:
        operations.invoke = recorded.append  # each op.<name>(...) builds its operation and hands it here
        revision.module.upgrade()
    return recorded


def snapshot_problems(script: ScriptDirectory) -> list[str]:
    """One line per revision whose operations do not give the blueprint its SNAPSHOT records, oldest first."""
    history = History(script)
    problems = []
    for revision in reversed(list(script.walk_revisions())):
        snapshot = getattr(revision.module, "SNAPSHOT", None)
        if snapshot is None:
            continue  # nothing to hold its operations to (alembic merge heads, or written by hand)
        try:
            try:
                operations = recorded_operations(revision)
            except Exception as exc:  # noqa: BLE001 - any failure of an edited upgrade()
                raise Mismatch(f"its upgrade() fails: {type(exc).__name__}: {exc}") from None
            _replay(history.before(revision), history.blueprint(revision.revision), operations)
        except Mismatch as exc:
            problems.append(f"{revision.path}: {exc}; it was edited by hand: restore it, or delete it and compile again")
    return problems


class _Tables:
    """The tables as a revision's operations leave them: spec, and the version whose DDL built each."""

    def __init__(self, start: Blueprint | None, expected: Blueprint):
        self.expected = expected
        self.subscriptions = kept_subscription_table(start, expected)  # what a queue's drop names
        self.schemas = frozenset(expected.schemas)  # those the SNAPSHOT places tables in
        self.specs = {spec.name: spec for spec in start.tables} if start else {}
        self.built = {name: start.built_with(name) for name in self.specs} if start else {}
        self.by: dict[TableName, ops.TransportOp] = {}  # the operation that last changed each table

    def existing(self, operation: ops.TransportOp, name: TableName, kinds: tuple[Kind, ...]) -> TableSpec:
        spec = self.specs.get(name)
        if spec is None or spec.kind not in kinds:
            raise Mismatch(f"{operation.python()}: there is no {kinds[0].value} table {name} for it to change")
        return spec

    def argument(self, operation: ops.TransportOp, argument: str, written: object, right: object, why: str) -> None:
        if written != right:
            raise Mismatch(f"{operation.python()}: {argument}={_shown(written)}, but {why} {_shown(right)}")

    def set(self, operation: ops.TransportOp, spec: TableSpec, built: str | None = None) -> None:
        self.specs[spec.name] = spec
        if built is not None:
            self.built[spec.name] = built
        self.by[spec.name] = operation


def _replay(start: Blueprint | None, expected: Blueprint, operations: list) -> None:
    tables = _Tables(start, expected)
    for operation in operations:
        if isinstance(operation, ops.TransportOp):
            _apply(tables, operation)
    _compare(tables)


def _apply(tables: _Tables, op: ops.TransportOp) -> None:
    version = tables.expected.transport_version
    recorded = "the revision's SNAPSHOT records transport version"
    if isinstance(op, (ops._CreateTable, saga_ops.CreateSagaTableOp, saga_ops.CreateOutboxTableOp)):
        if op.table.name in tables.specs:
            raise Mismatch(f"{op.python()}: the table exists already")
        if not isinstance(op, _PERSISTENCE_TABLE_OPS):
            tables.argument(op, "version", op.version, version, recorded)
        tables.set(op, op.table, op.version or version)
    elif op.drops:
        spec = tables.existing(op, op.table.name, (op.table.kind,))
        names = _PERSISTENCE_ARGUMENTS.get(op.table.kind) or _SPEC_ARGUMENTS[: 3 if op.table.kind is Kind.QUEUE else 1]
        for field, argument in names:
            tables.argument(op, argument, getattr(op.table, field), getattr(spec, field), "the table it drops has")
        if not isinstance(op, _PERSISTENCE_TABLE_OPS):
            tables.argument(op, "version", op.version, tables.built[spec.name], "the table it drops was built by transport")
        if op.subscriptions is not None:
            written, kept = (None if name is None else wire.Address(*name).format() for name in (op.subscriptions, tables.subscriptions))
            tables.argument(op, "subscriptions", written, kept, "the subscription table the revision keeps is")
        del tables.specs[spec.name]
        tables.by[spec.name] = op
    elif isinstance(op, ops.ChangeQueueVersionOp):
        tables.existing(op, op.table, (Kind.QUEUE,))
        tables.argument(op, "from_version", op.from_version, tables.built[op.table], "the queue was built by transport")
        tables.argument(op, "to_version", op.to_version, version, recorded)
        tables.set(op, tables.specs[op.table], op.to_version)
    elif isinstance(op, ops._BodyStringOp):
        adds = isinstance(op, ops.AddBodyStringOp)
        spec = tables.existing(op, op.table, (Kind.QUEUE, Kind.DELAYED))
        if spec.body_string == adds:
            raise Mismatch(f"{op.python()}: the table {'has' if adds else 'has no'} BodyString column already")
        tables.argument(op, "version", op.version, version, recorded)
        tables.set(op, spec._replace(body_string=adds))
    elif isinstance(op, ops.ChangeQueueSeqTypeOp):
        spec = tables.existing(op, op.table, (Kind.QUEUE,))
        tables.argument(op, "from_type", op.from_type, spec.seq_type, "the queue's Seq is")
        tables.set(op, spec._replace(seq_type=op.to_type))
    elif isinstance(op, saga_ops.AddSagaCorrelationOp):
        spec = tables.existing(op, op.table.name, (Kind.SAGA,))
        tables.argument(op, "prefix", op.table.saga_prefix, spec.saga_prefix, "the saga table's prefix is")
        tables.argument(op, "tenant", op.table.tenant, spec.tenant, "the saga table's placement is")
        if op.correlation.name in {c.name for c in spec.correlations}:
            raise Mismatch(f"{op.python()}: the saga table has that property already")
        role = "correlation" if spec.correlation is None else "transitional"
        tables.set(op, spec._replace(**{role: op.correlation}))
    elif isinstance(op, saga_ops.DropSagaCorrelationOp):
        spec = tables.existing(op, op.table.name, (Kind.SAGA,))
        tables.argument(op, "prefix", op.table.saga_prefix, spec.saga_prefix, "the saga table's prefix is")
        tables.argument(op, "tenant", op.table.tenant, spec.tenant, "the saga table's placement is")
        if op.correlation not in spec.correlations:
            raise Mismatch(f"{op.python()}: the saga table has no such property")
        if op.require is not None:
            tables.argument(op, "require", op.require, spec.transitional, "the transitional property is")
            tables.set(op, spec._replace(correlation=op.require, transitional=None))
        else:
            tables.set(op, spec._replace(**{"correlation" if op.correlation == spec.correlation else "transitional": None}))
    elif isinstance(op, ops._SchemaOp):
        if isinstance(op, ops.EnsureSchemaOp) != (op.table in tables.schemas):
            which = "records no table in" if isinstance(op, ops.EnsureSchemaOp) else "still records tables in"
            raise Mismatch(f"{op.python()}: the revision's SNAPSHOT {which} that schema")


def _compare(tables: _Tables) -> None:
    """The tables left must be the SNAPSHOT's, each argument alike, each queue of its version's shape."""
    expected = tables.expected
    shape = profile(expected.transport_version).queue_shape
    for spec in expected.tables:
        found = tables.specs.pop(spec.name, None)
        by = tables.by.get(spec.name)
        where = by.python() if by is not None else f"no operation changes {spec.kind.value} table {spec.name}"
        if found is None:
            raise Mismatch(f"{where}: no operation leaves the {spec.kind.value} table {spec.name} its SNAPSHOT records")
        for field, argument in (*_fields(spec), ("kind", "kind")):
            left, recorded = getattr(found, field), getattr(spec, field)
            if left != recorded:
                raise Mismatch(f"{where}: {argument}={_shown(left)}, but its SNAPSHOT records {argument}={_shown(recorded)}")
        built = tables.built[spec.name]
        if spec.kind is Kind.QUEUE and profile(built).queue_shape != shape:
            raise Mismatch(
                f"{where}: the queue {spec.name} is left as transport {built} builds it, "
                f"but its SNAPSHOT records transport {expected.transport_version}"
            )
    for name, spec in tables.specs.items():
        by = tables.by.get(name)
        where = by.python() if by is not None else "no operation drops it"
        raise Mismatch(f"{where}: the {spec.kind.value} table {name} is left, but its SNAPSHOT records no such table")


def _shown(value: object) -> str:
    """An argument as the revision writes it."""
    return _pair(value) if isinstance(value, Correlation) else _literal(value)


def _fields(spec: TableSpec) -> Iterator[tuple[str, str]]:
    if spec.kind in _PERSISTENCE_ARGUMENTS:
        yield from _PERSISTENCE_ARGUMENTS[spec.kind]
    else:
        yield from _SPEC_ARGUMENTS[: 3 if spec.kind is Kind.QUEUE else 1]
