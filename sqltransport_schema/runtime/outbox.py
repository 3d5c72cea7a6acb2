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
from ..db import upgrade_command_for
from ..defaults import DEFAULT_CLEANUP_BATCH
from ..revisions import deployed_blueprint
from ..schema import Blueprint, Kind, TableName, TableSpec, default_table_prefix
from ..statements import Statement
from .sagas import DEFAULT_PERSISTENCE_VERSION, deployed_spec, stamped_blueprint
from .transport import Conn, Message, Queue, Transport, driver_of, execute, execute_many, with_standard_headers

if TYPE_CHECKING:
    from .receiving import Batch, Context, Link, TenantLink

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
        return message_id, dict(with_standard_headers(headers, message_id))

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
        return self.dialect.display(self.dialect.persistence_table(self.spec))

    @classmethod
    def from_blueprint(cls, engine: Engine, blueprint: Blueprint, name: TableName) -> OutboxTable:
        return cls(*deployed_spec(engine, blueprint, name, Kind.OUTBOX, DECLARE_OUTBOX))

    @classmethod
    def from_database(
        cls, engine: Engine, table: str, schema: str | None = None, catalog: str | None = None, config_file: str = "alembic.ini"
    ) -> OutboxTable:
        """The outbox table as the revision the database is stamped with records it."""
        return cls.from_blueprint(engine, stamped_blueprint(engine, config_file), TableName(table, schema, catalog))

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
        return table.dialect.table_exists(conn, table.dialect.persistence_table(table.spec))


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


Stored = list[tuple[Message, list[OutgoingOperation], Any]]  # (message, its operations, its tenant's engine or None)


