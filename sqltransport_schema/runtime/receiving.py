"""Where the pump and a receive it delegates to (the outbox's, runtime/outbox.py) meet: the
connection a receive task holds (`Link`) and what the pump lends that receive (`PumpSeam`), so the
outbox never reaches into the pump's own state. Public inside the package, not part of the API."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .transport import driver_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from .transport import Message, Queue, Transport


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


@dataclass(frozen=True)
class PumpSeam:
    """What the pump lends a receive that runs in place of its own: its transport and queue, the
    handler's Context, and the three steps whose bookkeeping (retries, the error queue, counts)
    stays the pump's.

    context(link, savepoint, outgoing) -> the handler's Context on `link`;
    handle(message, context) -> "processed", "failed" (moved to the error queue) or None (poison, forwarded);
    failed(message, exc, context): a handler's failure counted and its writes undone (back to its
    savepoint, or out of the whole transaction when it has none);
    committed(messages, outcomes): after the commit, the messages are gone: count them."""

    transport: Transport
    queue: Queue
    context: Callable[..., Any]
    handle: Callable[[Message, Any], str | None]
    failed: Callable[[Message, Exception, Any], None]
    committed: Callable[[list[Message], list[str | None]], None]
