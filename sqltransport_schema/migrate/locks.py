"""Bounded lock waits of online migrations (docs/live-migrations.md, "Bounded lock waits").

Every statement of a migration runs with a lock timeout (`-x lock_timeout=2s`). A statement that
gives up waiting raises `LockWait`; env.py then rolls the whole run back, which releases every
lock the run took (on every table, not only the one it waited for), pauses with backoff and
runs it again, until `-x lock_retry_for=10m` is spent.

Why the whole run and not the one step (in a savepoint): Alembic runs an upgrade in one
transaction, and a step that already altered another queue holds that queue's ACCESS EXCLUSIVE
lock until the commit. Retrying only the blocked step would keep that lock, and so stall that
queue's senders, for as long as the retries last. Rolling back keeps each stall to one lock
timeout per attempt, and the database is never left half-migrated. (Savepoints per step would
also make every DDL step a subtransaction, which hurts concurrent sessions on large revisions.)
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from alembic.util import CommandError
from sqlalchemy import exc

from .. import errors
from ..defaults import DEFAULT_TIMEOUT
from ..util import duration_ms
from . import toimpl

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator

    from sqlalchemy.engine import Connection

    from ..engines.base import Dialect, LockHolder
    from ..schema import TableName
    from .ops import TransportOp

TIMEOUT_OPTION = "lock_timeout"
RETRY_OPTION = "lock_retry_for"
IF_BUSY_OPTION = "if_busy"  # wait (default): for another migration of the database to finish; skip: give up at once
IF_BUSY = ("wait", "skip")
DEFAULT_RETRY_FOR = "10m"
FIRST_PAUSE = 1.0  # seconds before the second attempt; doubled after each attempt
LONGEST_PAUSE = 30.0


T = TypeVar("T")


class LockWait(errors.Failed):
    """A statement of the migration gave up waiting for a lock; the run is rolled back and retried."""

    def __init__(self, what: str | None = None, table: TableName | None = None) -> None:
        super().__init__(what or "the migration's transaction or one of its statements")
        self.what = what
        self.table = table


def parse_duration(text: str, option: str) -> int:
    """`2s`, `500ms`, `10m` (or `10min`), `1h` as milliseconds; `0` alone means none."""
    milliseconds = duration_ms(text)
    if milliseconds is None:
        raise errors.UsageError(f"-x {option}={text}: give a duration with its unit, e.g. {option}=500ms, 5s, 10m or 1h (0: none)")
    return milliseconds


def format_duration(milliseconds: int) -> str:
    """Milliseconds as the -x options write them: 2s, 500ms, 10m, 1h."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if milliseconds and milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    return f"{milliseconds}ms"


@dataclass(frozen=True)
class LockPolicy:
    """How long each statement waits for a lock, and for how long a blocked run is retried."""

    timeout_ms: int = 2000
    retry_for_ms: int = 600_000
    if_busy: str = "wait"

    @classmethod
    def from_x(cls, x_args: dict) -> LockPolicy:
        """The policy of `-x lock_timeout=... -x lock_retry_for=...` (UsageError on a bad value)."""
        if_busy = x_args.get(IF_BUSY_OPTION, "wait")
        if if_busy not in IF_BUSY:
            raise errors.UsageError(f"-x {IF_BUSY_OPTION}={if_busy}: give wait or skip")
        return cls(
            parse_duration(x_args.get(TIMEOUT_OPTION, DEFAULT_TIMEOUT), TIMEOUT_OPTION),
            parse_duration(x_args.get(RETRY_OPTION, DEFAULT_RETRY_FOR), RETRY_OPTION),
            if_busy,
        )

    def pauses(self) -> Iterator[float]:
        """Seconds to pause before each retry: 1, 2, 4, ... up to 30, each shortened by up to a
        fifth at random (two blocked migrators do not retry in step)."""
        pause = FIRST_PAUSE
        while True:
            yield pause * random.uniform(0.8, 1.0)
            pause = min(pause * 2, LONGEST_PAUSE)


class MigrationRunning(LockWait):
    """Another migration of the same database holds its migration lock (a second run at once)."""


class LockWaitsSpent(errors.Failed, CommandError):
    """A migration gave up retrying after lock_retry_for; the message says what is kept and how to go on."""


class SkippedBusy(LockWaitsSpent):
    """Another migration of the database was running and the run was told not to wait (-x if_busy=skip):
    nothing was changed; that migration brings the database on."""


