"""The message pump of seed 004: peek, then up to N concurrent receives, back to peek when one finds nothing.

Each receive runs in its own transaction on its own connection; the handler gets
that connection, so its writes commit with the receive. A handler exception rolls
the receive back (the message returns to the queue); after the immediate retries
the message moves to the error queue with the exception in its headers, as
NServiceBus does. Poison headers go to the error queue unchanged.

With batch_size=N each receive task takes (or locks) up to N messages in one transaction and commits once:
one disk flush per batch instead of per message; a crash before it puts all N back (at-least-once,
as ever). An optimistic batch (the default) is taken in one statement and its handlers run
without savepoints; if one fails, the whole batch rolls back (every message back at its place) and
runs again isolated: locked, not taken, each handler after its own savepoint, so a
failure undoes that handler's writes alone and leaves its message in the queue (at its place, for
the retries and the error queue as above) while the others commit together. After a failure the
pump's next `isolation_cooldown` batches run isolated too, so a poison message does not make every
batch run twice. docs/runtime.md says when to choose a batch size.

With outbox=True (docs/outbox.md) the endpoint's outbox table records each message handled:
runtime/outbox.py receives in place of the two loops below (a message already handled is not
handled again; a handler's sends and publishes are stored in its transaction, dispatched after it),
optimistic or isolated as they are.

A failure of the database itself (a dropped connection, a failover, a restart) does not
end the pump: the connection is discarded, the pump waits a peek delay and peeks again on
a new one. Only when every attempt has failed for `failure_timeout` seconds does `run()`
raise PumpFailed, as the transport's circuit breaker raises a critical error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

from .. import errors, wire
from .outbox import OutboxTable, Outgoing, pump_outbox
from .receiving import Link, PumpSeam, TenantLink
from .tenants import TenantDatabase, TenantDatabases
from .transport import DriverConnection, EndpointTables, Message, Queue, Transport

__all__ = [
    "MessagePump",
    "Context",
    "DueMover",
    "PumpFailed",
    "RECOMMENDED_PEEK_DELAY",
    "DEFAULT_FAILURE_TIMEOUT",
    "ISOLATIONS",
    "DEFAULT_ISOLATION_COOLDOWN",
]

log = logging.getLogger("sqltransport_schema.pump")
T = TypeVar("T")

RECOMMENDED_PEEK_DELAY = (0.1, 10.0)
DEFAULT_FAILURE_TIMEOUT = 30.0  # the transport's circuit breaker waits as long before a critical error
ISOLATIONS = ("optimistic", "savepoint")
DEFAULT_ISOLATION_COOLDOWN = 10  # batches run isolated after a failure, before optimistic ones again


class PumpFailed(errors.Failed):
    """The database could not be reached (or refused every receive) for the whole failure timeout."""


class Context:
    """What a handler gets besides the message: the receive's connection, transport and queue.

    `connection` is the receive's SQLAlchemy Connection; `cursor` a driver (DBAPI) cursor of the
    same connection and transaction, for the handler's own statements without SQLAlchemy's
    per-statement work (the driver's paramstyle); `driver` the same connection bound for the
    runtime's calls (`queue.send(context.driver, ...)`, as `send` does). With tenant databases
    (`tenant_database=`, docs/tenants.md) the three are the tenant database's, in a transaction
    of the handler's own, while `send` and `publish` go through the shared database's receive.

    In a batch that isolates each message (isolation="savepoint"; with "optimistic", a batch run
    again after a failure and the cool-down's batches; every batch with tenant databases) the first use of
    `connection`, `cursor`, `driver` or `send` takes this message's savepoint (with tenant databases:
    the first send, in the shared database), so a failure of the handler undoes its own writes alone;
    a handler that never touches them wrote nothing and needs none. With the pump's outbox, `outgoing`
    captures what send and publish would send (stored in the outbox row, dispatched after the commit)."""

    def __init__(
        self,
        link: Link | TenantLink,
        transport: Transport,
        queue: Queue,
        savepoint: Callable[[DriverConnection], None] | None = None,
        outgoing: Outgoing | None = None,
        sending: Link | None = None,
    ):
        self._link = link
        self._connection = link.connection if isinstance(link, Link) else None  # a tenant's connects on first use
        self.transport = transport
        self.queue = queue
        self._savepoint = savepoint
        self.saved = False  # a savepoint was taken for this message
        self.outgoing = outgoing
        self._sending = sending  # the shared database's receive, when the handler's link is a tenant's

    @property
    def _saved_on(self) -> Link | TenantLink:
        """The connection whose savepoint isolates this message: the one its sends go through."""
        return self._sending if self._sending is not None else self._link

    def _isolate(self, link: Link | TenantLink) -> Link | TenantLink:
        if self._savepoint is not None and not self.saved and link is self._saved_on:
            self._savepoint(link.driver)
            self.saved = True
        return link

    @property
    def connection(self) -> Connection:
        """The connection of the receive's transaction (in an isolated batch: after this message's savepoint)."""
        return self._isolate(self._link).connection

    @property
    def cursor(self) -> Any:
        """A driver cursor in the receive's transaction (in an isolated batch: after this message's savepoint)."""
        return self._isolate(self._link).cursor

    @property
    def driver(self) -> DriverConnection:
        """The receive's driver connection for runtime calls (in an isolated batch: after this message's savepoint)."""
        return self._isolate(self._link).driver

    @property
    def sending(self) -> DriverConnection:
        """The driver connection sends, forwards and moves to the error queue go through: the receive's
        (the shared database's, with tenant databases), after this message's savepoint where it takes one."""
        return self._isolate(self._saved_on).driver

    def send(self, address: str, body: bytes | None, headers: dict[str, str]) -> str:
        """Send inside the receive's transaction: it leaves only if the receive commits (with the
        outbox: once the handler's transaction has committed)."""
        if self.outgoing is not None:
            return self.outgoing.send(address, body, headers)
        return self.transport.address_queue(address).send(self.sending, body, headers)

    def publish(self, topics: str | list[str], body: bytes | None, headers: dict[str, str]) -> None:
        """A copy to every subscriber of the topics, as send: only if the receive commits (with the
        outbox: the subscribers are those when the handler's row is dispatched)."""
        if self.outgoing is not None:
            self.outgoing.publish(topics, body, headers)
        else:
            self.transport.publish(self.sending, topics, body, headers)


Handler = Callable[[Message, Context], None]


class MessagePump:
    """Receives from one queue and calls `handler(message, context)` for each message, as the
    transport's pump does: peek, then up to `concurrency` receives at once, each in its own
    transaction (or up to `batch_size` messages per transaction, each after a savepoint). A handler
    exception rolls the receive back; after `immediate_retries` the message goes to `error_queue`
    with the exception in its headers, and unreadable headers go there unchanged. With `endpoint`,
    delayed messages moved to the input queue are forwarded to their destination. A database
    failure is retried every `peek_delay` seconds, and ends the pump (PumpFailed) only after
    `failure_timeout` seconds in a row."""

    def __init__(
        self,
        transport: Transport,
        queue: Queue,
        handler: Handler,
        *,
        concurrency: int = 1,
        peek_delay: float = 1.0,
        peek_batch_size: int | None = None,
        immediate_retries: int = 5,
        error_queue: str = "error",
        endpoint: EndpointTables | None = None,
        failure_timeout: float = DEFAULT_FAILURE_TIMEOUT,
        batch_size: int = 1,
        isolation: str = "optimistic",
        isolation_cooldown: int = DEFAULT_ISOLATION_COOLDOWN,
        outbox: bool | str | OutboxTable = False,
        tenant_database: TenantDatabase | None = None,
    ):
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
        self.immediate_retries = immediate_retries
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
        self.tenants = TenantDatabases(tenant_database) if tenant_database is not None else None
        self.outbox = pump_outbox(transport, input_name, outbox, tenants=self.tenants is not None) if outbox else None
        tenant = self.tenants.link if self.tenants is not None else None
        self._seam = PumpSeam(transport, queue, self._context, self._dispatch, self._handler_failed, self._forget, tenant)
        self._failing_since: float | None = None  # monotonic time of the first failure in a row
        self._stop = threading.Event()
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._failures: dict[str, int] = {}  # message id -> handler failures so far
        self._errors: dict[str, BaseException] = {}  # message id -> the last one
        self._lock = threading.Lock()
        self.processed = 0
        self.failed = 0
        self.failure: PumpFailed | None = None

    # -- one message ------------------------------------------------------------------
    def receive_one(self) -> bool:
        """Receive and handle one message in one transaction; False when the queue was empty.

        A handler failure rolls the transaction back (the message is back in the queue) and
        still counts as a message taken, so the pump keeps receiving.
        """
        try:
            return self._replanning(self._receive_in_transaction)
        except _RolledBack:
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

    def _receive_in_transaction(self) -> bool:
        link = self._connection()
        if self.tenants is not None and self.outbox is None:
            return self._receive_tenants(self.tenants, link, 1) > 0
        if self.outbox is not None:
            return self.outbox.receive(self._seam, link, 1, isolated=True)[0] > 0
        with link.connection.begin():
            message = self.queue.receive(link.driver)
            if message is None:
                return False
            try:
                outcome = self._dispatch(message, Context(link, self.transport, self.queue))
            except Exception as exc:  # the handler's failure: roll back, count it
                self._record_failure(message, exc)
                raise _RolledBack() from exc
        self._forget([message], [outcome])
        return True

    # -- a batch ----------------------------------------------------------------------
    def receive_batch(self) -> int:
        """Receive and handle up to batch_size messages in one transaction; how many were taken
        off the queue or tried (0: the queue was empty).

        Optimistic (the default): the batch is taken in one statement and the handlers run without
        savepoints; the first handler failure rolls the whole batch back, and the batch runs again
        isolated. Isolated (isolation="savepoint", the re-run, and the `isolation_cooldown` batches
        after a failure): the batch is locked, not taken, each handler runs after its own savepoint
        (Context), and each message handled is deleted before the one commit; a failure rolls back to
        its savepoint and leaves its message where it was, so the commit puts it back at the head of
        the queue and the others' effects commit. A failure of the database rolls back all of them.
        """
        try:
            if self.isolation == "optimistic" and self._isolated_left <= 0:
                try:
                    return self._replanning(self._receive_batch_in_transaction, False)
                except _RolledBack:
                    with self._lock:
                        self.reruns += 1
                        self._isolated_left = self.isolation_cooldown
                    log.info(
                        "a handler failed in an optimistic batch of %s: rolled back, running it again isolated (cool-down %d batches)",
                        self.queue.address,
                        self.isolation_cooldown,
                    )
            return self._replanning(self._receive_batch_in_transaction, True)
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

    def _receive_batch_in_transaction(self, isolated: bool) -> int:
        link = self._connection()
        if self.tenants is not None and self.outbox is None:
            return self._receive_tenants(self.tenants, link, self.batch_size)
        if self.outbox is not None:
            taken, failures = self.outbox.receive(self._seam, link, self.batch_size, isolated)
            if isolated and taken:
                self._isolated_batch_done(failures)
            return taken
        done: list[Message] = []
        outcomes: list[str | None] = []
        savepoint = self.queue.savepoint if isolated else None
        failures = 0
        with link.connection.begin():
            # optimistic: taken in one statement (a failure rolls every message back to its place);
            # isolated: locked, and what was handled deleted at the end (a failed one stays at its place)
            take = self.queue.lock_batch if isolated else self.queue.take_batch
            messages, expired = take(link.driver, self.batch_size)
            for message in messages:
                context = Context(link, self.transport, self.queue, savepoint)
                try:
                    outcomes.append(self._dispatch(message, context))
                except Exception as exc:
                    self._handler_failed(message, exc, context)
                    failures += 1
                    continue
                done.append(message)
            if expired:
                log.debug("dropped %d expired message(s) from %s", len(expired), self.queue.address)
            if isolated:
                self.queue.delete_locked(link.driver, [m.order for m in done] + expired)
        self._forget(done, outcomes)
        if isolated and messages:
            self._isolated_batch_done(failures)
        return len(messages) + len(expired)

    def _context(
        self,
        link: Link | TenantLink,
        savepoint: Callable[[DriverConnection], None] | None = None,
        outgoing: Outgoing | None = None,
        sending: Link | None = None,
    ) -> Context:
        """The handler's Context on `link` (the seam's, for a receive that runs in place of the pump's)."""
        return Context(link, self.transport, self.queue, savepoint, outgoing, sending)

    def _receive_tenants(self, tenants: TenantDatabases, link: Link, size: int) -> int:
        """Tenant databases without the outbox (docs/tenants.md): up to `size` messages locked in the
        shared database; each handler runs in its tenant's own transaction, committed before the
        shared one deletes what was handled (a crash between the two handles a message again: the
        outbox makes the pair exactly-once). A failure rolls back its tenant's transaction and its
        sends (its savepoint in the shared database); its message stays at its place."""
        done: list[Message] = []
        outcomes: list[str | None] = []
        with link.connection.begin():
            messages, expired = self.queue.lock_batch(link.driver, size)
            for message in messages:
                tenant = None
                context = Context(link, self.transport, self.queue, self.queue.savepoint)
                try:
                    if message.headers is not None:
                        tenant = tenants.link(message)
                        context = Context(tenant, self.transport, self.queue, self.queue.savepoint, sending=link)
                    outcome = self._dispatch(message, context)
                    if tenant is not None:
                        tenant.commit()
                except Exception as exc:
                    self._handler_failed(message, exc, context)
                    continue
                finally:
                    if tenant is not None:
                        tenant.close()
                done.append(message)
                outcomes.append(outcome)
            self.queue.delete_locked(link.driver, [m.order for m in done] + expired)
        self._forget(done, outcomes)
        return len(messages) + len(expired)

    def _handler_failed(self, message: Message, exc: Exception, context: Context) -> None:
        """A handler's failure in a batch: count it, then undo its writes: in an optimistic batch
        (no savepoint) the whole batch's, by raising _RolledBack out of its transaction (receive_batch
        runs it again isolated); in an isolated one back to its savepoint, the others going on (with
        tenant databases the receive also closes the tenant's transaction, uncommitted)."""
        self._record_failure(message, exc)
        if context._savepoint is None:
            raise _RolledBack() from exc
        if context.saved:
            self.queue.rollback_to_savepoint(context._saved_on.driver)  # a database failure here fails the batch

    def _isolated_batch_done(self, failures: int) -> None:
        """A failure starts the cool-down again; an isolated batch without one counts it down."""
        with self._lock:
            self._isolated_left = self.isolation_cooldown if failures else max(self._isolated_left - 1, 0)

    def _dispatch(self, message: Message, context: Context) -> str | None:
        """Handle one message inside its transaction: "processed", "failed" (moved to the error queue
        after its retries) or None (poison or forwarded)."""
        if message.headers is None:  # unreadable: message.poison says why
            log.error("message %s has unreadable headers (%s): moved to %s unchanged", message.id, message.poison, self.error_queue)
            self.error_queue.send(context.sending, message.body, message.raw_headers, message_id=message.id)
            return None
        forward = self.endpoint.forward_destination(message) if self.endpoint else None
        if forward is not None:
            headers = {k: v for k, v in message.headers.items() if k != wire.FORWARD_DESTINATION}
            forward.send(context.sending, message.body, headers, message_id=message.id)
            return None
        failures = self._failures.get(message.id, 0)
        if failures > self.immediate_retries:
            headers = wire.error_headers(message.headers, self._errors[message.id], self.queue.address)
            self.error_queue.send(context.sending, message.body, headers, message_id=message.id)
            log.error("message %s failed %d times: moved to %s", message.id, failures, self.error_queue)
            return "failed"
        self.handler(message, context)
        return "processed"

    def _record_failure(self, message: Message, exc: BaseException) -> None:
        with self._lock:
            self._failures[message.id] = self._failures.get(message.id, 0) + 1
            self._errors[message.id] = exc
        log.warning("handler failed on message %s (attempt %d): %s", message.id, self._failures[message.id], exc)

    def _forget(self, committed: list[Message], outcomes: list[str | None]) -> None:
        """After the commit: the messages are gone; count them."""
        with self._lock:
            for message in committed:
                self._failures.pop(message.id, None)
                self._errors.pop(message.id, None)
            self.processed += outcomes.count("processed")
            self.failed += outcomes.count("failed")

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
        try:
            self._run()
        except PumpFailed as exc:
            self.failure = exc
            raise
        finally:
            self.close()

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
        thread = threading.Thread(target=self.run, name="sqlts-pump", daemon=True)
        thread.start()
        self._thread = thread
        return thread

    def stop(self, timeout: float | None = None) -> None:
        """Stop taking new messages and wait for those in flight."""
        self._stop.set()
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join(timeout)


class _RolledBack(Exception):
    """The handler failed and its receive was rolled back."""


class DueMover:
    """The move-due loop of native delayed delivery: batches while full, else waits for the next due time."""

    def __init__(self, transport: Transport, endpoint: EndpointTables, *, interval: float = 1.0, batch_size: int = 100):
        self.transport = transport
        self.endpoint = endpoint
        self.interval = interval
        self.batch_size = batch_size
        self._stop = threading.Event()
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
        self._thread = threading.Thread(target=self.run, name="sqlts-due-mover", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = None) -> None:
        """Stop the loop and wait for its thread (at most `timeout` seconds)."""
        self._stop.set()
        if getattr(self, "_thread", None) is not None:
            self._thread.join(timeout)
