"""Online rewrites of queue tables (docs/live-migrations.md, "Online rewrites").

An operation that rewrites a PostgreSQL queue (Seq serial <-> bigserial, adding BodyString) holds
the table's exclusive lock for the whole rewrite when run in place: every sender and receiver
waits. Run online, it holds that lock only for a swap:

1. one short transaction builds the changed table beside the live one (the shadow) and puts a
   trigger on the live table that repeats each insert and delete on the shadow;
2. the backlog is copied newest first, a batch per transaction, locking no row of the live table,
   while senders and receivers keep using it: a row lock there (even FOR SHARE) would make the
   receivers' FOR UPDATE SKIP LOCKED pass over the head of the queue while a batch holding it
   is copied, and handle a batch's worth of messages out of order. Without it, a receiver's delete
   may run its trigger before the batch holding that message commits and leave its copy behind;
   so once the copy is done, the writers of that moment are waited for (they are short: a send,
   a receive) and the copies of messages no longer live are deleted. Every message stays where
   receivers look until the swap, and FIFO order is as without a rewrite;
3. one short transaction locks both tables, repairs any difference (none is expected), carries
   the sequence over, drops the live table and renames the shadow into its place.

Every step can be killed and the upgrade run again: step 1 is idempotent, step 2 goes on below the
lowest Seq the shadow holds and settles what an earlier run left, step 3 commits or leaves nothing.
Messages are copied rather than moved (the pipeline's move protocol deletes as it goes) because a
move would take messages out of the table receivers read while newer ones stay, and FIFO order
would be lost for the move's length.

The online steps commit on their own (Alembic's autocommit block): the steps of the upgrade before
an online rewrite are committed with it. Every step is idempotent, so an upgrade that fails later
is run again from where it stopped.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from .. import errors
from ..versions import LATEST, profile
from .locks import LockPolicy, LockWait, LockWaitsSpent, describe_holders, format_duration, retry_while_blocked, take_lock, timed_out

if TYPE_CHECKING:
    from collections.abc import Callable

    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.engine import Connection

    from .. import engines
    from ..schema import TableName, TableSpec
    from ..versions import Profile
    from .ops import TransportOp

log = logging.getLogger("sqltransport_schema.migrate")
T = TypeVar("T")

ONLINE_OPTION = "sqltransport_online"  # True: every rewrite online; a frozenset: those tables' rewrites
BATCH_OPTION = "sqltransport_online_batch"  # rows per copy transaction
POLICY_OPTION = "sqltransport_lock_policy"  # the run's LockPolicy (its lock timeout and retry time)
DEFAULT_BATCH = 10_000
PROGRESS_EVERY = 2.0  # seconds between progress lines
SETTLE_POLL = 0.01  # seconds between two looks at the writers the copy waits for
FIRST_KEY_ABOVE = 2**63 - 1  # above every Seq: where the copy starts when the shadow is empty
OFFLINE_NOTE = (
    "online rewrite asked for: a script rewrites in place (the online path copies in many transactions); "
    "run `alembic -x online=true upgrade head` against the database for it"
)


def parse_online(value: str) -> bool | frozenset[str]:
    """`-x online=true` (every rewrite), `-x online=Sales,error` (those queues' rewrites), false or empty."""
    text = value.strip()
    if text.lower() in ("", "0", "false", "no", "off"):
        return False
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def parse_batch(value: str | None) -> int:
    if value is None:
        return DEFAULT_BATCH
    if not value.strip().isdigit() or int(value) < 1:
        raise errors.UsageError(f"-x online_batch={value}: give the rows per copy transaction as a whole number, e.g. online_batch=10000")
    return int(value)


def wanted(operation: TransportOp, context: MigrationContext) -> bool:
    """Whether the user asked for this operation to run online (its revision's online=True, or -x online)."""
    if not operation.online_capable:
        return False
    if operation.online:
        return True
    chosen = context.opts.get(ONLINE_OPTION)
    return chosen is True or (bool(chosen) and operation.table_name.table in chosen)


def rewrite(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp, description: str) -> bool:
    """Run the operation online. False: it cannot be here (another engine, not a queue table), and
    the caller runs it in place."""
    online = dialect.online
    if not online.supported:
        log.info("online rewrites run on PostgreSQL only: %s runs in place on %s", description, dialect.name)
        return False
    policy: LockPolicy = context.opts.get(POLICY_OPTION) or LockPolicy()
    batch = context.opts.get(BATCH_OPTION) or DEFAULT_BATCH
    table = operation.table_name
    with context.autocommit_block(), context.connection.engine.connect() as connection:
        dialect.set_lock_timeout(connection, policy.timeout_ms)
        current = online.current_spec(connection, table)
        left = online.current_spec(connection, online.names(table).shadow)  # by a run that was stopped
        connection.commit()
        if current is None:
            log.info("%s is not a queue table this release rewrites online: %s runs in place", dialect.display(table), description)
            return False
        target = operation.online_target(current)
        if target == current and left is None:
            log.info("nothing to rewrite, %s already has that shape: %s", dialect.display(table), description)
            return True
        stale = left is not None and left._replace(name=table) != target  # left for another change
        rewrite = _Rewrite(connection, dialect, table, target, policy, batch, description)
        rewrite.run(profile(operation.version or LATEST), stale)
    return True


class _Rewrite:
    """One table's online rewrite on its own connection (the migration's stays idle meanwhile)."""

    def __init__(
        self,
        connection: Connection,
        dialect: engines.Dialect,
        table: TableName,
        target: TableSpec,
        policy: LockPolicy,
        batch: int,
        description: str,
    ):
        self.connection = connection
        self.dialect = dialect
        self.online = dialect.online
        self.table = table
        self.target = target
        self.policy = policy
        self.batch = batch
        self.description = description
        self.where = dialect.display(table)
        self.deadline = time.monotonic() + policy.retry_for_ms / 1000

    def run(self, release: Profile, stale: bool) -> None:
        started = time.monotonic()
        log.info("online rewrite of %s (%s): building the new table beside it", self.where, self.description)
        if stale:
            log.info("dropping %s, left by an earlier run for another change", self.dialect.display(self.online.names(self.table).shadow))
        build = self.online.create_shadow(self.target, release, stale) + self.online.mirror(self.table)
        self._retrying("build the new table and its mirror trigger", lambda: self._execute(build))
        copied = self._copy()
        self._settle()
        _, attempt = self._retrying("swap the tables", self._swap)
        log.info("online rewrite of %s: swapped (attempt %d)", self.where, attempt)
        self.online.run(self.connection, self.online.ANALYZE, self.table)
        self.connection.commit()
        log.info("online rewrite of %s done in %.1f s (%d rows copied in this run)", self.where, time.monotonic() - started, copied)

    # -- steps --------------------------------------------------------------------------------
    def _copy(self) -> int:
        """Step 2: the backlog, newest first, one batch per transaction."""
        below = self.online.run(self.connection, self.online.COPY_FROM, self.table).scalar()
        total = self.online.run(self.connection, self.online.ROWS_ESTIMATED, self.table).scalar() or 0
        self.connection.commit()
        below = FIRST_KEY_ABOVE if below is None else below
        copied, last_report, started = 0, time.monotonic(), time.monotonic()
        while True:
            (count, lowest), _ = self._retrying("copy a batch (a row of it is locked by a receiver)", partial(self._copy_batch, below))
            if count == 0:
                return copied
            copied += count
            below = lowest
            now = time.monotonic()
            if now - last_report >= PROGRESS_EVERY:
                rate = copied / (now - started)
                share = f" of about {total:,} ({min(copied / total, 1):.0%})" if total else ""
                log.info("online rewrite of %s: copied %s rows%s, %.0f rows/s", self.where, f"{copied:,}", share, rate)
                last_report = now

    def _copy_batch(self, below: int) -> tuple[int, int | None]:
        """(rows copied, the lowest key among them) of the batch below `below`."""
        return tuple(self.online.run(self.connection, self.online.COPY_BATCH, self.table, Below=below, BatchSize=self.batch).one())

    def _settle(self) -> None:
        """Step 2's end: wait for the sessions writing to the live table now (a receiver's delete
        that ran its trigger before the batch holding its message committed), then delete the
        copies of messages they received. Bounded by lock_retry_for, as a lock wait."""
        online, connection = self.online, self.connection
        writers = list(online.run(connection, online.WRITERS, self.table).scalars())
        connection.commit()
        waited = warned = time.monotonic()
        while writers and online.run(connection, online.WRITERS_LEFT, self.table, Writers=writers).scalar():
            connection.commit()
            now = time.monotonic()
            if now >= self.deadline or now - warned >= max(self.policy.timeout_ms / 1000, 1.0):
                self._still_writing(now - waited, now >= self.deadline)
                warned = now
            time.sleep(SETTLE_POLL)
        connection.commit()
        settling = time.monotonic()
        removed = online.run(connection, online.SETTLE, self.table).rowcount
        connection.commit()
        log.info(
            "online rewrite of %s: copy settled (waited %.2f s for %d writer(s); "
            "%d copies of messages received meanwhile removed in %.2f s)",
            self.where,
            settling - waited,
            len(writers),
            removed,
            time.monotonic() - settling,
        )

    def _swap(self) -> None:
        """Step 3 (one transaction): lock both, repair any difference, carry the sequence over, rename."""
        online = self.online
        take_lock(self.connection, self.dialect, self.table, self.policy, "swap the tables")  # in short tries
        online.run(self.connection, online.LOCK_BOTH, self.table)
        live, shadow = online.run(self.connection, online.COUNTS, self.table).one()
        if live != shadow:  # the mirror keeps them equal; a difference is repaired, not swapped over
            log.warning("online rewrite of %s: %d rows live, %d in the new table; repairing before the swap", self.where, live, shadow)
            online.run(self.connection, online.REPAIR_MISSING, self.table)
            online.run(self.connection, online.REPAIR_EXTRA, self.table)
        online.run(self.connection, online.CARRY_SEQUENCE, self.table)
        self._execute(online.finish(self.connection, self.table))

    def _execute(self, statements: list[str]) -> None:
        # no_parameters: the driver gets the text as is, so a '%' in a quoted name stays literal
        for statement in statements:
            self.connection.execution_options(no_parameters=True).exec_driver_sql(statement)

    def _still_writing(self, waited: float, spent: bool) -> None:
        """A writer of the copy's last moment is still open: say who (and stop once lock_retry_for is spent)."""
        holders = self.dialect.lock_holders(self.connection, self.table)
        self.connection.rollback()
        held = f": {describe_holders(holders)}" if holders is not None else ""
        if spent:
            raise LockWaitsSpent(
                f"online rewrite of {self.where}: gave up after {format_duration(self.policy.retry_for_ms)} waiting for the "
                f"sessions that wrote to it during the copy to end{held}. The live table is unchanged and in use; the new "
                "table beside it is kept current. Run the upgrade again to go on from there"
            )
        log.warning(
            "online rewrite of %s: waited %.1f s for the sessions that wrote to it during the copy to end%s", self.where, waited, held
        )

    # -- lock waits ---------------------------------------------------------------------------
    def _retrying(self, what: str, work: Callable[[], T]) -> tuple[T, int]:
        """`work` in one short transaction, committed: (its result, the attempt that did it). While it
        waits too long for a lock, rolled back, the holders logged, paused (1 s, 2 s, 4 s ...) and run
        again, until lock_retry_for is spent."""

        def committed() -> T:
            try:
                result = work()
            except Exception:
                self.connection.rollback()
                raise
            self.connection.commit()
            return result

        def blocked(error: Exception) -> bool:  # LockWait: take_lock's tries were spent
            return isinstance(error, LockWait) or timed_out(self.dialect, error)

        return retry_while_blocked(committed, blocked, self.policy.pauses(), self.deadline, partial(self._wait, what))

    def _wait(self, what: str, error: Exception, attempt: int, pause: float, left: float) -> None:
        """Log who holds the table (before the pause); once lock_retry_for is spent, stop with one
        line that says what is kept and how to go on."""
        holders = self.dialect.lock_holders(self.connection, self.table)
        self.connection.rollback()
        held = f": {describe_holders(holders, self.policy.timeout_ms)}" if holders is not None else ""
        waited = format_duration(self.policy.timeout_ms)
        if left <= 0:
            raise LockWaitsSpent(
                f"online rewrite of {self.where}: gave up waiting for a lock to {what} after "
                f"{format_duration(self.policy.retry_for_ms)} (each wait at most {waited}){held}. The live table is "
                "unchanged and in use; the new table beside it is kept current and keeps what was copied. "
                "Run the upgrade again to go on from there, e.g. with a longer -x lock_retry_for=30m"
            ) from None
        log.warning(
            "online rewrite of %s: attempt %d waited %s for a lock to %s%s; retrying in %.1f s",
            self.where,
            attempt,
            waited,
            what,
            held,
            pause,
        )
