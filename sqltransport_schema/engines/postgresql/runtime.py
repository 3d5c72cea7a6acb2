"""PostgreSQL's runtime statements (transport-facts §7): send, receive, delayed delivery,
subscriptions, and what the driver needs to run them.

A mixin of `PostgreSQL` (engines/postgresql/__init__.py); the statement tables that name these
templates are the base's (engines/base.py).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from ...versions import Profile
from ..base import Dialect


class Runtime:
    """The templates the transport runs at run time, and the release forms of the ones that changed."""

    # {table} is the queue, {delayed} the endpoint's delayed table, {subscriptions} the
    # subscription table; @Name are parameters. Timestamps follow the transport: UTC as
    # timestamp without time zone (Due is timestamptz: store and move must share a
    # session time zone, as the transport's own endpoints do).
    SEND = (
        "INSERT INTO {table} (Id, Expires, Headers, Body) VALUES (@Id, "
        "(now() AT TIME ZONE 'UTC') + (@TimeToBeReceivedMs || ' ms')::INTERVAL, @Headers, @Body)"
    )
    # Do not rewrite with USING: LIMIT 1 could then return several rows.
    RECEIVE = (
        "DELETE FROM {table} rs WHERE rs.id = (SELECT id FROM {table} ORDER BY Seq LIMIT 1 FOR UPDATE SKIP LOCKED) "
        "RETURNING rs.id, CASE WHEN Expires IS NULL THEN 0 WHEN Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1 END Expired, "
        "rs.Headers, rs.Body"
    )
    # Beyond the transport: the batch is locked once (ARRAY(...) is an init plan, run once)
    # and its rows deleted by their tuple ids (a TID scan, no second walk of the primary key
    # per row), so no row can come back twice; our lock keeps each tuple where it is until
    # the statement ends. Seq restores FIFO order on the client.
    RECEIVE_BATCH = (
        "DELETE FROM {table} rs WHERE rs.ctid = ANY(ARRAY(SELECT ctid FROM {table} ORDER BY Seq LIMIT @BatchSize FOR UPDATE SKIP LOCKED)) "
        "RETURNING rs.id, CASE WHEN rs.Expires IS NULL THEN 0 WHEN rs.Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1 END Expired, "
        "rs.Headers, rs.Body, rs.Seq"
    )
    # Beyond the transport, for the pump's batches (docs/runtime.md): the batch is locked, not
    # taken; the handled messages are deleted by their Seq in one statement before the one commit,
    # and one whose handler failed is left where it is, so the commit puts it back at the head of
    # the queue.
    # SKIP LOCKED passes over the rows a competing batch holds, as RECEIVE does.
    LOCK_BATCH = (
        "SELECT id, CASE WHEN Expires IS NULL THEN 0 WHEN Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1 END Expired, "
        "Headers, Body, Seq FROM {table} ORDER BY Seq LIMIT @BatchSize FOR UPDATE SKIP LOCKED"
    )
    DELETE_LOCKED = "DELETE FROM {table} WHERE Seq = ANY(@Orders)"
    # One name for every message's savepoint: a new one hides the last, ROLLBACK TO goes back to
    # the newest, and all are released by the commit.
    SAVEPOINT = "SAVEPOINT sqltransport_message"
    ROLLBACK_TO_SAVEPOINT = "ROLLBACK TO SAVEPOINT sqltransport_message"
    COMMIT = "COMMIT"  # sent with a transaction's last writes (committing_together)
    BEGIN = "BEGIN"  # the next transaction's, sent with that commit (committing_together's begin_next)
    COMMIT_NOT_WAITING = "SET LOCAL synchronous_commit TO OFF"  # this transaction's commit only
    PEEK = (
        "SELECT COALESCE(cast((SELECT seq FROM {table} ORDER BY seq DESC LIMIT 1 FOR UPDATE SKIP LOCKED) - "
        "(SELECT seq FROM {table} ORDER BY seq ASC LIMIT 1 FOR UPDATE SKIP LOCKED) + 1 AS int), 0)"
    )
    PEEK_UNLOCKED = "SELECT COALESCE(cast(max(seq) - min(seq) + 1 AS int), 0) Id FROM {table}"  # 8.1.0-8.1.4
    PURGE_EXPIRED = (
        "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE Expires < now() AT TIME ZONE 'UTC' "
        "LIMIT @BatchSize FOR UPDATE SKIP LOCKED)"
    )
    PURGE_ALL = "DELETE FROM {table}"
    # The delay arrives in the five parts of a .NET TimeSpan (days, hours, minutes, seconds,
    # milliseconds), each an interval added to now.
    STORE_DELAYED = """\
