"""The one wrapper around every operation's implementation: what each step of a migration does
besides building its statements (migrate/toimpl.py).

Offline (--sql) it prints the statements under a comment line. Online it logs the step, runs a
rewrite online when asked (migrate/online.py), checks that a table it would adopt is the
transport's, commits part-way before the server's lock table fills (lock_cost), takes the
table's lock under the run's lock policy (migrate/locks.py), runs the statements and maps the
database's refusals (by SQLSTATE or driver error code) to the run's refusals (migrate/refusals.py).
"""

from __future__ import annotations

import copy
import logging
import weakref
from typing import TYPE_CHECKING, Any

from alembic.operations import Operations
from sqlalchemy import exc

from .. import engines
from ..schema import SHARED, TENANT
from ..statements import run_on
from ..versions import profile
from . import online, refusals, toimpl
from .locks import LockPolicy, LockWait, take_lock
from .ops import TransportOp, _SchemaOp, one_line
from .refusals import DISCARD_TABLES_OPTION, PROTECTED_OPTION, GuardRefused, StructureMismatch

if TYPE_CHECKING:
    from alembic.runtime.migration import MigrationContext

log = logging.getLogger("sqltransport_schema.migrate")

DISCARD_OPTION = "sqltransport_discard_messages"
OFFLINE_HOOK_OPTION = "sqltransport_offline_hook"  # called with each operation before its --sql output, then None
LOCK_TIMEOUT_OPTION = "sqltransport_lock_timeout"  # milliseconds an offline script's statements wait for a lock
ROLE_OPTION = "sqltransport_role"  # the database's role (-x role=shared|tenant): it runs that role's operations only

# What a migration's transaction holds besides its operations' own locks: the catalog read of
# the tables to adopt, information_schema's relations, alembic_version, the run's advisory lock.
TRANSACTION_LOCKS = 64
# The share of the server's lock table one migration fills before it commits part-way: the rest
# stays for the sessions sending and receiving meanwhile.
LOCK_TABLE_SHARE = 0.75


def lock_budget(capacity: int | None) -> int | None:
    """The locks one migration transaction may hold on a server whose lock table has `capacity`
    entries (None: no limit)."""
    if capacity is None:
        return None
    return max(int(capacity * LOCK_TABLE_SHARE) - TRANSACTION_LOCKS, 4 * max(kind.lock_cost for kind in toimpl.kinds()))


class _RunState:
    """What one migration run learns about its database once, instead of per operation."""

    def __init__(self, context: MigrationContext, dialect: engines.Dialect):
        self.context = context
        self.dialect = dialect
        self.locks = 0  # held by the operations since the last commit (lock_cost)
        self.ops = 0
        # an offline script (--sql) reads no server: it commits part way as on one with the defaults
        capacity = dialect.DEFAULT_LOCK_TABLE_CAPACITY if context.as_sql else dialect.lock_table_capacity(context.connection)
        self.limit = lock_budget(capacity)
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
    """Execute (online) or print (offline, --sql) the operation's statements; an operation of the other
    role (the shared database's, or the tenant databases') is not this database's and is skipped."""
    context = operations.migration_context
    if operation.tenant != (context.opts.get(ROLE_OPTION, SHARED) == TENANT):
        return
    dialect = engines.for_sqlalchemy(context.dialect.name)
    if _discards(operation, context):
        operation = copy.copy(operation)  # a drop (of a table or saga table), now discarding its rows
        operation.discard_messages = True
    batches = toimpl.statements(operation, dialect)
    description = operation.describe(dialect)
    if dialect.saga_only and not batches:
        log.info("skipped on %s, which holds saga tables only: %s", dialect.name, description)
        return
    if not batches and isinstance(operation, _SchemaOp):
        return  # an engine without schemas (SQLite): nothing to do, nothing to report
    probe = operation.guarded and dialect.ddl_savepoints and not context.as_sql
    if operation.refuses_protected(context.opts.get(PROTECTED_OPTION, frozenset())):
        refusals.refuse_protected(context, dialect, operation)
        if probe:
            _probe(context, dialect, operation, batches, description)  # would the rerun be refused for its rows too?
        return
    if refusals.any_refused(context):  # a drop was refused: the rest of the run only looks for other refusals
        if probe:
            _probe(context, dialect, operation, batches, description)
        return
    if context.as_sql:
        _checkpoint(_state(context, dialect), operation)
        _print(context, dialect, operation, batches, description)
        return
    log.info("%s", description)
    state = _state(context, dialect)
    if online.wanted(operation, context):
        rewritten = online.rewrite(context, dialect, operation, description)
        if dialect.online.supported:
            state.locks = state.ops = 0  # the online steps committed the run's transaction first
            refusals.committed(context)
        if rewritten:
            return
    if operation.adopts:
        _adopt_or_refuse(state, operation)
    _checkpoint(state, operation)
    locked = operation.locked_table()
    if locked is not None and batches:
        take_lock(context.connection, dialect, locked, context.opts.get(online.POLICY_OPTION) or LockPolicy(), description)
    _execute(context, dialect, operation, batches, description)


