"""The message pump of seed 004: peek, then up to N concurrent receives, back to peek when one finds nothing.

Each receive runs in its own transaction on its own connection; the handler gets
that connection, so its writes commit with the receive. The receive itself is
runtime/receiving.py's, the one path every pump runs (tenant databases and the outbox
are steps of it); what becomes of a message that fails is runtime/recoverability.py's:
immediate retries, delayed retries through the endpoint's delayed table, then the error
queue with the exception in its headers, as NServiceBus does.

With batch_size=N each receive task takes (or locks) up to N messages in one transaction and commits once:
one disk flush per batch instead of per message; a crash before it puts all N back (at-least-once,
as ever). An optimistic batch (the default) is taken in one statement and its handlers run
without savepoints; if one fails, the whole batch rolls back (every message back at its place) and
runs again isolated: locked, not taken, each handler after its own savepoint, so a
failure undoes that handler's writes alone and leaves its message in the queue (at its place, for
the retries and the error queue as above) while the others commit together. After a failure the
pump's next `isolation_cooldown` batches run isolated too, so a poison message does not make every
batch run twice. docs/runtime.md says when to choose a batch size.

With outbox=True (docs/outbox.md) the endpoint's outbox table records each message handled
(a message already handled is not handled again; a handler's sends and publishes are stored
in its transaction, dispatched after it), optimistic or isolated as above.

A failure of the database itself (a dropped connection, a failover, a restart) does not
end the pump: the connection is discarded, the pump waits a peek delay and peeks again on
a new one. Only when every attempt has failed for `failure_timeout` seconds does `run()`
raise PumpFailed, as the transport's circuit breaker raises a critical error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from sqlalchemy.engine import Connection

from .. import errors
from ..versions import PumpPurge
from .outbox import OutboxTable, pump_outbox
from .receiving import Context, Handler, Link, Receiver, RolledBack
from .recoverability import DEFAULT_DELAYED_RETRIES, DEFAULT_DELAYED_RETRY_INCREASE, DEFAULT_IMMEDIATE_RETRIES, Recoverability
from .tenants import DEFAULT_MAX_TENANT_CONNECTIONS, TenantDatabase, TenantDatabases
from .transport import EndpointTables, Queue, Transport

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.12; SQLAlchemy depends on typing_extensions

__all__ = [
    "MessagePump",
    "PumpSettings",
    "Context",
    "DueMover",
    "PumpFailed",
    "RECOMMENDED_PEEK_DELAY",
    "DEFAULT_FAILURE_TIMEOUT",
    "ISOLATIONS",
    "DEFAULT_ISOLATION_COOLDOWN",
    "DEFAULT_IMMEDIATE_RETRIES",
    "DEFAULT_DELAYED_RETRIES",
    "DEFAULT_DELAYED_RETRY_INCREASE",
    "DEFAULT_MAX_TENANT_CONNECTIONS",
]

log = logging.getLogger("sqltransport_schema.pump")
T = TypeVar("T")

RECOMMENDED_PEEK_DELAY = (0.1, 10.0)
DEFAULT_FAILURE_TIMEOUT = 30.0  # the transport's circuit breaker waits as long before a critical error
ISOLATIONS = ("optimistic", "savepoint")
DEFAULT_ISOLATION_COOLDOWN = 10  # batches run isolated after a failure, before optimistic ones again
DEFAULT_PURGE_INTERVAL = 300.0  # 3.1's PurgeTaskDelay: 5 minutes between purges of expired messages


class PumpFailed(errors.Failed):
    """The database could not be reached (or refused every receive) for the whole failure timeout."""


@dataclass(frozen=True)
class PumpSettings:
    """A pump's options in one object (docs/runtime.md, "The message pump"): build it once and share
    it between pumps, or pass the same names as keyword arguments to MessagePump, which override it."""

    concurrency: int = 1  # receive tasks at once, each on its own connection
    peek_delay: float = 1.0  # seconds between peeks of an empty queue
    peek_batch_size: int | None = None  # receives started after a full round (default: concurrency)
    immediate_retries: int = DEFAULT_IMMEDIATE_RETRIES
    delayed_retries: int | None = None  # None: NServiceBus's default where the endpoint has a delayed table
    delayed_retry_increase: float = DEFAULT_DELAYED_RETRY_INCREASE
    error_queue: str | Queue = "error"
    endpoint: EndpointTables | None = None  # forwarding of delayed messages, delayed retries
    failure_timeout: float = DEFAULT_FAILURE_TIMEOUT
    batch_size: int = 1
    isolation: str = "optimistic"
    isolation_cooldown: int = DEFAULT_ISOLATION_COOLDOWN
    outbox: bool | str | OutboxTable = False
    tenant_database: TenantDatabase | None = None
    max_tenant_connections: int = DEFAULT_MAX_TENANT_CONNECTIONS
    purge_expired: bool | None = None  # None: as the release's pump (Profile.pump_purge); True: at start; False: never
    purge_interval: float = DEFAULT_PURGE_INTERVAL  # 3.1's periodic purge: seconds between purges

    def with_options(self, options: Mapping[str, Any]) -> PumpSettings:
        """These settings with `options` (keyword arguments of MessagePump) in place of their fields."""
        unknown = sorted(set(options) - {f.name for f in fields(self)})
        if unknown:
            raise errors.UsageError(f"MessagePump has no option {', '.join(unknown)}; its options are PumpSettings' fields")
        return replace(self, **options) if options else self


class PumpOptions(TypedDict, total=False):
    """PumpSettings' fields as MessagePump's keyword arguments, for type checkers (tests/test_runtime.py
    holds the two to the same names and types)."""

    concurrency: int
    peek_delay: float
    peek_batch_size: int | None
    immediate_retries: int
    delayed_retries: int | None
    delayed_retry_increase: float
    error_queue: str | Queue
    endpoint: EndpointTables | None
    failure_timeout: float
    batch_size: int
    isolation: str
    isolation_cooldown: int
    outbox: bool | str | OutboxTable
    tenant_database: TenantDatabase | None
    max_tenant_connections: int
    purge_expired: bool | None
    purge_interval: float


class MessagePump:
    """Receives from one queue and calls `handler(message, context)` for each message, as the
    transport's pump does: peek, then up to `concurrency` receives at once, each in its own
    transaction (or up to `batch_size` messages per transaction). A failure of a message (its
    handler, its tenant's database, its outbox row) rolls its writes back and counts as an attempt;
    after `immediate_retries` more, `delayed_retries` rounds through the endpoint's delayed table
    (the n-th after n x `delayed_retry_increase` seconds), then `error_queue` with the exception in
    its headers, as NServiceBus's recoverability (runtime/recoverability.py); unreadable headers go
    there unchanged. With `endpoint`, delayed messages moved to the input queue are forwarded to their
    destination, and the pump moves its endpoint's due delayed messages while delayed retries are on.
    A database failure is retried every `peek_delay` seconds, and ends the pump (PumpFailed) only
    after `failure_timeout` seconds in a row."""

    def __init__(
        self, transport: Transport, queue: Queue, handler: Handler, settings: PumpSettings | None = None, **options: Unpack[PumpOptions]
    ):
        settings = (settings or PumpSettings()).with_options(options)
        self.settings = settings
        concurrency, peek_delay, peek_batch_size = settings.concurrency, settings.peek_delay, settings.peek_batch_size
        error_queue, endpoint, failure_timeout = settings.error_queue, settings.endpoint, settings.failure_timeout
        batch_size, isolation, isolation_cooldown = settings.batch_size, settings.isolation, settings.isolation_cooldown
        outbox, tenant_database = settings.outbox, settings.tenant_database
        if isolation not in ISOLATIONS:
            raise errors.UsageError(f"isolation must be one of {', '.join(ISOLATIONS)}, not {isolation!r}")
        if isinstance(isolation_cooldown, bool) or not isinstance(isolation_cooldown, int) or isolation_cooldown < 0:
            raise errors.UsageError(f"isolation_cooldown is a number of batches (0 or more), not {isolation_cooldown!r}")
        low, high = RECOMMENDED_PEEK_DELAY
        if not low <= peek_delay <= high:
            log.warning(
                "peek delay %.3f s is outside the recommended %.1f s to %.0f s: shorter stresses the database, "
                "longer lets messages back up",
                peek_delay,
                low,
                high,
            )
        self.transport = transport
        self.queue = queue
        self.handler = handler
        self.concurrency = max(1, concurrency)
        self.peek_delay = peek_delay
        self.peek_batch_size = peek_batch_size or self.concurrency
        self.error_queue = transport.queue(error_queue) if isinstance(error_queue, str) else error_queue
        self.endpoint = endpoint
        self.failure_timeout = failure_timeout
        self.batch_size = max(1, batch_size)
        self.isolation = isolation
        self.isolation_cooldown = isolation_cooldown
        self._isolated_left = 0  # batches still to run isolated after the last failure (optimistic pumps)
        self.reruns = 0  # optimistic batches rolled back and run again isolated
        # the endpoint's outbox table (outbox=True: <Endpoint_Name_>OutboxData; a name or an OutboxTable)
        input_name = endpoint.input.name if endpoint is not None else queue.name
        # tenant databases (docs/tenants.md): the handler's writes (and its outbox row) go to the one its headers choose
        self.tenants = TenantDatabases(tenant_database, settings.max_tenant_connections) if tenant_database is not None else None
        self.outbox = pump_outbox(transport, input_name, outbox, tenants=self.tenants is not None) if outbox else None
        self.recoverability = Recoverability(
            queue,
            self.error_queue,
            immediate_retries=settings.immediate_retries,
            delayed_retries=self._delayed_retries(settings.delayed_retries),
            delayed_retry_increase=settings.delayed_retry_increase,
            endpoint=endpoint,
        )
        self.receiver = Receiver(transport, queue, handler, self.recoverability, tenants=self.tenants, outbox=self.outbox)
        self._due_mover: DueMover | None = None
        self._failing_since: float | None = None  # monotonic time of the first failure in a row
        self._daemon = _Daemon("sqlts-pump", self.run)
        self._stop = self._daemon.stopping
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._lock = threading.Lock()
        self.failure: PumpFailed | None = None

    def _delayed_retries(self, wanted: int | None) -> int:
        """Delayed retries go through the endpoint's delayed table: NServiceBus's default number where
        the pump has one, none (said here) where not; asked for without one, a usage error."""
        where = self._delayed_table()
        if where is None:
            if wanted:
                raise errors.UsageError(
                    f"delayed_retries={wanted} needs the endpoint's delayed table: pass endpoint=transport.endpoint(...) "
                    "of an endpoint whose delayed table is deployed, or delayed_retries=0"
                )
            if wanted is None:
                log.info("no delayed retries for %s: the pump has no endpoint with a delayed table", self.queue.address)
            return 0
        return DEFAULT_DELAYED_RETRIES if wanted is None else wanted

    def _delayed_table(self) -> str | None:
        if self.endpoint is None:
            return None
        with self.transport.engine.connect() as conn:
            if not self.transport.dialect.table_exists(conn, self.endpoint.delayed_name):
                return None
        return self.transport.dialect.display(self.endpoint.delayed_name)

    @property
    def immediate_retries(self) -> int:
        return self.recoverability.immediate_retries

    @property
    def delayed_retries(self) -> int:
        return self.recoverability.delayed_retries

    @property
    def processed(self) -> int:
        """Messages handled and committed."""
        return self.receiver.processed

    @property
    def failed(self) -> int:
        """Messages moved to the error queue after their retries."""
        return self.receiver.failed

    # -- one message ------------------------------------------------------------------
    def receive_one(self) -> bool:
        """Receive and handle one message in one transaction; False when the queue was empty.

        A failure of the message rolls the transaction back (the message is back in the queue) and
        still counts as a message taken, so the pump keeps receiving.
        """
        try:
            return self._replanning(self._receive, 1, False) > 0
        except RolledBack:
            return True
        except Exception:
            self._discard_connection()
            raise

    def _discard_connection(self) -> None:
        """Drop this thread's connection after a database failure; the next call connects anew."""
        link = getattr(self._local, "link", None)
        self._local.link = None
        conn = link.connection if link is not None else None
        if conn is not None:
            with self._lock:
                if conn in self._connections:
                    self._connections.remove(conn)
            try:
                conn.invalidate()  # never back to the pool: its state is unknown
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def _connection(self) -> Link:
        """This thread's own connection, held for the pump's life (a pool checkout per message costs more than the SQL)."""
        link = getattr(self._local, "link", None)
        if link is None or link.connection.closed or link.connection.invalidated:
            conn = self.transport.engine.connect()
            with self._lock:
                self._connections.append(conn)
            link = self._local.link = Link(conn)
        return link

    def _receive(self, size: int, isolated: bool) -> int:
        taken, failures = self.receiver.receive(self._connection(), size, isolated)
        if isolated and taken:
            self._isolated_batch_done(failures)
        return taken

    # -- a batch ----------------------------------------------------------------------
    def receive_batch(self) -> int:
        """Receive and handle up to batch_size messages in one transaction; how many were taken
        off the queue or tried (0: the queue was empty).

        Optimistic (the default): the batch is taken in one statement and the handlers run without
        savepoints; the first failure rolls the whole batch back, and the batch runs again
        isolated. Isolated (isolation="savepoint", the re-run, and the `isolation_cooldown` batches
        after a failure; always with tenant databases): the batch is locked, not taken, each handler
        runs after its own savepoint (Context), and each message handled is deleted before the one
        commit; a failure rolls back to its savepoint and leaves its message where it was, so the
        commit puts it back at the head of the queue and the others' effects commit. A failure of
        the database rolls back all of them.
        """
        try:
            if self.isolation == "optimistic" and self._isolated_left <= 0:
                try:
                    return self._replanning(self._receive, self.batch_size, False)
                except RolledBack:
                    with self._lock:
                        self.reruns += 1
                        self._isolated_left = self.isolation_cooldown
                    log.info(
                        "a message failed in an optimistic batch of %s: rolled back, running it again isolated (cool-down %d batches)",
                        self.queue.address,
                        self.isolation_cooldown,
                    )
            return self._replanning(self._receive, self.batch_size, True)
        except Exception:
            self._discard_connection()
            raise

    def _replanning(self, receive: Callable[..., T], *args: Any) -> T:
        """A receive, run again at once (on the same connection) when its transaction failed because a
        statement the connection keeps prepared no longer fits its table: an online rewrite swapped
        the queue (docs/live-migrations.md). The failed transaction was rolled back, which also
        dropped the connection's prepared statements, so the second run prepares them anew. Not a
        failure of the database: no warning, no pause."""
        try:
            return receive(*args)
        except Exception as exc:
            if not self.transport.dialect.stale_plan(exc):
                raise
            log.debug("receiving from %s: the queue table changed under a prepared statement; prepared again", self.queue.address)
        return receive(*args)

    def _receive_batches(self) -> bool:
        """One receive task at batch_size > 1: batch after batch while they come back full (no hop
        back to the loop's thread between them); False when the last one found nothing."""
        taken = self.receive_batch()
        while taken >= self.batch_size and not self._stop.is_set():
            taken = self.receive_batch()
        return taken > 0

    def _isolated_batch_done(self, failures: int) -> None:
        """A failure starts the cool-down again; an isolated batch without one counts it down."""
        with self._lock:
            self._isolated_left = self.isolation_cooldown if failures else max(self._isolated_left - 1, 0)

    # -- the loop ---------------------------------------------------------------------
    def _peek(self) -> int:
        try:
            link = self._connection()
            with link.connection.begin():
                waiting = self.queue.peek(link.driver)
        except Exception:
            self._discard_connection()
            raise
        self._failing_since = None
        return waiting

    def _database_failed(self, exc: Exception) -> None:
        """Log, wait a peek delay; raise PumpFailed once failures have lasted the failure timeout."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        failing_for = now - self._failing_since
        if failing_for >= self.failure_timeout:
            log.critical(
                "receiving from %s has failed for %.1f s (failure timeout %.1f s): stopping: %s",
                self.queue.address,
                failing_for,
                self.failure_timeout,
                exc,
            )
            raise PumpFailed(f"receiving from {self.queue.address} failed for {failing_for:.1f} s: {exc}") from exc
        log.warning(
            "receiving from %s failed (%s: %s); retrying in %.1f s",
            self.queue.address,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
            self.peek_delay,
        )
        self._stop.wait(self.peek_delay)

    def run(self) -> None:
        """Run until stop(); in-flight messages finish before it returns.

        Raises PumpFailed when the database has failed for the whole failure timeout (also kept
        in `self.failure`, for a pump run by start())."""
        mover = purger = None
        if self.recoverability.delayed_retries and self.endpoint is not None:  # delayed retries come back through it
            mover = DueMover(self.transport, self.endpoint, interval=self.peek_delay)
            mover.start()
        try:
            purger = self._purge_expired_at_start()
            self._run()
        except PumpFailed as exc:
            self.failure = exc
            raise
        finally:
            for loop in (mover, purger):
                if loop is not None:
                    loop.stop()
            self.close()

    def _purge_expired_at_start(self) -> ExpiredPurger | None:
        """The purge of expired messages the release's pump does unasked (Profile.pump_purge), or the
        one asked for (`purge_expired`): once before receiving, or (3.1) periodically from the start."""
        when, wanted = self.transport.profile.pump_purge, self.settings.purge_expired
        if wanted is False or (wanted is None and when is PumpPurge.CONFIGURED):
            return None
        purger = ExpiredPurger(self.queue, self.settings.purge_interval)
        if when is PumpPurge.PERIODIC:
            purger.start()
            return purger
        purger.purge_once()
        return None

    def close(self) -> None:
        """Return the connections the pump's threads held."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        if self.tenants is not None:
            self.tenants.dispose()

    def _run(self) -> None:
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="sqlts-receive") as pool:
            while not self._stop.is_set():
                try:
                    self._peek_and_receive(pool)
                except Exception as exc:  # the database's failure (handler failures never reach here)
                    self._database_failed(exc)

    def _peek_and_receive(self, pool: ThreadPoolExecutor) -> None:
        waiting = self._peek()
        if waiting <= 0:
            self._stop.wait(self.peek_delay)
            return
        # receive mode: up to `concurrency` tasks (each one message, or one batch); back to peek
        # when one finds nothing
        receive = self.receive_one if self.batch_size == 1 else self._receive_batches
        while not self._stop.is_set():
            tasks = -(-max(waiting, 1) // self.batch_size)  # enough for what waits
            batch = [pool.submit(receive) for _ in range(min(self.concurrency, tasks))]
            wait(batch)  # every task ends before a failure is raised
            if not all([f.result() for f in batch]):  # a list: every result read, so no failure is skipped
                return
            waiting = self.peek_batch_size * self.batch_size

    def start(self) -> threading.Thread:
        """Run in a thread of its own (a daemon); `stop` ends it."""
        return self._daemon.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop taking new messages and wait for those in flight."""
        self._daemon.stop(timeout)


class _Daemon:
    """A loop in a daemon thread of its own until stop() (the loop waits on `stopping`): how the pump,
    its due mover and its purger start and stop, written once."""

    def __init__(self, name: str, loop: Callable[[], None]):
        self.name, self.loop = name, loop
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> threading.Thread:
        self.thread = threading.Thread(target=self.loop, name=self.name, daemon=True)
        self.thread.start()
        return self.thread

    def stop(self, timeout: float | None = None) -> None:
        """Set `stopping` and wait for the thread (at most `timeout` seconds)."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout)


class ExpiredPurger:
    """The pump's purge of expired messages, as upstream's ExpiredMessagesPurger: each batch committed
    on a connection of its own (Queue.purge_expired()); a failure is logged, the pump goes on."""

    def __init__(self, queue: Queue, interval: float = DEFAULT_PURGE_INTERVAL):
        self.queue = queue
        self.interval = interval
        self.purged = 0
        self._daemon = _Daemon("sqlts-expired-purger", self.run)
        self._stop = self._daemon.stopping

    def purge_once(self) -> int:
        try:
            purged = self.queue.purge_expired()
        except Exception:  # upstream logs it and receives all the same
            log.warning("purging expired messages from %s failed", self.queue.address, exc_info=True)
            return 0
        self.purged += purged
        log.debug("%d expired messages were purged from %s", purged, self.queue.address)
        return purged

    def run(self) -> None:
        while not self._stop.is_set():
            self.purge_once()
            self._stop.wait(self.interval)

    def start(self) -> threading.Thread:
        return self._daemon.start()

    def stop(self, timeout: float | None = None) -> None:
        self._daemon.stop(timeout)


class DueMover:
    """The move-due loop of native delayed delivery: batches while full, else waits for the next due time."""

    def __init__(self, transport: Transport, endpoint: EndpointTables, *, interval: float = 1.0, batch_size: int = 100):
        self.transport = transport
        self.endpoint = endpoint
        self.interval = interval
        self.batch_size = batch_size
        self._daemon = _Daemon("sqlts-due-mover", self.run)
        self._stop = self._daemon.stopping
        self.moved = 0

    def move_once(self) -> int:
        """Move up to `batch_size` due messages to the input queue, in one transaction; how many moved."""
        with self.transport.engine.begin() as conn:
            moved = self.endpoint.move_due(conn, self.batch_size)
        self.moved += moved
        return moved

    def run(self) -> None:
        """Move due messages until `stop`: at once again while batches come back full, else after `interval` seconds."""
        while not self._stop.is_set():
            try:
                if self.move_once() >= self.batch_size:
                    continue  # more are due: no wait
            except Exception:  # keep the loop alive; the next round retries
                log.exception("moving due delayed messages of %s failed", self.endpoint.input)
            self._stop.wait(self.interval)

    def start(self) -> threading.Thread:
        """Run in a thread of its own (a daemon); `stop` ends it."""
        return self._daemon.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the loop and wait for its thread (at most `timeout` seconds)."""
        self._daemon.stop(timeout)