WITH params (DueDate) as (
   values (timestamptz (now() AT TIME ZONE 'UTC')
      + (@DueAfterDays || ' days ')::INTERVAL + (@DueAfterHours || ' hours ')::INTERVAL
      + (@DueAfterMinutes || ' mins ')::INTERVAL + (@DueAfterSeconds || ' s ')::INTERVAL
      + (@DueAfterMilliseconds || ' ms')::INTERVAL)
)
INSERT INTO {delayed} (Headers, Body, Due)
SELECT @Headers, @Body, DueDate
FROM params"""
    # No lock clause on the move: a competing mover blocks on the rows another one is deleting
    # and finds them gone once that commits, so each message is moved once.
    MOVE_DUE_DELAYED = (
        "WITH message as (DELETE FROM {delayed} WHERE id in (SELECT id from {delayed} WHERE {delayed}.Due < now() AT TIME ZONE 'UTC' "
        "LIMIT @BatchSize) RETURNING id, headers, body) "
        "INSERT into {table} (id, expires, headers, body) SELECT id, NULL, headers, body FROM message"
    )
    # The transport runs it with the move, as one command; SKIP LOCKED passes over a row a
    # competing mover is deleting.
    NEXT_DUE = "SELECT now() AT TIME ZONE 'UTC' as UtcNow, Due as NextDue FROM {delayed} ORDER BY Due LIMIT 1 FOR UPDATE SKIP LOCKED"
    SUBSCRIBE = (
        "INSERT INTO {subscriptions} (QueueAddress, Topic, Endpoint) VALUES (@QueueAddress, @Topic, @Endpoint) "
        "ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = @QueueAddress"
    )
    UNSUBSCRIBE = "DELETE FROM {subscriptions} WHERE Endpoint = @Endpoint AND Topic = @Topic"
    FIND_SUBSCRIBERS = "SELECT DISTINCT QueueAddress FROM {subscriptions} WHERE Topic IN ({topics})"
    TOPIC_PARAMETER = "Topic_{i}"
    RESULT_COLUMNS = {**Dialect.RESULT_COLUMNS, "next_due": ("UtcNow", "NextDue")}

    QUEUE_STATEMENTS = {**Dialect.QUEUE_STATEMENTS, "peek": ("_peek", Dialect.QUEUE_STATEMENTS["peek"][1])}

    def _peek(self, profile: Profile, options: dict[str, Any]) -> str:
        """Peek in the form of the release (8.1.0-8.1.4 without locks)."""
        return self.PEEK if profile.postgresql_peek_locked else self.PEEK_UNLOCKED

    def list_parameter(self, values: list) -> Any:
        """An array: the driver binds a list as one (@Orders of delete_locked)."""
        return list(values)

    @contextlib.contextmanager
    def committing_together(self, dbapi_connection: Any, cursor: Any, durable: bool = True) -> Iterator[Callable[[], None] | None]:
        """On psycopg 3, the block's statements and COMMIT go in its pipeline, in one round trip to
        the server instead of one each (psycopg's pipeline mode: nothing waits for an answer until
        its end, where every statement's error is raised). The caller's commit then finds the
        transaction ended and sends nothing. durable=False: an asynchronous commit (the WAL flushed
        by the next durable commit, or within wal_writer_delay), lost only in a crash of the server,
        never half applied. `begin_next` queues the COMMIT and an explicit BEGIN (in a pipeline the
        driver cannot tell it must begin one); a statement that fails before it skips both.
        psycopg2: as it stands."""
        if type(dbapi_connection).__module__.partition(".")[0] != "psycopg":
            yield None
            return
        begun = False

        def commit() -> None:
            if not durable:
                cursor.execute(self.COMMIT_NOT_WAITING)
            cursor.execute(self.COMMIT)

        def begin_next() -> None:
            nonlocal begun
            commit()
            cursor.execute(self.BEGIN)
            begun = True

        with dbapi_connection.pipeline():
            yield begin_next
            if not begun:
                commit()

    def runtime_cursor(self, dbapi_connection: Any) -> Any:
        """On psycopg 3, results come in binary (a body leaves the server as its bytes, not as hex
        text twice its size to encode and decode) and message ids as the text the API returns."""
        if type(dbapi_connection).__module__.partition(".")[0] != "psycopg":  # psycopg2: as it comes
            return dbapi_connection.cursor()
        cursor = dbapi_connection.cursor(binary=True)
        cursor.adapters.register_loader("uuid", _uuid_text_loader())  # this cursor only
        return cursor


@functools.cache
def _uuid_text_loader() -> type:
    """A psycopg loader of binary uuid values straight to their canonical text (no UUID object)."""
    from psycopg import adapt, pq

    class UuidText(adapt.Loader):
        format = pq.Format.BINARY

        def load(self, data: bytes | bytearray | memoryview) -> str:
            h = bytes(data).hex()
            return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    return UuidText
