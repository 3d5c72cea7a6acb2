"""Where the pump and a receive it delegates to (the outbox's, runtime/outbox.py) meet: the
connection a receive task holds (`Link`) and what the pump lends that receive (`PumpSeam`), so the
outbox never reaches into the pump's own state. Public inside the package, not part of the API."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .transport import driver_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

    from .transport import DriverConnection, Message, Queue, Transport


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


@dataclass(frozen=True)
class PumpSeam:
    """What the pump lends a receive that runs in place of its own: its transport and queue, the
    handler's Context, and the three steps whose bookkeeping (retries, the error queue, counts)
    stays the pump's.

    context(link, savepoint, outgoing) -> the handler's Context on `link`;
    handle(message, context) -> "processed", "failed" (moved to the error queue) or None (poison, forwarded);
    failed(message, exc, context): a handler's failure counted and its writes undone (back to its
    savepoint, or out of the whole transaction when it has none);
    committed(messages, outcomes): after the commit, the messages are gone: count them;
    tenant(message): the handler's connection to the tenant database its headers choose (a
    TenantLink), None for a pump of one database; failed() then only counts (the receive closes
    that tenant's transaction)."""

    transport: Transport
    queue: Queue
    context: Callable[..., Any]
    handle: Callable[[Message, Any], str | None]
    failed: Callable[[Message, Exception, Any], None]
    committed: Callable[[list[Message], list[str | None]], None]
    tenant: Callable[[Message], TenantLink] | None = None