class PumpOutbox:
    """The outbox's steps in the pump's one receive (runtime/receiving.py): the lock joined with the
    rows, the check of a message's row, the capture and store of what its handler sends, the closing
    writes of the receive's transaction and the dispatch after its commit (the module's docstring)."""

    def __init__(self, transport: Transport, table: OutboxTable):
        self.transport = transport
        self.table = table
        self._tenant_tables: dict[int, OutboxTable] = {}  # id(engine) -> the table in that tenant database, once found there
        self._locks: dict[str, Statement | None] = {}  # queue address -> its lock joined with this table (None: apart)
        self._takes: dict[str, Statement | None] = {}  # queue address -> its take setting this table's rows (None: apart)

    # -- the steps of one message -----------------------------------------------------------
    def lock(self, queue: Queue, link: Link, size: int) -> tuple[list[Message], list[Any], dict[str, OutboxRecord]]:
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

    def handled_before(self, message: Message, batch: Batch, tenant: TenantLink | None) -> bool:
        """Whether the message has a row (read with the lock, or in its tenant's database): it is never
        handled again, and what the row holds and was not dispatched leaves with this receive. A second
        copy of a message handled earlier in this batch is handled before as well."""
        if tenant is None:
            record = batch.records.get(message.id)
            if record is None and message.id not in batch.stored_ids:
                return False
            if record is not None and not record.dispatched and message.id not in batch.redispatch:
                log.info("message %s was handled before; dispatching its %d stored operation(s)", message.id, len(record.operations))
                batch.redispatch[message.id] = record.operations
            return True
        record = self._table_in(tenant.engine).get(tenant.connection, message.id)
        if record is None:
            return False
        if not record.dispatched and message.id not in batch.stored_ids:
            log.info("message %s was handled before; dispatching its %d stored operation(s)", message.id, len(record.operations))
            batch.stored.append((message, record.operations, tenant.engine))
            batch.stored_ids.add(message.id)
        return True

    def outgoing(self) -> Outgoing:
        """Where a handler's sends and publishes are captured."""
        return Outgoing(self.transport)

    def store(
        self, context: Context, tenant: TenantLink | None, message: Message, operations: list[OutgoingOperation], batch: Batch
    ) -> None:
        """The handled message's row, where a failure is the message's own: in its tenant's
        transaction (committed next, with it), or in an isolated batch after its savepoint. An
        optimistic batch's rows are stored together by `closing`."""
        if tenant is not None:
            table = self._table_in(tenant.engine)
            with self._committing(tenant.connection, table):
                table.store(tenant.connection, message.id, operations)
        elif batch.savepoints:
            self.table.store(context.connection, message.id, operations)  # its savepoint taken first
            batch.written.add(message.id)

    def stored(self, message: Message, operations: list[OutgoingOperation], batch: Batch, tenant: TenantLink | None) -> None:
        """A handled message: one database: its row is stored with the batch's and the message is
        taken by the dispatch after the commit; tenant databases: its row was stored and committed,
        the message is taken with the receive."""
        batch.gone(message, "processed", settle=tenant is not None)
        batch.stored.append((message, operations, tenant.engine if tenant is not None else None))
        batch.stored_ids.add(message.id)

    # -- the receive's transaction and after ----------------------------------------------------------
    def closing(self, queue: Queue, link: Link, batch: Batch) -> None:
        """The receive's last writes, before its commit: one database: the rows stored, the rows
        handled before dispatched, the messages settled deleted, and where the driver can, the
        dispatch's transaction begun with the commit and its take sent along; tenant databases: the
        messages handled deleted and their operations sent (step 2 of docs/tenants.md)."""
        conn = link.connection
        if batch.tenants:
            with self._committing(conn):
                queue.delete_locked(link.driver, batch.settled + batch.expired)
                for _, operations, _ in batch.stored:
                    self.dispatch(conn, operations)
            return
        with self._committing(conn) as begin_next:  # what is left needs no answer: sent with the commit
            self.table.store_many(
                conn, [(message.id, operations) for message, operations, _ in batch.stored if message.id not in batch.written]
            )
            if batch.redispatch:
                self.dispatch(conn, [op for operations in batch.redispatch.values() for op in operations])
                self.table.set_dispatched_many(conn, list(batch.redispatch))
            queue.delete_locked(link.driver, batch.settled + batch.expired)
            take = None
            if batch.stored and begin_next is not None:  # the dispatch's transaction and its take go with the commit
                begin_next()
                take, rows_set = self._taking(queue, link.driver, batch.stored)
        if take is not None:
            # The dispatch's transaction, begun above, ends here: on leaving the receive's block the
            # Connection's own commit would commit whatever it holds.
            batch.took = take.rowcount
            if not self._dispatch_taken(conn, batch.stored, batch.took, rows_set):
                link.driver.connection.rollback()

    def after_commit(self, queue: Queue, link: Link, batch: Batch) -> None:
        """After the receive's commit: one database: the dispatch of the stored rows (unless it went
        with the commit); tenant databases: the rows set as dispatched, a tenant's in one statement
        (step 3 of docs/tenants.md)."""
        if batch.tenants:
            by_tenant: dict[int, tuple[Engine, list[str]]] = {}
            for message, _, engine in batch.stored:
                assert engine is not None  # a tenant's row
                by_tenant.setdefault(id(engine), (engine, []))[1].append(message.id)
            for tenant, message_ids in by_tenant.values():  # one transaction, one statement for a tenant's rows
                table = self._table_in(tenant)
                with tenant.begin() as conn, self._committing(conn, table):
                    table.set_dispatched_many(conn, message_ids)
            return
        if batch.stored and batch.took is None:  # the receive's transaction committed alone
            self.dispatch_stored(queue, link.connection, batch.stored)
        elif batch.took is not None and batch.took != len(batch.stored) and len(batch.stored) > 1:  # another receive took some
            for item in batch.stored:
                self.dispatch_stored(queue, link.connection, [item])

    def dispatch_stored(self, queue: Queue, conn: Connection, stored: Stored) -> None:
        """After the handler's commit: take the messages, send their operations, set their rows as
        dispatched, in one transaction. When another receive took some meanwhile (it found their
        rows and dispatched them), that is undone and each message goes alone: those taken are left."""
        with conn.begin() as transaction:
            take, rows_set = self._taking(queue, conn, stored)
            if self._dispatch_taken(conn, stored, take.rowcount, rows_set):
                return
            transaction.rollback()
        if len(stored) > 1:
            for item in stored:
                self.dispatch_stored(queue, conn, [item])

    def _taking(self, queue: Queue, conn: Conn, stored: Stored) -> tuple[Any, bool]:
        """The dispatch's take of the stored messages: the cursor whose rowcount is how many it took
        once the answer has come, and whether it set their rows as dispatched as well (one statement
        where the engine has one, Dialect.outbox_take_batch)."""
        if queue.address not in self._takes:
            self._takes[queue.address] = self.table.dialect.outbox_take_batch(self.table.spec, queue.statements["delete_locked"])
        statement = self._takes[queue.address]
        orders = [message.order for message, *_ in stored]
        if statement is None:
            return queue.deleting_locked(conn, orders), False
        dialect = self.table.dialect
        params = {
            "Orders": dialect.list_parameter(orders),
            "MessageIds": dialect.list_parameter([message.id for message, *_ in stored]),
            "DispatchedAt": dialect.outbox_time(datetime.now(timezone.utc)),
        }
        return execute(conn, statement, params), True

    def _dispatch_taken(self, conn: Connection, stored: Stored, took: int, rows_set: bool) -> bool:
        """The dispatch's transaction once its take has deleted `took` messages: all of them taken,
        their operations sent, their rows set as dispatched (unless the take did) and the commit;
        False, having written nothing more, when another receive took some (the caller rolls the
        take back)."""
        if took != len(stored):
            return False
        # not durable: lost in a crash of the server, it is redone from the rows the handler's
        # transaction made durable (its messages back in their queue, their rows not dispatched)
        with self._committing(conn, durable=False):
            self.dispatch(conn, [op for _, operations, _ in stored for op in operations])
            if not rows_set:
                self.table.set_dispatched_many(conn, [message.id for message, *_ in stored])
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
    blueprint = blueprint or deployed_blueprint(engine, config_file, upgrade_command_for(engine))
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
