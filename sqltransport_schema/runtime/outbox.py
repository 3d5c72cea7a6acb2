"""The outbox in the runtime (docs/outbox.md): SQL persistence's outbox table read and written with
the engine's own statements (`Dialect.outbox_statements`, printed by `statements --outbox`), the
pump's receive with the outbox (`MessagePump(..., outbox=True)`), and the cleanup of dispatched rows.

A message handled with the outbox takes two transactions on the pump's connection:

1. the handler's: the incoming messages are locked (not taken); their outbox rows are read; a
   message without one is handled, its outgoing sends and publishes captured (not sent) and stored
   as the row's Operations (SQL persistence's serialized form), then commit;
2. the dispatch: the incoming messages are taken (deleted), the stored operations are sent to their
   queues and the rows are set as dispatched, in one commit (per batch).

A batch does each kind of work in one statement, not one per message: one read of the batch's rows
(on PostgreSQL joined to the lock, OUTBOX_LOCK_BATCH), one store of the rows handled (an
executemany), the sends of each queue in one statement, one statement setting the rows as
dispatched (where the engine has the batch forms, OUTBOX_GET_BATCH; on PostgreSQL the take's,
OUTBOX_TAKE_BATCH). Each transaction's last writes go with its commit where the driver can
(Dialect.committing_together), (2)'s BEGIN and take with (1)'s commit, and the dispatch's commit
need not be durable: lost with the server, it is redone from the rows (1) made durable.

A crash before (1) commits handles the message again; after it, the message is still in its queue
and comes back: its row says it was handled, so the handler does not run again and what (2) had not
committed is dispatched then.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy.engine import Connection, Engine

from .. import engines, errors, wire
from ..defaults import DEFAULT_CLEANUP_BATCH
from ..revisions import deployed_blueprint
from ..schema import Blueprint, Kind, TableName, TableSpec, default_table_prefix
from ..statements import Statement
from .sagas import DEFAULT_PERSISTENCE_VERSION, deployed_spec
from .transport import Conn, Message, Queue, Transport, _with_standard_headers, driver_of, execute, execute_many

if TYPE_CHECKING:
    from .receiving import Link, PumpSeam, TenantLink

__all__ = [
    "OutboxTable",
    "OutboxRecord",
    "OutgoingOperation",
    "Outgoing",
    "CleanupReport",
    "cleanup",
    "serialize",
    "deserialize",
    "DEFAULT_CLEANUP_BATCH",
]

log = logging.getLogger("sqltransport_schema.outbox")

# An operation's Options, as NServiceBus serializes a routing strategy: a send names its queue, a
# publish its event type (here the topic; several topics as a JSON list under TOPICS_OPTION).
DESTINATION_OPTION = "Destination"
EVENT_TYPE_OPTION = "EventType"
TOPICS_OPTION = "Topics"
DECLARE_OUTBOX = "; declare `outbox: true` on the endpoint in topology.yaml, compile and run `alembic upgrade head`"


# ======================================================================================= operations
@dataclass(frozen=True)
class OutgoingOperation:
    """One outgoing message of an outbox row, as SQL persistence serializes it: MessageId, Body
    (base64, as Json.NET writes bytes), Headers, Options (where it goes)."""

    message_id: str
    body: bytes | None
    headers: dict[str, str]
    options: dict[str, str]

    def to_json(self) -> dict:
        body = None if self.body is None else base64.b64encode(self.body).decode("ascii")
        return {"MessageId": self.message_id, "Body": body, "Headers": self.headers, "Options": self.options}

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> OutgoingOperation:
        body = item.get("Body")
        return cls(
            item["MessageId"],
            None if body is None else base64.b64decode(body),
            dict(item.get("Headers") or {}),
            dict(item.get("Options") or {}),
        )

    @property
    def topics(self) -> list[str]:
        """A publish's topics ([] for a send)."""
        if TOPICS_OPTION in self.options:
            return json.loads(self.options[TOPICS_OPTION])
        return [self.options[EVENT_TYPE_OPTION]] if EVENT_TYPE_OPTION in self.options else []


