"""Send, receive, delay, publish: the version-matched statements, executed.

Every call takes the caller's connection and runs inside the caller's transaction
(the transport's native transaction mode): the caller's own writes commit or roll
back together with the receive, and a rollback puts the message back. The
connection is a SQLAlchemy Connection, or a driver connection bound once with
`Transport.driver_connection` for bulk consumers that manage the driver's
transaction themselves (no SQLAlchemy transaction object per message).
Statements go to one DBAPI cursor of that connection, converted once per driver
paramstyle: no SQL is parsed or compiled per message.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy.engine import Connection, Engine

from .. import engines, errors, wire
from ..revisions import deployed_blueprint
from ..schema import Blueprint, Kind, TableName
from ..statements import Statement, run, run_many
from ..versions import LATEST, profile

__all__ = [
    "Transport",
    "Queue",
    "EndpointTables",
    "Subscriptions",
    "Message",
    "DriverConnection",
    "SubscriberMissing",
    "Conn",
    "DEFAULT_MOVE_BATCH",
    "DEFAULT_PURGE_BATCH",
]

log = logging.getLogger("sqltransport_schema.runtime")

DEFAULT_MOVE_BATCH = 100
DEFAULT_PURGE_BATCH = 10000


@dataclass
class Message:
    """A message received: its id, body and headers (None, with `poison` saying why, when they cannot be read)."""

    id: str
    body: bytes | None
    raw_headers: str
    headers: dict[str, str] | None = None  # None: the headers could not be read (poison)
    poison: str | None = None  # why the headers could not be read
    order: Any = None  # its position in the queue (Seq, RowVersion), for a message of lock_batch


class DriverConnection:
    """A driver (DBAPI) connection bound to the runtime: its cursor and paramstyle, found once.

    The transaction is the driver's and the caller's: psycopg and sqlite3 (with its default
    isolation_level) begin one implicitly; the caller commits or rolls back on the driver
    connection. Made by `Transport.driver_connection`, which checks the engine matches and sets
    the connection up once (sqlite3: a busy timeout, and its implicit BEGIN as BEGIN IMMEDIATE),
    or by `driver_of` over a SQLAlchemy Connection's own driver connection (the pump's handlers).
    """

    __slots__ = ("connection", "cursor", "paramstyle")

    def __init__(self, dbapi_connection: Any, cursor: Any, paramstyle: str):
        self.connection = dbapi_connection
        self.cursor = cursor
        self.paramstyle = paramstyle

    def __repr__(self) -> str:
        return f"DriverConnection({self.connection!r})"


Conn = Connection | DriverConnection


def _driver_module(dbapi_object: Any) -> str:
    return type(dbapi_object).__module__.partition(".")[0]


def _cursor(conn: Conn) -> tuple[Any, str]:
    """(cursor, paramstyle) for the caller's connection, inside a transaction.

    For a SQLAlchemy Connection, one cursor is kept per DBAPI connection (in the pool
    record's info, which lives as long as that connection): opening a cursor per statement
    costs more than our own code; a transaction SQLAlchemy knows of is begun if none is.
    """
    if type(conn) is DriverConnection:
        return conn.cursor, conn.paramstyle
    if not isinstance(conn, Connection):
        raise TypeError(f"expected a SQLAlchemy Connection or Transport.driver_connection(...), got {type(conn).__name__}")
    if conn.get_transaction() is None:
        conn.begin()
    return _pooled_cursor(conn), conn.dialect.paramstyle


def _pooled_cursor(conn: Connection) -> Any:
    pooled = conn.connection
    cursor = pooled.info.get("sqltransport_cursor")
    if cursor is None or getattr(cursor, "closed", False):
        cursor = pooled.info["sqltransport_cursor"] = engines.for_sqlalchemy(conn.dialect.name).runtime_cursor(pooled.dbapi_connection)
    return cursor


def driver_of(conn: Connection) -> DriverConnection:
    """A SQLAlchemy Connection's own driver connection as a DriverConnection, over the runtime cursor
    `_cursor` keeps for it (made once per DBAPI connection): statements on it skip SQLAlchemy's
    per-statement work. The transaction stays the Connection's (begin, commit and roll back on
    `conn`), and the driver connection is left as the engine set it up (no bind)."""
    return DriverConnection(conn.connection.dbapi_connection, _pooled_cursor(conn), conn.dialect.paramstyle)


# A table that exists but that the login holds no privilege on: the advice is a grant, not a migration.
NOT_VISIBLE = (
    "exists but is not visible to this login (it holds no privilege on it); if this process uses it, "
    "grant what it needs (`sqltransport-schema grants --login LOGIN [--endpoint NAME]`), no upgrade is needed"
)


def execute(conn: Conn, statement: Statement, params: Mapping | None = None, *, prepare: bool = False) -> Any:
    """Run a statement on the connection's runtime cursor (statements.run); `prepare`: have the driver
    prepare it at its first run rather than after several (psycopg 3 only; other drivers ignore it)."""
    cursor, paramstyle = _cursor(conn)
    if prepare and _driver_module(cursor) == "psycopg":
        return run(cursor, statement, paramstyle, params, prepare=True)
    return run(cursor, statement, paramstyle, params)


def execute_many(conn: Conn, statement: Statement, rows: Sequence[Mapping]) -> None:
    """The statement once per row, in one executemany; one row in a plain execute (psycopg's
    executemany enters its pipeline mode, which costs a single row more round trips than it saves)."""
    if len(rows) == 1:
        execute(conn, statement, rows[0])
    elif rows:
        cursor, paramstyle = _cursor(conn)
        run_many(cursor, statement, paramstyle, rows)


def with_standard_headers(headers: Mapping[str, str], message_id: str) -> Mapping[str, str]:
    """The headers every NServiceBus receiver expects, where the caller gave none."""
    if all(name in headers for name in (wire.MESSAGE_ID, wire.CORRELATION_ID, wire.CONVERSATION_ID, wire.MESSAGE_INTENT, wire.TIME_SENT)):
        return headers
    filled = dict(headers)
    filled.setdefault(wire.MESSAGE_ID, message_id)
    filled.setdefault(wire.CORRELATION_ID, filled[wire.MESSAGE_ID])
    filled.setdefault(wire.CONVERSATION_ID, str(uuid.uuid4()))
    filled.setdefault(wire.MESSAGE_INTENT, "Send")
    filled.setdefault(wire.TIME_SENT, wire.format_time_sent(datetime.now(timezone.utc)))
    return filled


def _milliseconds(value: timedelta | float | int) -> int:
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value * 1000)  # seconds


def _due_after(value: timedelta | float | int) -> dict[str, object]:
    """A delay as every engine's store_delayed takes it: whole milliseconds (@DueAfterMs), and the
    parts of a .NET TimeSpan the transports bind (days, hours, minutes, seconds, milliseconds,
    each signed like the whole)."""
    ms = _milliseconds(value)
    sign, rest = (-1 if ms < 0 else 1), abs(ms)
    days, rest = divmod(rest, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return {
        "DueAfterMs": ms,
        "DueAfterDays": sign * days,
        "DueAfterHours": sign * hours,
        "DueAfterMinutes": sign * minutes,
        "DueAfterSeconds": sign * seconds,
        "DueAfterMilliseconds": sign * millis,
        "Due": datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(milliseconds=ms),  # SQL Server 3.1-4.1
    }


class Transport:
    """Statements for one engine and one transport version, bound to tables on demand."""

    def __init__(
        self,
        engine: Engine,
        transport_version: str = LATEST,
        *,
        default_schema: str | None = None,
        default_catalog: str | None = None,
        subscription_table: TableName | None = None,
        peek_batch_size: int = 100,
    ):
        self.engine = engine
        self.dialect = engines.for_sqlalchemy(engine.dialect.name)
        if self.dialect.saga_only:
            raise errors.UsageError(f"{self.dialect.name} holds saga tables only, no queues: use runtime.sagas.SagaTable")
        self.version = transport_version
        self.profile = profile(transport_version)
        reason = self.dialect.unsupported(self.profile)
        if reason:
            raise errors.UsageError(reason)
        self.default_schema = default_schema
        self.default_catalog = default_catalog
        self.subscription_table = subscription_table or TableName("SubscriptionRouting", default_schema, default_catalog)
        self.peek_batch_size = peek_batch_size
        self.blueprint: Blueprint | None = None  # what the deployed revision recorded (from_database)
        self._existing_columns: dict | None = None  # the catalog as verify() read it
        self._queues: dict[TableName, Queue] = {}
        self._names: dict[str, TableName] | None = None  # topology name -> deployed name (from_database)

    # -- what is deployed ----------------------------------------------------------
    @classmethod
    def from_database(
        cls, engine: Engine | str, config_file: str = "alembic.ini", purges_expired: bool = False, verify: bool = True
    ) -> Transport:
        """The transport for the schema actually deployed (an engine, or a URL): the blueprint the
        migrations stored in the database, so no project files are needed (docs/runtime.md).
        `purges_expired`: this process calls purge_expired, so the start-up checks look for the
        Expires index where the release does so only then (6.3.2+, as the transport's setting).
        `verify=False` skips the start-up checks (status and retry report missing tables themselves)."""
        from ..db import make_engine, refuse_missing_sqlite_file, upgrade_command_for

        url = engine if isinstance(engine, str) else engine.url.render_as_string(hide_password=False)
        refuse_missing_sqlite_file(url, fix="pass the URL of the database the migrations built (`{upgrade}` creates it)")
        if isinstance(engine, str):
            engine = make_engine(engine, must_exist=True)
        blueprint = deployed_blueprint(engine, config_file, upgrade_command_for(engine))
        transport = cls(engine, blueprint.transport_version, subscription_table=blueprint.subscription_table)
        transport.blueprint = blueprint
        for warning in transport.verify(blueprint, purges_expired) if verify else ():
            log.warning("%s", warning)
        return transport

    def verify(self, blueprint: Blueprint, purges_expired: bool = False) -> list[str]:
        """Differences between the catalog and the recorded blueprint, as the transport warns of them."""
        from ..db import upgrade_command_for

        with self.engine.connect() as conn:
            existing = self._existing_columns = self.dialect.catalog.existing_columns(conn)
            present = [s.name for s in blueprint.tables if s.kind is Kind.QUEUE and self.dialect.table_key(s.name) in existing]
            warnings = self.dialect.catalog.warnings(conn, present, self.profile, purges_expired)
            unseen = [s for s in blueprint.tables if self.dialect.table_key(s.name) not in existing]
            hidden = (self.dialect.catalog.all_tables(conn) or set()) if unseen else set()
        for spec in blueprint.tables:
            found = existing.get(self.dialect.table_key(spec.name))
            where = self.dialect.display(spec.name, self.profile)
            if found is None and self.dialect.table_key(spec.name) in hidden:
                warnings.append(f"{spec.kind.value} table {where} {NOT_VISIBLE}")
                continue
            if found is None:
                warnings.append(f"{spec.kind.value} table {where} is missing; run `{upgrade_command_for(self.engine)}`")
                continue
            missing = sorted(self.dialect.expected_columns(spec) - found)
            if missing:
                warnings.append(f"{spec.kind.value} table {where} lacks column(s) {', '.join(missing)}")
        return warnings

    def driver_connection(self, dbapi_connection: Any) -> DriverConnection:
        """Bind a driver connection (psycopg, sqlite3, pyodbc) for the fast path: pass the result
        where a Connection is taken, and commit or roll back on the driver connection itself."""
        if isinstance(dbapi_connection, Connection):
            raise TypeError("this is a SQLAlchemy Connection already: pass it as it is, or its .connection.driver_connection")
        module = _driver_module(dbapi_connection)
        engine = engines.for_driver(module)
        if engine is not self.dialect:
            raise errors.UsageError(f"a {module} connection reaches {engine.name}, but this transport is for {self.dialect.name}")
        engine.bind_runtime_connection(dbapi_connection)
        paramstyle = sys.modules[module].paramstyle
        return DriverConnection(dbapi_connection, engine.runtime_cursor(dbapi_connection), paramstyle)

    # -- tables ----------------------------------------------------------------------
    def name(self, table: str, schema: str | None = None, catalog: str | None = None) -> TableName:
        """A table by its topology name: without schema, where the deployed blueprint puts it."""
        if schema is None and catalog is None and self.blueprint is not None:
            deployed = self._deployed_names(self.blueprint).get(table)
            if deployed is not None:
                return deployed
        return TableName(
            table, schema if schema is not None else self.default_schema, catalog if catalog is not None else self.default_catalog
        )

    def _deployed_names(self, blueprint: Blueprint) -> dict[str, TableName]:
        if self._names is None:
            self._names = {spec.name.table: spec.name for spec in blueprint.tables}
        return self._names

    def queue(self, table: str | TableName, schema: str | None = None, catalog: str | None = None) -> Queue:
        """The queue table of that topology name (or TableName), made once per name and kept. On a
        transport from_database, a name the database has no table for that is close to a deployed
        queue's (`Sale` for `Sales`) raises errors.NotFound naming it, rather than a later `no such table`."""
        if isinstance(table, TableName):
            return self._queue(table)
        name = self.name(table, schema, catalog)
        if name not in self._queues and schema is None and catalog is None:
            self._refuse_a_typo(table, name)
        return self._queue(name)

    def _queue(self, name: TableName) -> Queue:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = Queue(self, name)
        return queue

    def _refuse_a_typo(self, table: str, name: TableName) -> None:
        """A topology name that is no deployed table but close to a deployed queue's: a typo. (Only when the
        start-up checks read the catalog: a table other than the blueprint's may be there on purpose.)"""
        existing, blueprint = self._existing_columns, self.blueprint
        if existing is None or blueprint is None or self.dialect.table_key(name) in existing:
            return
        queues = [spec.name.table for spec in blueprint.tables if spec.kind is Kind.QUEUE]
        if table in queues:
            return  # deployed, though its table is missing: the start-up checks warned of it
        close = difflib.get_close_matches(table, queues, n=1, cutoff=0.75) or [q for q in queues if q.casefold() == table.casefold()]
        if close:
            known = ", ".join(sorted(queues)[:10]) + (f" and {len(queues) - 10} more" if len(queues) > 10 else "")
            raise errors.NotFound(
                f"no queue {table!r} is deployed in this database (no such table); did you mean {close[0]!r}? "
                f"Queue names are the topology's, as topology.yaml spells them (deployed: {known})"
            )

    def address_queue(self, address: str) -> Queue:
        """The queue a transport address names (`Sales`, `Sales@[dbo]`, `Sales@[dbo]@[shop]`): taken as
        given (a subscriber's or a failed message's address may name a table no longer there)."""
        parsed = wire.parse_address(address)
        return self._queue(self.name(parsed.table, parsed.schema, parsed.catalog))

    def address_of(self, name: TableName, as_engine_knows: bool = False) -> str:
        """The transport address of a table, schema included (what ReplyTo and FailedQ headers hold:
        the canonical address, which names the same table on every engine). `as_engine_knows`: as
        people read it on this engine, without the schema and catalog parts where the engine has
        none (SQLite: the table alone). No catalog part where the engine has no catalogs (PostgreSQL: `Shipping@[public]`,
        as the PostgreSQL transport's addresses are `table@schema`)."""
        if as_engine_knows and not self.dialect.has_schemas:
            return wire.Address(name.table).format()
        schema = name.schema if name.schema is not None else self.dialect.default_schema
        return wire.Address(name.table, schema, name.catalog if self.dialect.has_catalogs else None).format()

    def endpoint(self, name: str, schema: str | None = None, catalog: str | None = None, delayed_suffix: str = "Delayed") -> EndpointTables:
        """An endpoint's input queue and its delayed-delivery table (`<name>.<delayed_suffix>`)."""
        return EndpointTables(self, self.name(name, schema, catalog), delayed_suffix)

    def subscriptions(self) -> Subscriptions:
        """The shared subscription table (`SubscriptionRouting` unless the transport was given another)."""
        return Subscriptions(self, self.subscription_table)

    def statements(
        self, queue: TableName, *, delayed: TableName | None = None, subscriptions: TableName | None = None, topics: int = 1
    ) -> dict[str, Statement]:
        """Every runtime statement of this engine and transport version for a queue (and its delayed or subscription table), by name."""
        options: dict[str, Any] = {}
        found = self._existing_columns.get(self.dialect.table_key(queue)) if self._existing_columns else None
        if found:
            # the transport's send copes with a queue whose Recoverable column was dropped (7.0+)
            options["recoverable_column"] = "recoverable" in found
        return self.dialect.runtime_statements(
            self.profile,
            queue,
            delayed=delayed,
            subscriptions=subscriptions,
            topics=topics,
            peek_batch_size=self.peek_batch_size,
            **options,
        )

    # -- publish -----------------------------------------------------------------------
    def publish(self, conn: Conn, topics: str | Sequence[str], body: bytes | None, headers: Mapping[str, str]) -> list[str]:
        """Send one copy to every subscriber of any of the topics; returns their addresses.
        A subscriber whose table does not exist raises SubscriberMissing (the send's own error,
        recognised by the engine's code: no catalog lookup per publish)."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        addresses = self.subscriptions().subscribers(conn, topics)
        for address in addresses:
            queue = self.address_queue(address)
            try:
                queue.send(conn, body, {**headers, wire.MESSAGE_INTENT: "Publish"})
            except Exception as error:
                if self.dialect.undefined_table(error):
                    raise SubscriberMissing(self, queue, topics) from error
                raise
        return addresses


class SubscriberMissing(errors.NotFound):
    """A publish found a subscriber whose queue table does not exist (a retired endpoint's row)."""

    def __init__(self, transport: Transport, queue: Queue, topics: Sequence[str]):
        self.address = queue.address
        where = transport.dialect.display(queue.name, transport.profile)
        table = transport.dialect.display(transport.subscription_table, transport.profile)
        super().__init__(
            f"publish of {', '.join(topics)} failed: subscriber {queue.address} has no table ({where} does not exist; its "
            f"endpoint was retired or its queue dropped). Unsubscribe it: Subscriptions.unsubscribe(connection, endpoint, topic) "
            f"for each row of {table} whose QueueAddress is {queue.address} (`sqltransport-schema status` lists them); "
            "then roll back this transaction and publish again"
        )


class Queue:
    """One queue table: send, receive, peek and purge its messages inside the caller's transaction."""

    def __init__(self, transport: Transport, name: TableName):
        self.transport = transport
        self.name = name
        self.statements = transport.statements(name)
        self.address = transport.address_of(name)
        self._copies_correlation = "CorrelationId" in self.statements["send"].params

    def __repr__(self) -> str:
        return f"Queue({self.address})"

    # -- send --------------------------------------------------------------------------
    def _row(
        self, body: bytes | None, headers: Mapping[str, str] | str, time_to_be_received: timedelta | float | None, message_id: str | None
    ) -> dict:
        filled: Mapping[str, str] | None = None
        if isinstance(headers, str):
            raw = headers  # passed on unchanged (poison to the error queue, forwarding)
        else:
            message_id = message_id or headers.get(wire.MESSAGE_ID) or str(uuid.uuid4())
            filled = with_standard_headers(headers, message_id)
            raw = wire.encode_headers(filled)
        correlation = reply_to = None
        if self._copies_correlation:
            # the send of SQL Server 3.1-6.x fills CorrelationId and ReplyToAddress from the headers
            # (upstream's MessageRow.From); later releases and the other engines have no such parameters
            if filled is None:
                try:
                    filled = wire.decode_headers(raw)
                except wire.PoisonHeaders:
                    filled = {}
            correlation, reply_to = filled.get(wire.CORRELATION_ID), filled.get(wire.REPLY_TO_ADDRESS)
        return {
            "Id": wire.row_id(message_id),  # the message's id where it is a uuid; the header keeps it as given
            "CorrelationId": correlation,
            "ReplyToAddress": reply_to,
            "Recoverable": True,  # the send of 3.1-4.0 binds it; later releases write the literal 1
            "TimeToBeReceivedMs": None if time_to_be_received is None else _milliseconds(time_to_be_received),
            "Headers": raw,
            "Body": body,
        }

    def send(
        self,
        conn: Conn,
        body: bytes | None,
        headers: Mapping[str, str] | str,
        time_to_be_received: timedelta | float | None = None,
        message_id: str | None = None,
    ) -> str:
        """Insert one message; headers as a mapping, or as raw text to pass a message on unchanged.
        Returns the row's Id (`Message.id` where it is received): the message id (`message_id`, else
        the `NServiceBus.MessageId` header) where that is a uuid, else one made for it (wire.row_id)."""
        row = self._row(body, headers, time_to_be_received, message_id)
        execute(conn, self.statements["send"], row)
        return row["Id"]

    def send_many(
        self,
        conn: Conn,
        messages: Iterable[tuple[bytes | None, Mapping[str, str] | str]],
        time_to_be_received: timedelta | float | None = None,
        message_ids: Sequence[str | None] | None = None,
    ) -> list[str]:
        """Insert several messages with one statement; their ids, in order. Headers as in `send`;
        `message_ids`, where given, each message's id as `send`'s `message_id`."""
        ids = message_ids if message_ids is not None else itertools.repeat(None)
        rows = [self._row(body, headers, time_to_be_received, message_id) for (body, headers), message_id in zip(messages, ids)]
        execute_many(conn, self.statements["send"], rows)
        return [row["Id"] for row in rows]

    # -- receive -----------------------------------------------------------------------
    def _message(self, row: Sequence[Any], at: dict[str, int]) -> Message:
        message_id, raw, body = row[at["Id"]], row[at["Headers"]], row[at["Body"]]
        message = Message(str(message_id), bytes(body) if body is not None else None, raw)
        try:
            message.headers = wire.decode_headers(raw)
        except wire.PoisonHeaders as exc:
            message.poison = str(exc)
        return message

    def receive(self, conn: Conn) -> Message | None:
        """The oldest message, deleted inside the caller's transaction; expired ones are dropped."""
        statement = self.statements["receive"]
        at = statement.positions
        expired = at.get("Expired")  # releases that skip expired rows in the query have no flag
        while True:
            row = execute(conn, statement).fetchone()
            if row is None:
                return None
            if expired is not None and row[expired]:
                log.debug("dropped expired message %s from %s", row[at["Id"]], self.address)
                continue
            return self._message(row, at)

    def receive_batch(self, conn: Conn, size: int) -> list[Message]:
        """Up to size oldest messages in one statement, in FIFO order; expired ones dropped."""
        return self.take_batch(conn, size)[0]

    def take_batch(self, conn: Conn, size: int) -> tuple[list[Message], list[Any]]:
        """receive_batch, shaped as lock_batch: (the messages taken, the positions of the expired ones
        dropped with them). A rollback puts them all back at their places (the pump's optimistic batches)."""
        return self._batch("receive_batch", conn, size)

    def lock_batch(self, conn: Conn, size: int) -> tuple[list[Message], list[Any]]:
        """Up to size oldest messages locked (not taken) for the caller's transaction, in FIFO order:
        (the messages to handle, the positions of the expired ones). Each message's position is in
        `Message.order`; `delete_locked` takes it. Locked rows nobody else receives until the commit;
        those left undeleted are back at the head of the queue then (the pump's batches)."""
        return self._batch("lock_batch", conn, size)

    def lock_batch_joined(self, conn: Conn, statement: Statement, size: int) -> tuple[list[tuple[Message, Sequence[Any]]], list[Any]]:
        """lock_batch by a form of it that returns more columns after the queue's (the outbox's
        lock, Dialect.outbox_lock_batch): each message with its row, the expired ones' positions."""
        return self._rows(statement, conn, size)

    def _batch(self, name: str, conn: Conn, size: int) -> tuple[list[Message], list[Any]]:
        found, expired = self._rows(self.statements[name], conn, size)
        return [message for message, _ in found], expired

    def _rows(self, statement: Statement, conn: Conn, size: int) -> tuple[list[tuple[Message, Sequence[Any]]], list[Any]]:
        at = statement.positions
        rows = execute(conn, statement, {"BatchSize": size}).fetchall()
        rows.sort(key=lambda r: r[at["Order"]])
        found, expired = [], []
        for row in rows:
            if row[at["Expired"]]:
                expired.append(row[at["Order"]])
                continue
            message = self._message(row, at)
            message.order = row[at["Order"]]
            found.append((message, row))
        return found, expired

    def delete_locked(self, conn: Conn, positions: Sequence[Any]) -> int:
        """Take (delete) the locked messages at these positions, in one statement; how many were deleted."""
        if not positions:
            return 0
        return self.deleting_locked(conn, positions).rowcount

    def deleting_locked(self, conn: Conn, positions: Sequence[Any]) -> Any:
        """delete_locked, its count read later: the cursor, whose rowcount is the count once the
        answer has come (in a pipeline, after its block: Dialect.committing_together)."""
        orders = self.transport.dialect.list_parameter(list(positions))
        return execute(conn, self.statements["delete_locked"], {"Orders": orders})

    def savepoint(self, conn: Conn) -> None:
        """A savepoint in the caller's transaction; `rollback_to_savepoint` undoes what follows it."""
        execute(conn, self.statements["savepoint"])

    def rollback_to_savepoint(self, conn: Conn) -> None:
        """Undo what the caller's transaction did since `savepoint`."""
        execute(conn, self.statements["rollback_to_savepoint"])

    def peek(self, conn: Conn) -> int:
        """About how many messages wait, as the transport's peek estimates it, without locking any."""
        return execute(conn, self.statements["peek"]).fetchone()[0] or 0

    def purge_expired(self, conn: Conn | None = None, batch_size: int = DEFAULT_PURGE_BATCH) -> int:
        """Delete expired messages in batches until a batch comes back short; how many went.

        Without `conn`, as upstream's purger does: on a connection of its own, each batch committed
        as it is deleted, so its row locks are let go batch by batch (held together, they can escalate
        to a table lock that blocks every receiver). With `conn`, every batch is part of the caller's
        transaction, committed when the caller commits."""
        if conn is not None:
            return self._purge_expired(conn, batch_size, commit=lambda: None)
        with self.transport.engine.connect() as own:
            return self._purge_expired(own, batch_size, commit=own.commit)

    def _purge_expired(self, conn: Conn, batch_size: int, commit: Callable[[], None]) -> int:
        total = 0
        while True:
            deleted = execute(conn, self.statements["purge_expired"], {"BatchSize": batch_size}).rowcount
            commit()
            total += max(deleted, 0)
            if deleted < batch_size:
                return total

    def purge(self, conn: Conn) -> int:
        """Delete every message of the queue; how many went."""
        return execute(conn, self.statements["purge_all"]).rowcount


class EndpointTables:
    """An endpoint's input queue and delayed-delivery table."""

    def __init__(self, transport: Transport, name: TableName, delayed_suffix: str):
        self.transport = transport
        self.input = transport.queue(name)
        self.delayed_name = TableName(f"{name.table}.{delayed_suffix}", name.schema, name.catalog)
        self.statements = transport.statements(name, delayed=self.delayed_name)

    def send_delayed(
        self, conn: Conn, destination: str | Queue, body: bytes | None, headers: Mapping[str, str], due_after: timedelta | float
    ) -> None:
        """Store in this endpoint's delayed table; when due it reaches the input queue, which forwards it."""
        address = destination.address if isinstance(destination, Queue) else destination
        raw = wire.encode_headers({**headers, wire.FORWARD_DESTINATION: address})
        execute(conn, self.statements["store_delayed"], {"Headers": raw, "Body": body, **_due_after(due_after)})

    def move_due(self, conn: Conn, batch_size: int = DEFAULT_MOVE_BATCH) -> int:
        """Move up to batch_size due messages into the input queue; returns how many moved."""
        params = {"BatchSize": batch_size, "Now": self.transport.dialect.now_parameter()}
        counted = self.statements.get("move_due_delayed_counted")
        if counted is not None:  # a release whose move runs under NOCOUNT (row count -1): it says how many
            row = execute(conn, counted, params).fetchone()
            moved = row[counted.positions["Moved"]] if row is not None else 0
        else:
            moved = execute(conn, self.statements["move_due_delayed"], params).rowcount
        follow_up = self.statements.get("delete_moved_delayed")
        if follow_up is not None:
            execute(conn, follow_up, params)
        return max(moved, 0)

    def next_due(self, conn: Conn) -> Any:
        """When the next delayed message falls due (None: none waits)."""
        statement = self.statements["next_due"]
        row = execute(conn, statement).fetchone()
        return row[statement.positions["NextDue"]] if row else None

    def forward_destination(self, message: Message) -> Queue | None:
        """The queue a moved delayed message is for, when that is not this endpoint's input queue."""
        if not message.headers or wire.FORWARD_DESTINATION not in message.headers:
            return None
        target = self.transport.address_queue(message.headers[wire.FORWARD_DESTINATION])
        # by address: `Sales` and `Sales@[dbo]` are one table where dbo is the default schema
        return None if target.address == self.input.address else target


class Subscriptions:
    """The subscription table: which endpoint's queue receives each published topic."""

    def __init__(self, transport: Transport, name: TableName):
        self.transport = transport
        self.name = name
        self._by_topics: dict[int, dict[str, Statement]] = {}

    def _statements(self, topics: int = 1) -> dict[str, Statement]:
        found = self._by_topics.get(topics)
        if found is None:
            found = self._by_topics[topics] = self.transport.statements(self.name, subscriptions=self.name, topics=topics)
        return found

    def subscribe(self, conn: Conn, endpoint: str, address: str, topic: str) -> None:
        """Subscribe an endpoint (its queue's address) to a topic; subscribing again replaces the address."""
        execute(conn, self._statements()["subscribe"], {"Endpoint": endpoint, "QueueAddress": address, "Topic": topic})

    def unsubscribe(self, conn: Conn, endpoint: str, topic: str) -> None:
        """Remove an endpoint's subscription to a topic."""
        execute(conn, self._statements()["unsubscribe"], {"Endpoint": endpoint, "Topic": topic})

    def subscribers(self, conn: Conn, topics: Sequence[str]) -> list[str]:
        """The queue addresses subscribed to any of the topics, each once."""
        if not topics:
            return []
        statement = self._statements(len(topics))["find_subscribers"]
        rows = execute(conn, statement, dict(zip(statement.params, topics))).fetchall()
        return sorted(row[0] for row in rows)
