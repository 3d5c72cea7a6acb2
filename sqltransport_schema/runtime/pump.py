"""The message pump of seed 004: peek, then up to N concurrent receives, back to peek when one finds nothing.

Each receive runs in its own transaction on its own connection; the handler gets
that connection, so its writes commit with the receive. A handler exception rolls
the receive back (the message returns to the queue); after the immediate retries
the message moves to the error queue with the exception in its headers, as
NServiceBus does. Poison headers go to the error queue unchanged.

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
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from . import wire
from .transport import EndpointTables, Message, Queue, Transport

log = logging.getLogger("sqltransport_schema.pump")

RECOMMENDED_PEEK_DELAY = (0.1, 10.0)
DEFAULT_FAILURE_TIMEOUT = 30.0  # the transport's circuit breaker waits as long before a critical error


class PumpFailed(Exception):
    """The database could not be reached (or refused every receive) for the whole failure timeout."""


@dataclass
class Context:
    """What a handler gets besides the message: the receive's connection and transport."""

    connection: Connection
    transport: Transport
    queue: Queue

    def send(self, address: str, body: bytes | None, headers: dict[str, str]) -> str:
        """Send inside the receive's transaction: it leaves only if the receive commits."""
        return self.transport.address_queue(address).send(self.connection, body, headers)


Handler = Callable[[Message, Context], None]


class MessagePump:
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
    ):
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
            return self._receive_in_transaction()
        except _RolledBack:
            return True
        except Exception:
            self._discard_connection()
            raise

    def _discard_connection(self) -> None:
        """Drop this thread's connection after a database failure; the next call connects anew."""
        conn = getattr(self._local, "connection", None)
        self._local.connection = None
        if conn is not None:
            with self._lock:
                if conn in self._connections:
                    self._connections.remove(conn)
            try:
                conn.invalidate()  # never back to the pool: its state is unknown
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def _connection(self) -> Connection:
        """This thread's own connection, held for the pump's life (a pool checkout per message costs more than the SQL)."""
        conn = getattr(self._local, "connection", None)
        if conn is None or conn.closed or conn.invalidated:
            conn = self._local.connection = self.transport.engine.connect()
            with self._lock:
                self._connections.append(conn)
        return conn

    def _receive_in_transaction(self) -> bool:
        conn = self._connection()
        with conn.begin():
            message = self.queue.receive(conn)
            if message is None:
                return False
            try:
                self._dispatch(message, conn)
            except Exception as exc:  # the handler's failure: roll back, count it
                self._record_failure(message, exc)
                raise _RolledBack() from exc
        self._forget(message)
        return True

    def _dispatch(self, message: Message, conn: Connection) -> None:
        if message.poison is not None:
            log.error("message %s has unreadable headers (%s): moved to %s unchanged", message.id, message.poison, self.error_queue)
            self.error_queue.send(conn, message.body, message.raw_headers, message_id=message.id)
            return
        forward = self.endpoint.forward_destination(message) if self.endpoint else None
        if forward is not None:
            headers = {k: v for k, v in message.headers.items() if k != wire.FORWARD_DESTINATION}
            forward.send(conn, message.body, headers, message_id=message.id)
            return
        failures = self._failures.get(message.id, 0)
        if failures > self.immediate_retries:
            headers = wire.error_headers(message.headers, self._errors[message.id], self.queue.address)
            self.error_queue.send(conn, message.body, headers, message_id=message.id)
            log.error("message %s failed %d times: moved to %s", message.id, failures, self.error_queue)
            with self._lock:
                self.failed += 1
            return
        self.handler(message, Context(conn, self.transport, self.queue))
        with self._lock:
            self.processed += 1

    def _record_failure(self, message: Message, exc: BaseException) -> None:
        with self._lock:
            self._failures[message.id] = self._failures.get(message.id, 0) + 1
            self._errors[message.id] = exc
        log.warning("handler failed on message %s (attempt %d): %s", message.id, self._failures[message.id], exc)

    def _forget(self, message: Message) -> None:
        with self._lock:
            self._failures.pop(message.id, None)
            self._errors.pop(message.id, None)

    # -- the loop ---------------------------------------------------------------------
    def _peek(self) -> int:
        try:
            conn = self._connection()
            with conn.begin():
                waiting = self.queue.peek(conn)
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
        # receive mode: up to `concurrency` tasks; back to peek when one finds nothing
        while not self._stop.is_set():
            batch = [pool.submit(self.receive_one) for _ in range(min(self.concurrency, max(waiting, 1)))]
            wait(batch)  # every task ends before a failure is raised
            if not all([f.result() for f in batch]):  # a list: every result read, so no failure is skipped
                return
            waiting = self.peek_batch_size

    def start(self) -> threading.Thread:
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
        with self.transport.engine.begin() as conn:
            moved = self.endpoint.move_due(conn, self.batch_size)
        self.moved += moved
        return moved

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.move_once() >= self.batch_size:
                    continue  # more are due: no wait
            except Exception:  # keep the loop alive; the next round retries
                log.exception("moving due delayed messages of %s failed", self.endpoint.input)
            self._stop.wait(self.interval)

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="sqlts-due-mover", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        if getattr(self, "_thread", None) is not None:
            self._thread.join(timeout)
