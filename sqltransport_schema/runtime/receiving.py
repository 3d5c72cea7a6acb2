"""The pump's one receive path (docs/runtime.md, "The message pump"): take or lock messages in the
shared database, then for each one the steps (recoverability's decision, the tenant's database, the
outbox's check, the handler, the outbox's capture and store), then the receive's closing writes and
its commit. Tenant databases and the outbox are steps that compose, written once here; what the outbox
writes and dispatches is runtime/outbox.py's (PumpOutbox), what happens to a failed message
runtime/recoverability.py's. Public inside the package: the pump's API is runtime/pump.py.

Three ways to take a batch, one path:
- taken: plain, one database, optimistic: deleted by the receive's statement (receive, take_batch); a
  handler's failure rolls the whole transaction back (_RolledBack), every message back at its place;
- locked without savepoints: the outbox, optimistic: the same on a failure, the lock joined with the rows;
- locked with a savepoint per message: isolated batches, and always with tenant databases: a failure
  undoes its own message's writes, the message stays at its place, the others commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .recoverability import HANDLE, Recoverability
from .transport import driver_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

    from .outbox import OutboxRecord, Outgoing, OutgoingOperation, PumpOutbox
    from .tenants import TenantDatabases
    from .transport import DriverConnection, Message, Queue, Transport

__all__ = ["Context", "Link", "TenantLink", "Receiver", "Batch", "RolledBack"]


class Link:
    """One receive task's connection: the SQLAlchemy Connection that holds the transaction, its driver
    connection bound for the runtime, and a plain driver cursor for handlers (made once)."""

    __slots__ = ("connection", "driver", "_cursor")

    def __init__(self, connection: Connection):
        self.connection = connection
        self.driver = driver_of(connection)
        self._cursor = None

    @property
    def cursor(self) -> Any:
        if self._cursor is None:
            self._cursor = self.driver.connection.cursor()
        return self._cursor


class TenantLink:
    """A handler's connection to its tenant's database (docs/tenants.md), in a transaction of its own
    begun on first use: a message the pump moves to the error queue or forwards, or a duplicate the
    outbox settles, never connects. The receive commits it before the shared database's."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._connection: Connection | None = None
        self._transaction: Any = None
        self._link: Link | None = None

    def _open(self) -> Link:
        if self._link is None:
            self._connection = self.engine.connect()
            self._transaction = self._connection.begin()
            self._link = Link(self._connection)
        return self._link

    @property
    def connection(self) -> Connection:
        return self._open().connection

    @property
    def driver(self) -> DriverConnection:
        return self._open().driver

    @property
    def cursor(self) -> Any:
        return self._open().cursor

    def commit(self) -> None:
        if self._transaction is not None:
            self._transaction.commit()

    def close(self) -> None:
        """Roll back what was not committed, and give the connection back."""
        if self._connection is not None:
            self._connection.close()
            self._connection = self._transaction = self._link = None


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


Handler = Callable[["Message", Context], None]


class RolledBack(Exception):
    """A handler failed in a batch without savepoints: its whole transaction rolls back (the pump runs
    the batch again isolated)."""


@dataclass
class Batch:
    """One receive's messages and what became of them."""

    savepoints: bool  # each message after its own savepoint (else a failure rolls everything back)
    tenants: bool = False  # each handler in its tenant's database
    locked: bool = False  # locked, not taken: what is gone is deleted before the commit
    messages: list[Message] = field(default_factory=list)
    expired: list[Any] = field(default_factory=list)  # positions of expired messages dropped with the batch
    records: dict[str, OutboxRecord] = field(default_factory=dict)  # outbox rows read with the lock
    done: list[Message] = field(default_factory=list)  # handled or moved: gone with the commit
    outcomes: list[str | None] = field(default_factory=list)
    settled: list[Any] = field(default_factory=list)  # positions deleted in the receive's transaction
    stored: list[tuple[Message, list[OutgoingOperation], Engine | None]] = field(default_factory=list)  # to dispatch
    stored_ids: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)  # message ids whose rows were stored as they were handled
    redispatch: dict[str, list[OutgoingOperation]] = field(default_factory=dict)  # rows handled before, not dispatched
    failures: int = 0
    took: int | None = None  # how many stored messages the outbox's dispatch took with the commit

    def gone(self, message: Message, outcome: str | None, settle: bool = True) -> None:
        self.done.append(message)
        self.outcomes.append(outcome)
        if settle:
            self.settled.append(message.order)

    @property
    def count(self) -> int:
        return len(self.messages) + len(self.expired)