def retry_while_blocked(
    work: Callable[[], T],
    blocked: Callable[[Exception], bool],
    pauses: Iterator[float],
    deadline: float,
    on_blocked: Callable[[Exception, int, float, float], None],
) -> tuple[T, int]:
    """`work` until it is not `blocked` by a lock: (its result, the attempt that did it).

    The one retry loop of lock waits (a whole migration run, an online rewrite's step, a try of a
    table's lock). After each blocked attempt `on_blocked(error, attempt, pause, left)` logs or
    raises (it must raise once `left`, the seconds to the deadline, is spent), then the loop pauses
    for `pause` (the next of `pauses`, at most what is left) and runs `work` again."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return work(), attempt
        except Exception as error:
            if not blocked(error):
                raise
            left = deadline - time.monotonic()
            pause = max(min(next(pauses), left), 0.0)
            on_blocked(error, attempt, pause, left)
            time.sleep(pause)


TRY_PAUSE = 0.05  # seconds between two tries of take_lock


def take_lock(connection: Connection, dialect: Dialect, table: TableName, policy: LockPolicy, what: str) -> None:
    """Take the table's exclusive lock before a step alters it, in short tries for at most
    policy.timeout_ms (then LockWait: the whole run rolls back and is retried).

    Why tries: a statement waiting for a lock queues every later sender and receiver of the table
    behind it, for as long as it waits. Each try waits at most `dialect.LOCK_TRY_MS` (in a
    savepoint, so a failed try leaves the transaction usable), then steps out of the queue for a
    moment, so while a reader holds the table its senders are held up for one try at a time, not
    for the whole lock_timeout. Sessions that only hold the table for a few milliseconds (sends,
    receives) are waited out within one try."""
    if not dialect.LOCK_TRY_MS or not policy.timeout_ms:
        return  # the engine has no such tries, or lock_timeout=0: the step waits as long as it takes

    def one_try() -> None:
        savepoint = connection.begin_nested()
        try:
            dialect.try_lock(connection, table, min(dialect.LOCK_TRY_MS, policy.timeout_ms))
        except exc.DBAPIError:
            savepoint.rollback()
            raise
        savepoint.commit()

    def spent(error: Exception, attempt: int, pause: float, left: float) -> None:
        if left <= 0:
            raise LockWait(what, table) from None

    deadline = time.monotonic() + policy.timeout_ms / 1000
    retry_while_blocked(one_try, lambda error: timed_out(dialect, error), itertools.repeat(TRY_PAUSE), deadline, spent)
    dialect.set_transaction_lock_timeout(connection, policy.timeout_ms)


def timed_out(dialect: Dialect, error: Exception) -> bool:
    """Whether an error is a statement's "gave up waiting for a lock" on this engine."""
    return isinstance(error, exc.DBAPIError) and dialect.lock_timed_out(error.orig)


def _one_line(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_holders(holders: list[LockHolder], waited_ms: int = 0) -> str:
    """The sessions holding the table, as the log and the FAILED line name them: those whose
    transaction is older than the wait (what kept the lock from the migration) when there are
    any, not the sends and receives that came and went meanwhile."""
    if not holders:
        return "no session holds it any more"
    lasting = [h for h in holders if h.seconds is not None and h.seconds * 1000 >= waited_ms]
    if waited_ms and lasting:
        holders = lasting
    parts = []
    for h in holders[:3]:
        since = f", query started {h.query_start.isoformat(timespec='seconds')}" if h.query_start is not None else ""
        app = h.application or "no application_name"
        parts.append(f"pid {h.pid} ({app}, {h.state or 'unknown state'}{since}, {h.mode}: {_one_line(h.query)})")
    more = f" and {len(holders) - 3} more" if len(holders) > 3 else ""
    return "held by " + "; ".join(parts) + more


# --------------------------------------------------------------------------- what a revision locks
def lock_report(
    operations: list[TransportOp], dialect: Dialect, rows: dict | None = None, queues: Collection[TableName] | None = None
) -> list[dict]:
    """For each operation that locks an existing table on this engine: the table, the operation,
    whether it holds an exclusive lock for a whole rewrite ("rewrite") or only briefly ("short"),
    why, and (given rows: table_key -> count, from a database) the rows a rewrite goes through.
    `queues`: the blueprint's queue tables, the only ones an online rewrite can take."""
    report = []
    for operation in operations:
        table = operation.locked_table()
        if table is None:
            continue
        try:
            if not toimpl.statements(operation, dialect):
                continue  # nothing to do on this engine
        except (NotImplementedError, RuntimeError):
            continue  # the engine cannot run it at all: the upgrade says so
        reason = operation.rewrite(dialect)
        report.append(
            {
                "engine": dialect.name,
                "table": dialect.display(table),
                "operation": operation.describe(dialect),
                "lock": "rewrite" if reason else "short",
                "reason": reason,
                "rows": None if rows is None else rows.get(dialect.table_key(table)),
                # a rewrite beside the live table (migrate/online.py): "chosen" by the revision, or "possible"
                "online": _online(operation, dialect, table, queues) if reason else None,
            }
        )
    return report


def _online(operation: TransportOp, dialect: Dialect, table: TableName, queues: Collection[TableName] | None) -> str | None:
    """How the rewrite can run beside the live table; None where the upgrade runs it in place (another
    engine, or a table that is not a queue in the blueprint: a delayed table's BodyString)."""
    if not dialect.online.supported or not operation.online_capable:
        return None
    if queues is not None and table not in queues:
        return None
    return "chosen" if operation.online else "possible"


def lock_lines(report: list[dict]) -> list[str]:
    """The report as a person reads it, one line per operation."""
    lines = []
    for entry in report:
        if entry["lock"] == "rewrite":
            how = f"exclusive lock for the whole rewrite: {entry['reason']}"
        else:
            how = "short exclusive lock"
        rows = f"; {entry['rows']:,} rows" if entry["rows"] is not None else ""
        online = {
            "chosen": "; the revision runs it online: a short exclusive lock for the swap",
            "possible": "; a queue can instead be rewritten online: -x online=true",
        }.get(entry.get("online"), "")
        lines.append(f"{entry['lock']:<7} {entry['table']}: {entry['operation']} ({how}{rows}){online}")
    return lines