Operations.implementation_for(TransportOp)(run)


def _discards(operation: TransportOp, context: MigrationContext) -> bool:
    """A drop whose rows go with it: -x discard_messages=true, or its table listed in -x discard=."""
    if not operation.guarded:
        return False
    return bool(context.opts.get(DISCARD_OPTION)) or operation.table_name.table in context.opts.get(DISCARD_TABLES_OPTION, ())


def _print(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp, batches: list[str], description: str) -> None:
    """Offline (--sql): the statements under a comment line that describes them."""
    impl = context.impl
    hook = context.opts.get(OFFLINE_HOOK_OPTION)
    if hook is not None:
        hook(operation)
    impl.static_output(f"-- {one_line(description[0].upper() + description[1:])}")
    if online.wanted(operation, context) and dialect.online.supported:
        impl.static_output(f"-- {online.OFFLINE_NOTE}")
    separator = getattr(impl, "batch_separator", None)  # SQL Server's GO (an attribute of its impl only)
    wait = context.opts.get(LOCK_TIMEOUT_OPTION, 0)
    timeout = wait if operation.locked_table() is not None else 0

    def write(batch: str) -> None:
        for piece in dialect.script.around(batch, timeout, wait):
            impl.static_output(piece if separator else dialect.script.statement(piece, impl.command_terminator))
            if separator:
                impl.static_output(separator)

    for batch in batches:
        write(batch)
    if operation.subscriptions is not None:  # a dropped queue's subscription rows, in the same transaction
        impl.static_output(f"-- Delete the subscription rows naming {one_line(dialect.display(operation.table_name))}")
        for batch in dialect.script_delete_subscribers_of(operation.subscriptions, operation.table_name):
            write(batch)
    if hook is not None:
        hook(None)


def _execute(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp, batches: list[str], description: str) -> None:
    """Run the statements; a drop the database refuses for its rows is recorded in a savepoint (where
    the engine has them) so that the run goes on to find the other refusals."""
    # no_parameters: the driver gets the text as is, so a '%' or ':' in a quoted name stays literal
    connection = context.connection.execution_options(no_parameters=True)
    savepoint = context.connection.begin_nested() if operation.guarded and batches and dialect.ddl_savepoints else None
    try:
        for batch in batches:
            connection.exec_driver_sql(batch)
        _delete_subscribers(operation, dialect, context.connection)
    except exc.DBAPIError as error:
        if not _refused(context, dialect, operation, error, description):
            raise
        if savepoint is None:
            raise refusals.refusal(context) from None
        savepoint.rollback()  # the run goes on, to find the other refusals
        return
    if savepoint is not None:
        savepoint.commit()