def serialize(operations: Iterable[OutgoingOperation]) -> str:
    """The Operations column's text: a JSON array of operations."""
    return json.dumps([op.to_json() for op in operations], separators=(",", ":"))


def deserialize(value: Any) -> list[OutgoingOperation]:
    """Operations as a statement returned them: text, or already parsed (PostgreSQL's jsonb)."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    items = json.loads(value) if isinstance(value, str) else value
    return [OutgoingOperation.from_json(item) for item in items or ()]


class Outgoing:
    """What a handler sends and publishes under the outbox: captured, in order, to be stored as its
    outbox row's operations (Context.send and Context.publish add to it)."""

    def __init__(self, transport: Transport):
        self.transport = transport
        self.operations: list[OutgoingOperation] = []

    def _headers(self, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        message_id = headers.get(wire.MESSAGE_ID) or str(uuid.uuid4())
        return message_id, dict(_with_standard_headers(headers, message_id))

    def send(self, address: str, body: bytes | None, headers: Mapping[str, str]) -> str:
        """One message for the queue at `address` (its id returned), sent when the row is dispatched."""
        queue = self.transport.address_queue(address)  # a malformed address fails the handler, not the dispatch
        message_id, filled = self._headers(headers)
        self.operations.append(OutgoingOperation(message_id, body, filled, {DESTINATION_OPTION: queue.address}))
        return message_id

    def publish(self, topics: str | Sequence[str], body: bytes | None, headers: Mapping[str, str]) -> str:
        """One event for every subscriber of the topics, found when the row is dispatched; its id returned."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics:
            raise errors.UsageError("publish needs at least one topic")
        message_id, filled = self._headers({**headers, wire.MESSAGE_INTENT: "Publish"})
        options = {EVENT_TYPE_OPTION: topics[0]}
        if len(topics) > 1:
            options[TOPICS_OPTION] = json.dumps(topics)
        self.operations.append(OutgoingOperation(message_id, body, filled, options))
        return message_id


def dispatch(conn: Connection, transport: Transport, operations: Sequence[OutgoingOperation]) -> None:
    """Send each operation to its queue (a publish to the topics' subscribers), in the caller's
    transaction: the sends to one queue in one statement, in their order; a publish after every
    send before it (a queue gets its messages in the operations' order)."""
    sends: dict[str, list[OutgoingOperation]] = {}

    def flush() -> None:
        for address, queued in sends.items():
            queue = transport.address_queue(address)
            queue.send_many(conn, [(op.body, op.headers) for op in queued], message_ids=[op.message_id for op in queued])
        sends.clear()

    for op in operations:
        if DESTINATION_OPTION in op.options:
            sends.setdefault(op.options[DESTINATION_OPTION], []).append(op)
        else:
            flush()
            transport.publish(conn, op.topics, op.body, op.headers)
    flush()


# ============================================================================================ table
class OutboxRecord(NamedTuple):
    """A message's outbox row: whether its operations were dispatched, and those it still holds."""

    dispatched: bool
    operations: list[OutgoingOperation]


def _flag(value: Any) -> bool:
    """Dispatched as a driver returns it: bool, 0/1, or MySQL's BIT as bytes."""
    return bool(int.from_bytes(value, "big")) if isinstance(value, (bytes, bytearray)) else bool(value)


class OutboxTable:
    """One endpoint's outbox table on one engine: get, store, set as dispatched, cleanup."""

    def __init__(self, dialect: engines.Dialect, spec: TableSpec, persistence_version: str = DEFAULT_PERSISTENCE_VERSION):
        if spec.kind is not Kind.OUTBOX:
            raise errors.UsageError(f"{spec.name} is not an outbox table")
        self.dialect = dialect
        self.spec = spec
        self.persistence_version = persistence_version
        self.statements = dialect.outbox_statements(spec)
        self.batch_statements = dialect.outbox_batch_statements(spec)  # the pump's (get_many, set_dispatched_many)

    def __repr__(self) -> str:
        return f"OutboxTable({self.display})"

    @property
    def display(self) -> str:
        return self.dialect.display(self.dialect.saga_table(self.spec))

    @classmethod
    def from_blueprint(cls, engine: Engine, blueprint: Blueprint, name: TableName) -> OutboxTable:
        return cls(*deployed_spec(engine, blueprint, name, Kind.OUTBOX, DECLARE_OUTBOX))

    @classmethod
    def from_database(
        cls, engine: Engine, table: str, schema: str | None = None, catalog: str | None = None, config_file: str = "alembic.ini"
    ) -> OutboxTable:
        """The outbox table as the revision the database is stamped with records it."""
        return cls.from_blueprint(engine, deployed_blueprint(engine, config_file), TableName(table, schema, catalog))

    # -- the four statements --------------------------------------------------------------
    def get(self, conn: Connection, message_id: str) -> OutboxRecord | None:
        """The message's row (None: never handled with the outbox)."""
        row = execute(conn, self.statements["get_outbox"], {"MessageId": message_id}).fetchone()
        return None if row is None else OutboxRecord(_flag(row[0]), deserialize(row[1]))

    def store(self, conn: Connection, message_id: str, operations: Sequence[OutgoingOperation]) -> None:
        """The handled message's row, not dispatched yet, in the caller's (the handler's) transaction."""
        params = {"MessageId": message_id, "Operations": serialize(operations), "PersistenceVersion": self.persistence_version}
        execute(conn, self.statements["store_outbox"], params)

    def set_dispatched(self, conn: Connection, message_id: str, at: datetime | None = None) -> None:
        """Dispatched at `at` (UTC; default now); the row keeps no operations ('[]')."""
        when = self.dialect.outbox_time(at or datetime.now(timezone.utc))
        execute(conn, self.statements["set_outbox_dispatched"], {"MessageId": message_id, "DispatchedAt": when})

    # -- a batch's rows at once (the pump) -----------------------------------------------------
    def get_many(self, conn: Connection, message_ids: Sequence[str]) -> dict[str, OutboxRecord]:
        """The rows of those messages that have one, by message id: one statement (get_outbox_batch)."""
        statement = self.batch_statements.get("get_outbox_batch")
        if statement is None:  # an engine without the batch form: one get a message
            return {message_id: record for message_id in message_ids if (record := self.get(conn, message_id)) is not None}
        if not message_ids:
            return {}
        rows = execute(conn, statement, {"MessageIds": self.dialect.list_parameter(list(message_ids))}).fetchall()
        return {row[0]: OutboxRecord(_flag(row[1]), deserialize(row[2])) for row in rows}

    def store_many(self, conn: Connection, rows: Sequence[tuple[str, Sequence[OutgoingOperation]]]) -> None:
        """The rows of several handled messages, (message id, operations) each, in one executemany."""
        version = self.persistence_version
        params = [{"MessageId": message_id, "Operations": serialize(ops), "PersistenceVersion": version} for message_id, ops in rows]
        execute_many(conn, self.statements["store_outbox"], params)

    def set_dispatched_many(self, conn: Connection, message_ids: Sequence[str], at: datetime | None = None) -> None:
        """Those messages' rows dispatched at `at` (as set_dispatched): one statement (set_outbox_batch_dispatched)."""
        if not message_ids:
            return
        when = self.dialect.outbox_time(at or datetime.now(timezone.utc))
        statement = self.batch_statements.get("set_outbox_batch_dispatched")
        if statement is None:
            execute_many(conn, self.statements["set_outbox_dispatched"], [{"MessageId": m, "DispatchedAt": when} for m in message_ids])
        else:
            execute(conn, statement, {"MessageIds": self.dialect.list_parameter(list(message_ids)), "DispatchedAt": when})

    def cleanup_batch(self, conn: Connection, before: datetime, batch_size: int) -> int:
        """Delete up to batch_size rows dispatched before `before` (UTC); how many went."""
        params = {"DispatchedBefore": self.dialect.outbox_time(before), "BatchSize": batch_size}
        return max(execute(conn, self.statements["cleanup_outbox"], params).rowcount, 0)


# ========================================================================================== the pump
def pump_outbox(transport: Transport, input_name: TableName, outbox: bool | str | OutboxTable, tenants: bool = False) -> PumpOutbox:
    """The outbox of a pump whose endpoint's input queue is `input_name`: outbox=True means the
    endpoint's default `<Endpoint_Name_>OutboxData` (a str: that table, for an endpoint with its own
    table_prefix). The table must exist: a pump never creates one. With tenant databases the table is
    in each of them (docs/tenants.md), looked for in each the first time a message reaches it."""
    if isinstance(outbox, OutboxTable):
        table = outbox
    elif tenants:
        name = outbox if isinstance(outbox, str) else default_table_prefix(input_name.table) + "OutboxData"
        spec = TableSpec(Kind.OUTBOX, TableName(name, input_name.schema, input_name.catalog), saga_prefix=name[: -len("OutboxData")])
        table = OutboxTable(transport.dialect, spec._replace(tenant=True))
    else:
        if isinstance(outbox, str):
            wanted = TableName(outbox, input_name.schema, input_name.catalog)
        elif transport.blueprint is not None:
            wanted = own_outbox(transport.blueprint, input_name)
        else:
            wanted = TableName(default_table_prefix(input_name.table) + "OutboxData", input_name.schema, input_name.catalog)
        name = wanted.table
        if transport.blueprint is not None:
            try:
                table = OutboxTable.from_blueprint(transport.engine, transport.blueprint, wanted)
            except errors.NotFound as missing:
                if isinstance(outbox, str):
                    raise
                hint = 'an endpoint with its own table_prefix names its table: MessagePump(..., outbox="<table_prefix>OutboxData")'
                raise errors.NotFound(f"{missing}; {hint}") from None
        else:
            table = OutboxTable(transport.dialect, TableSpec(Kind.OUTBOX, wanted, saga_prefix=name[: -len("OutboxData")]))
    if tenants:
        return PumpOutbox(transport, table)
    if not _exists(transport.engine, table):
        raise errors.NotFound(f"the pump's outbox table {table.display} does not exist{DECLARE_OUTBOX}")
    return PumpOutbox(transport, table)


def _exists(engine: Engine, table: OutboxTable) -> bool:
    with engine.connect() as conn:
        return table.dialect.table_exists(conn, table.dialect.saga_table(table.spec))


def own_outbox(blueprint: Blueprint, input_name: TableName) -> TableName:
    """outbox=True: the outbox table the deployed blueprint records as the endpoint's own, the
    endpoint of the input queue `input_name` (or of an instance queue `Endpoint.instance`). A
    blueprint compiled before owners were recorded: <Endpoint_Name_>OutboxData
    (schema.default_table_prefix), else the one outbox table in the queue's schema."""
    place = (input_name.schema, input_name.catalog)
    endpoint = input_name.table
    while True:
        spec = blueprint.own_table(endpoint, Kind.OUTBOX)
        if spec is not None and (spec.name.schema, spec.name.catalog) == place:
            return spec.name
        if "." not in endpoint:
            break
        endpoint = endpoint.rpartition(".")[0]
    default = TableName(default_table_prefix(input_name.table) + "OutboxData", *place)
    if blueprint.owners:
        return default
    beside = [spec.name for spec in blueprint.tables if spec.kind is Kind.OUTBOX and (spec.name.schema, spec.name.catalog) == place]
    return beside[0] if len(beside) == 1 and default not in beside else default


@dataclass
class _Taken:
    """What the handler's transaction of a batch leaves to the pump and to the dispatch."""

    handled: list[Message] = field(default_factory=list)  # counted by the pump after the commit
    outcomes: list[str | None] = field(default_factory=list)
    settled: list[Any] = field(default_factory=list)  # positions deleted in the handler's transaction
    stored: list[tuple[Message, list[OutgoingOperation]]] = field(default_factory=list)  # to dispatch
    stored_ids: set[str] = field(default_factory=set)
    # rows handled before and not dispatched: dispatched in the handler's transaction, once
    redispatch: dict[str, list[OutgoingOperation]] = field(default_factory=dict)
    failures: int = 0  # handlers that failed (an isolated batch: each back to its savepoint)


class PumpOutbox:
    """The pump's receive with the outbox (the module's docstring): `receive` is called by the
    pump's receive task in place of its own, with its connection and what the pump lends it (the seam)."""

    def __init__(self, transport: Transport, table: OutboxTable):
        self.transport = transport
        self.table = table
        self._tenant_tables: dict[int, OutboxTable] = {}  # id(engine) -> the table in that tenant database, once found there
        self._locks: dict[str, Statement | None] = {}  # queue address -> its lock joined with this table (None: apart)
        self._takes: dict[str, Statement | None] = {}  # queue address -> its take setting this table's rows (None: apart)

    def receive(self, pump: PumpSeam, link: Link, size: int, isolated: bool) -> tuple[int, int]:
        """Up to `size` messages handled: (how many were taken off the queue or tried (0: empty), how
        many handlers failed). Isolated: each handler after its own savepoint; optimistic: none, and
        a handler's failure rolls the whole transaction back, its outbox rows with it (the pump's
        failure step raises out of it; the pump runs the batch again isolated)."""
        if pump.tenant is not None:
            return self._receive_tenants(pump, pump.tenant, link, size)
        conn = link.connection
        took = None  # how many of the stored messages the dispatch's transaction took, where it began with the commit
        with conn.begin():
            messages, expired, records = self._lock(pump.queue, link, size)
            taken = _Taken(settled=list(expired))
            for message in messages:
                self._handle(pump, link, message, records.get(message.id), taken, isolated)
            with self._committing(conn) as begin_next:  # what is left needs no answer: sent with the commit
                self.table.store_many(conn, [(message.id, operations) for message, operations in taken.stored])
                if taken.redispatch:
                    self.dispatch(conn, [op for operations in taken.redispatch.values() for op in operations])
                    self.table.set_dispatched_many(conn, list(taken.redispatch))
                pump.queue.delete_locked(link.driver, taken.settled)
                take = None
                if taken.stored and begin_next is not None:  # the dispatch's transaction and its take go with the commit
                    begin_next()
                    take, rows_set = self._taking(pump.queue, link.driver, taken.stored)
            if take is not None:
                # The dispatch's transaction, begun above, ends here: on leaving this block the
                # Connection's own commit would commit whatever it holds.
                took = take.rowcount
                if not self._dispatch_taken(conn, taken.stored, took, rows_set):
                    link.driver.connection.rollback()
        if taken.stored and took is None:  # the handler's transaction committed alone
            self.dispatch_stored(pump, conn, taken.stored)
        elif took is not None and took != len(taken.stored) and len(taken.stored) > 1:  # another receive took some
            for item in taken.stored:
                self.dispatch_stored(pump, conn, [item])
        pump.committed(taken.handled, taken.outcomes)
        return len(messages) + len(expired), taken.failures

    def _lock(self, queue: Queue, link: Link, size: int) -> tuple[list[Message], list[Any], dict[str, OutboxRecord]]:
        """Up to `size` messages locked with their rows (by message id; none: never handled) and the
        positions of the expired ones: one statement where the engine joins the two
        (Dialect.outbox_lock_batch), else the lock, then get_many."""
        if queue.address not in self._locks:
            self._locks[queue.address] = self.table.dialect.outbox_lock_batch(self.table.spec, queue.statements["lock_batch"])
        statement = self._locks[queue.address]
        if statement is None:
            messages, expired = queue.lock_batch(link.driver, size)
            return messages, expired, self.table.get_many(link.connection, [message.id for message in messages])
        found, expired = queue.lock_batch_joined(link.driver, statement, size)
        dispatched, operations = statement.positions["Dispatched"], statement.positions["Operations"]
        records = {
            message.id: OutboxRecord(_flag(row[dispatched]), deserialize(row[operations]))
            for message, row in found
            if row[dispatched] is not None
        }
        return [message for message, _ in found], expired, records

    def _handle(self, pump: PumpSeam, link: Link, message: Message, record: OutboxRecord | None, taken: _Taken, isolated: bool) -> None:
        """One message of the batch; record: its row as the batch read it. A second copy of a message
        handled earlier in this batch is handled before as well (its row is stored with the batch)."""
        if record is not None or message.id in taken.stored_ids:  # handled before: never again
            if record is not None and not record.dispatched and message.id not in taken.redispatch:  # what it sent leaves now
                log.info("message %s was handled before; dispatching its %d stored operation(s)", message.id, len(record.operations))
                taken.redispatch[message.id] = record.operations
            taken.settled.append(message.order)
            taken.handled.append(message)
            taken.outcomes.append(None)
            return
        outgoing = Outgoing(self.transport)
        savepoint = pump.queue.savepoint if isolated else None
        context = pump.context(link, savepoint, outgoing)
        try:
            outcome = pump.handle(message, context)
        except Exception as exc:  # the handler's failure: back to its savepoint (or the whole batch back), the message stays
            pump.failed(message, exc, context)
            taken.failures += 1
            return
        taken.handled.append(message)
        taken.outcomes.append(outcome)
        if outcome == "processed":  # its row is stored with the batch's, before the commit
            taken.stored.append((message, outgoing.operations))
            taken.stored_ids.add(message.id)
        else:  # poison, forwarded or moved to the error queue: sent in this transaction, no row
            taken.settled.append(message.order)

    def dispatch_stored(self, pump: PumpSeam, conn: Connection, stored: list[tuple[Message, list[OutgoingOperation]]]) -> None:
        """After the handler's commit: take the messages, send their operations, set their rows as
        dispatched, in one transaction. When another receive took some meanwhile (it found their
        rows and dispatched them), that is undone and each message goes alone: those taken are left."""
        with conn.begin() as transaction:
            take, rows_set = self._taking(pump.queue, conn, stored)
            if self._dispatch_taken(conn, stored, take.rowcount, rows_set):
                return
            transaction.rollback()
        if len(stored) > 1:
            for item in stored:
                self.dispatch_stored(pump, conn, [item])

    def _taking(self, queue: Queue, conn: Conn, stored: list[tuple[Message, list[OutgoingOperation]]]) -> tuple[Any, bool]:
        """The dispatch's take of the stored messages: the cursor whose rowcount is how many it took
        once the answer has come, and whether it set their rows as dispatched as well (one statement
        where the engine has one, Dialect.outbox_take_batch)."""
        if queue.address not in self._takes:
            self._takes[queue.address] = self.table.dialect.outbox_take_batch(self.table.spec, queue.statements["delete_locked"])
        statement = self._takes[queue.address]
        orders = [message.order for message, _ in stored]
        if statement is None:
            return queue.deleting_locked(conn, orders), False
        dialect = self.table.dialect
        params = {
            "Orders": dialect.list_parameter(orders),
            "MessageIds": dialect.list_parameter([message.id for message, _ in stored]),
            "DispatchedAt": dialect.outbox_time(datetime.now(timezone.utc)),
        }
        return execute(conn, statement, params), True

    def _dispatch_taken(self, conn: Connection, stored: list[tuple[Message, list[OutgoingOperation]]], took: int, rows_set: bool) -> bool:
        """The dispatch's transaction once its take has deleted `took` messages: all of them taken,
        their operations sent, their rows set as dispatched (unless the take did) and the commit;
        False, having written nothing more, when another receive took some (the caller rolls the
        take back)."""
        if took != len(stored):
            return False
        # not durable: lost in a crash of the server, it is redone from the rows the handler's
        # transaction made durable (its messages back in their queue, their rows not dispatched)
        with self._committing(conn, durable=False):
            self.dispatch(conn, [op for _, operations in stored for op in operations])
            if not rows_set:
                self.table.set_dispatched_many(conn, [message.id for message, _ in stored])
        return True

    def _committing(
        self, conn: Connection, table: OutboxTable | None = None, durable: bool = True
    ) -> AbstractContextManager[Callable[[], None] | None]:
        """The block's writes and the commit of `conn`'s transaction in one round trip where the
        engine's driver can (Dialect.committing_together); the transaction's own commit follows.
        `table`: the outbox table of the database `conn` is on (a tenant's), if not this one."""
        driver = driver_of(conn)
        return (table or self.table).dialect.committing_together(driver.connection, driver.cursor, durable)

    def dispatch(self, conn: Connection, operations: Sequence[OutgoingOperation]) -> None:
        """Send stored operations to their queues, in the caller's transaction."""
        dispatch(conn, self.transport, operations)

    # -- tenant databases (docs/tenants.md) ---------------------------------------------------
    def _receive_tenants(self, pump: PumpSeam, tenant_of: Callable[[Message], TenantLink], link: Link, size: int) -> tuple[int, int]:
        """With tenant databases, three steps per batch: (1) the messages are locked in the shared
        database; each handler runs in its tenant's transaction, which stores its outbox row and
        commits; (2) the shared transaction takes the messages and sends their operations, and
        commits; (3) each row is set as dispatched in its tenant database. A crash before (1)
        commits handles the message again; between (1) and (2) the message comes back and its row
        sends what it stored (the handler does not run again); between (2) and (3) the message and its
        operations are gone, sent once, and its row stays not dispatched (docs/tenants.md). Step (3)
        sets a tenant's rows of the batch in one statement."""
        stored: list[tuple[Message, list[OutgoingOperation], Engine]] = []
        with link.connection.begin():
            messages, expired = pump.queue.lock_batch(link.driver, size)
            taken = _Taken(settled=list(expired))
            for message in messages:
                self._handle_in_tenant(pump, tenant_of, link, message, taken, stored)
            with self._committing(link.connection):
                self.dispatch_tenants(pump, link, taken.settled, stored)
        by_tenant: dict[int, tuple[Engine, list[str]]] = {}
        for message, _, engine in stored:
            by_tenant.setdefault(id(engine), (engine, []))[1].append(message.id)
        for engine, message_ids in by_tenant.values():  # one transaction, one statement for a tenant's rows
            table = self._table_in(engine)
            with engine.begin() as conn, self._committing(conn, table):
                table.set_dispatched_many(conn, message_ids)
        pump.committed(taken.handled, taken.outcomes)
        return len(messages) + len(expired), taken.failures

    def _handle_in_tenant(
        self, pump: PumpSeam, tenant_of: Callable[[Message], TenantLink], link: Link, message: Message, taken: _Taken, stored: list
    ) -> None:
        """Step (1) for one message, in its tenant's transaction (none for unreadable headers: the
        pump moves it to the error queue through the shared one)."""
        context = pump.context(link, pump.queue.savepoint)
        tenant = None
        try:
            if message.headers is not None:
                tenant = tenant_of(message)
                table = self._table_in(tenant.engine)
                record = table.get(tenant.connection, message.id)
                if record is not None:  # handled before: never again; what it stored leaves now if it has not
                    if not record.dispatched and message.id not in {m.id for m, _, _ in stored}:
                        log.info(
                            "message %s was handled before; dispatching its %d stored operation(s)", message.id, len(record.operations)
                        )
                        stored.append((message, record.operations, tenant.engine))
                    outcome = None
                else:
                    outgoing = Outgoing(self.transport)
                    context = pump.context(tenant, pump.queue.savepoint, outgoing, link)
                    outcome = pump.handle(message, context)
                    if outcome == "processed":
                        with self._committing(tenant.connection, table):
                            table.store(tenant.connection, message.id, outgoing.operations)
                        tenant.commit()
                        stored.append((message, outgoing.operations, tenant.engine))
            else:
                outcome = pump.handle(message, context)
        except Exception as exc:  # the handler's (or its tenant database's) failure: its transaction rolls back, the message stays
            pump.failed(message, exc, context)
            taken.failures += 1
            return
        finally:
            if tenant is not None:
                tenant.close()
        taken.settled.append(message.order)
        taken.handled.append(message)
        taken.outcomes.append(outcome)

    def dispatch_tenants(self, pump: PumpSeam, link: Link, settled: list[Any], stored: list) -> None:
        """Step (2), in the shared transaction once every tenant's has committed: the messages handled
        are taken and their stored operations sent."""
        pump.queue.delete_locked(link.driver, settled)
        for _, operations, _ in stored:
            self.dispatch(link.connection, operations)

    def _table_in(self, engine: Engine) -> OutboxTable:
        """The outbox table in a tenant database (looked for there once)."""
        found = self._tenant_tables.get(id(engine))
        if found is None:
            found = OutboxTable(engines.for_sqlalchemy(engine.dialect.name), self.table.spec, self.table.persistence_version)
            if not _exists(engine, found):
                raise errors.NotFound(
                    f"the pump's outbox table {found.display} does not exist in the tenant database; "
                    "run `alembic -x role=tenant upgrade head` on it (docs/tenants.md)"
                )
            self._tenant_tables[id(engine)] = found
        return found


# ========================================================================================== cleanup
@dataclass
class CleanupReport:
    """What `cleanup` deleted: rows and batches per outbox table, and the cutoff it used."""

    cutoff: datetime  # rows dispatched before this (UTC) were deleted
    batch_size: int
    deleted: dict[str, int] = field(default_factory=dict)  # table -> rows deleted
    batches: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())

    def to_json(self) -> dict:
        tables = [{"table": name, "deleted": n, "batches": self.batches[name]} for name, n in self.deleted.items()]
        return {
            "status": "cleaned",
            "cutoff": self.cutoff.isoformat(timespec="seconds"),
            "batch_size": self.batch_size,
            "deleted": self.total,
            "tables": tables,
        }


def cleanup(
    engine: Engine,
    older_than: timedelta,
    *,
    batch_size: int = DEFAULT_CLEANUP_BATCH,
    config_file: str = "alembic.ini",
    blueprint: Blueprint | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CleanupReport:
    """Delete the rows of every outbox table of the deployed topology dispatched more than
    `older_than` ago, `batch_size` rows per transaction, until a batch comes back short; rows not
    dispatched are never deleted. `progress(table, deleted so far, batches)` after each batch."""
    if batch_size < 1:
        raise errors.UsageError(f"the batch size must be at least 1, not {batch_size}")
    if older_than < timedelta(0):
        raise errors.UsageError(f"the age must not be negative: {older_than}")
    blueprint = blueprint or deployed_blueprint(engine, config_file)
    dialect = engines.for_sqlalchemy(engine.dialect.name)
    tables = [OutboxTable(dialect, spec) for spec in blueprint.tables if spec.kind is Kind.OUTBOX]
    if not tables:
        raise errors.NotFound("the deployed topology has no outbox table (`outbox: true` on an endpoint declares one)")
    report = CleanupReport(datetime.now(timezone.utc) - older_than, batch_size)
    for table in tables:
        deleted = batches = 0
        while True:
            with engine.begin() as conn:
                n = table.cleanup_batch(conn, report.cutoff, batch_size)
            deleted, batches = deleted + n, batches + 1
            if progress is not None:
                progress(table.display, deleted, batches)
            if n < batch_size:
                break
        report.deleted[table.display], report.batches[table.display] = deleted, batches
    return report