class Receiver:
    """The receive path every pump runs (module docstring), with its counts."""

    def __init__(
        self,
        transport: Transport,
        queue: Queue,
        handler: Handler,
        recoverability: Recoverability,
        *,
        tenants: TenantDatabases | None = None,
        outbox: PumpOutbox | None = None,
    ):
        self.transport = transport
        self.queue = queue
        self.handler = handler
        self.recoverability = recoverability
        self.tenants = tenants
        self.outbox = outbox
        self._lock = threading.Lock()
        self.processed = 0  # handled and committed
        self.failed = 0  # moved to the error queue after their retries

    def receive(self, link: Link, size: int, isolated: bool) -> tuple[int, int]:
        """Up to `size` messages in one transaction of the shared database: (how many were taken or
        tried, 0 when the queue was empty; how many failed). Raises RolledBack when a handler failed
        in a batch without savepoints."""
        batch = Batch(savepoints=isolated or self.tenants is not None, tenants=self.tenants is not None)
        with link.connection.begin():
            self._take(link, size, batch)
            for message in batch.messages:
                self._one(link, message, batch)
            if self.outbox is not None:
                self._closing_with_outbox(link, batch)
            elif batch.locked:
                self.queue.delete_locked(link.driver, batch.settled + batch.expired)
        if self.outbox is not None:
            self.outbox.after_commit(self.queue, link, batch)
        self.recoverability.forget(batch.done)
        with self._lock:
            self.processed += batch.outcomes.count("processed")
            self.failed += batch.outcomes.count("failed")
        return batch.count, batch.failures

    def _closing_with_outbox(self, link: Link, batch: Batch) -> None:
        """The outbox's closing writes. An optimistic batch stores its rows together there: when that
        fails, a row may be one the database cannot take (a header it refuses), so the batch runs
        again isolated, each row stored after its message's savepoint, where its failure is that
        message's attempt (a batch of one: counted here)."""
        assert self.outbox is not None
        try:
            self.outbox.closing(self.queue, link, batch)
        except Exception as exc:
            if batch.savepoints or batch.tenants or not batch.stored:
                raise
            if len(batch.stored) == 1:
                self.recoverability.failed(batch.stored[0][0], exc)
            raise RolledBack() from exc

    def _take(self, link: Link, size: int, batch: Batch) -> None:
        if self.outbox is not None and self.tenants is None:
            batch.locked = True
            batch.messages, batch.expired, batch.records = self.outbox.lock(self.queue, link, size)
        elif batch.savepoints:
            batch.locked = True
            batch.messages, batch.expired = self.queue.lock_batch(link.driver, size)
        elif size == 1:
            message = self.queue.receive(link.driver)
            batch.messages = [message] if message is not None else []
        else:
            batch.messages, batch.expired = self.queue.take_batch(link.driver, size)

    def _one(self, link: Link, message: Message, batch: Batch) -> None:
        """One message: its next step; if that is its handler, in its tenant's database (if any),
        with the outbox's check and capture (if on). Whatever raises counts as an attempt."""
        step = self.recoverability.step(message)
        if step.kind != HANDLE:
            batch.gone(message, self.recoverability.move(link.driver, message, step))
            return
        tenant: TenantLink | None = None
        context: Context | None = None
        outgoing: Outgoing | None = None
        outbox = self.outbox
        try:
            if self.tenants is not None:
                tenant = self.tenants.link(message)
            if outbox is not None:
                if outbox.handled_before(message, batch, tenant):
                    batch.gone(message, None)
                    return
                outgoing = outbox.outgoing()
            savepoint = self.queue.savepoint if batch.savepoints else None
            context = Context(tenant or link, self.transport, self.queue, savepoint, outgoing, link if tenant else None)
            self.handler(message, context)
            if outbox is not None and outgoing is not None:
                outbox.store(context, tenant, message, outgoing.operations, batch)
            if tenant is not None:
                tenant.commit()
        except Exception as exc:
            self.recoverability.failed(message, exc)
            batch.failures += 1
            if not batch.savepoints:
                raise RolledBack() from exc
            if context is not None and context.saved:
                self.queue.rollback_to_savepoint(link.driver)  # a database failure here fails the batch
            return
        finally:
            if tenant is not None:
                tenant.close()
        if outbox is not None and outgoing is not None:
            outbox.stored(message, outgoing.operations, batch, tenant)
        else:
            batch.gone(message, "processed")