def _refused(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp, error: exc.DBAPIError, description: str) -> bool:
    """Map a driver error of the operation's statements: a lock wait (LockWait: env.py rolls the run
    back and retries it), a guarded drop the database refused for its rows (recorded: True), another
    guard of the engine's DDL (GuardRefused, its first line). False: none of those."""
    if dialect.lock_timed_out(error.orig):
        raise LockWait(description, operation.table_name) from None
    if not dialect.guard_refused(error.orig):
        return False
    if operation.guarded:
        refusals.refuse_holding(context, dialect, operation)
        return True
    lines = str(error.orig).strip().splitlines()
    raise GuardRefused(lines[0] if lines else description) from None


def _probe(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp, batches: list[str], description: str) -> None:
    """Whether the database refuses this drop for the rows left, found in a savepoint that is always
    rolled back (its locks with it): the run refused a drop already and changes nothing more."""
    connection = context.connection.execution_options(no_parameters=True)
    savepoint = context.connection.begin_nested()
    try:
        for batch in batches:
            connection.exec_driver_sql(batch)
    except exc.DBAPIError as error:
        savepoint.rollback()
        if not _refused(context, dialect, operation, error, description):
            raise
        return
    savepoint.rollback()


def _delete_subscribers(operation: TransportOp, dialect: engines.Dialect, connection: Any) -> None:
    """After a queue's drop, in its transaction: delete the subscription rows naming the queue
    (where the subscription table exists), and log how many."""
    subscriptions = operation.subscriptions
    if subscriptions is None or not dialect.table_exists(connection, subscriptions):
        return
    statement, values = dialect.delete_subscribers_of(subscriptions, operation.table_name)
    deleted = run_on(connection, statement, values).rowcount
    queue, table = dialect.display(operation.table_name), dialect.display(subscriptions)
    log.info("deleted %d subscription row(s) naming %s from %s", max(deleted, 0), queue, table)


def _adopt_or_refuse(state: _RunState, operation: TransportOp) -> None:
    """A table that already exists is adopted (IF NOT EXISTS) only if it has the transport's columns."""
    dialect = state.dialect
    spec = operation.table
    found = state.existing_columns().get(dialect.table_key(spec.name))
    if found is None:
        return
    where = dialect.display(spec.name, profile(operation.version) if operation.version else None)
    missing = sorted(dialect.expected_columns(spec) - found)
    if missing:
        raise StructureMismatch(
            f"{operation.noun} {where} already exists "
            f"but lacks the column(s) {', '.join(missing)} of a {operation.origin} {operation.noun}: "
            "it is not a table this topology can adopt. Rename or move the existing table, or rename "
            f"the {operation.noun} in topology.yaml"
        )
    log.info("adopting existing %s %s", operation.noun, where)


# The comment an offline script writes before it commits part way (then COMMIT, then BEGIN).
CHECKPOINT_NOTE = (
    "-- Commit part way: the {ops} operations above hold about {locks} locks, the share of a default server's lock "
    "table (max_locks_per_transaction) one transaction takes. If the script stops after this point, run it again: "
    "it goes on from here."
)


def _checkpoint(state: _RunState, operation: TransportOp) -> None:
    """Commit between operations when the next one would overflow the server's lock table (offline:
    the default server's, and the script commits there).

    Each operation counts by the locks it holds until commit (lock_cost). Only very large
    revisions reach this (on PostgreSQL's defaults, some 300 table creations or 180 Seq
    rewrites). Every operation is idempotent (IF NOT EXISTS, IF EXISTS, guarded steps), so an
    upgrade that fails or is killed after a checkpoint continues where it stopped when run again.
    """
    cost = operation.locks()
    if state.limit is not None and state.locks and state.locks + cost > state.limit:
        context = state.context
        if context.as_sql:  # the script commits here, as the online run would (render_split moves it into the parts)
            context.impl.static_output(CHECKPOINT_NOTE.format(ops=state.ops, locks=state.locks))
        else:
            log.info("committing after %d operations holding about %d locks (server lock table limit)", state.ops, state.locks)
        with context.autocommit_block():
            pass
        refusals.committed(state.context)
        state.locks = state.ops = 0
    state.locks += cost
    state.ops += 1
