"""The SQL Server runtime's binds through the recording pyodbc double (issue 53 items 3 and 6, and the
double's binds held to upstream's): each parameter bound with the SQL type upstream's ADO.NET code
binds (tests/upstream/mssql_binds.json, read from each tag's source), a None body as varbinary(max)
rather than pyodbc's untyped NULL; send_many one round trip (fast_executemany); the runtime's session
at READ COMMITTED; CorrelationId and ReplyToAddress copied from the headers on 3.1-6.x; the purge of
expired messages committed batch by batch on a connection of its own, as upstream's purger."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sqltransport_schema import wire
from sqltransport_schema.runtime.transport import EndpointTables, Transport
from sqltransport_schema.schema import TableName

from .support.messages import headers
from .support.pyodbc_double import Server

UPSTREAM = json.loads((Path(__file__).parent / "upstream" / "mssql_binds.json").read_text(encoding="utf-8"))
QUEUE = TableName("Sales", "dbo")
CASES = [(name, tag) for name, tags in UPSTREAM["statements"].items() for tag in tags]


def transport(server: Server, version: str) -> Transport:
    """A transport over the double, whose server answers the runtime's reads with no messages."""
    server.on("deleted.", lambda sql, params: [[]])  # a receive: no message
    server.on("isnull(cast(max", lambda sql, params: [[(0,)]])  # peek: none waits
    server.on("count(*) Id", lambda sql, params: [[(0,)]])  # the count peeks: none waits
    server.on("FROM [dbo].[Sales.Delayed]", lambda sql, params: [0, *([[(0,)]] if "@@ROWCOUNT AS Moved" in sql else [])])  # none due
    return Transport(server.engine(), version)


def calls_of(server: Server, statement) -> list:
    sql = statement.native("qmark")[0]
    return [call for call in server.calls if call.sql == sql]


def run(name: str, server: Server, version: str):
    """Run the runtime's own path for a statement on the double; the statement it ran."""
    tr = transport(server, version)
    queue, tables = tr.queue(QUEUE), EndpointTables(tr, QUEUE, "Delayed")
    with tr.engine.connect() as conn:
        if name == "send":
            queue.send(conn, None, headers(1))
            return queue.statements["send"]
        if name == "store_delayed":
            tables.send_delayed(conn, queue, None, headers(2), due_after=5)
            return tables.statements["store_delayed"]
        if name == "move_due_delayed":
            tables.move_due(conn, 10)
            return tables.statements.get("move_due_delayed_counted") or tables.statements["move_due_delayed"]
        queue.purge_expired(conn, batch_size=10)
        return queue.statements["purge_expired"]


@pytest.mark.parametrize("name,tag", CASES, ids=[f"{name}-{tag}" for name, tag in CASES])
def test_each_parameter_is_bound_as_upstream_binds_it(name, tag):
    upstream = UPSTREAM["statements"][name][tag]
    server = Server()
    statement = run(name, server, tag)
    (call,) = calls_of(server, statement)
    order = statement.native("qmark")[1]
    assert set(order) == set(upstream["params"]), f"{tag} {upstream['path']}: the release binds {sorted(upstream['params'])}"
    for position, param in enumerate(order):
        fact = upstream["params"][param]
        expected = UPSTREAM["odbc"][fact["type"]]
        found = call.types[position]
        if fact["size"] == -1:
            assert found == expected + "(max)", (param, found)
        else:  # ADO.NET sizes it by the value: the type is the fact, any size goes
            assert found.partition("(")[0] == expected, (param, found)


def test_a_none_body_binds_as_varbinary_max_and_the_sizes_are_cleared_after():
    server = Server()
    tr = transport(server, "9.1")
    queue = tr.queue(QUEUE)
    with tr.engine.connect() as conn:
        queue.send(conn, None, headers(1))
        queue.peek(conn)
    send, peek = calls_of(server, queue.statements["send"])[0], calls_of(server, queue.statements["peek"])[0]
    at = queue.statements["send"].native("qmark")[1].index("Body")
    assert send.params[at] is None and send.types[at] == "SQL_VARBINARY(max)"
    assert peek.input_sizes is None  # pyodbc keeps input sizes for later statements: the runtime clears them


def test_without_its_input_size_a_none_body_is_untyped():
    """Why: pyodbc binds None by SQLDescribeParam, else varchar, which SQL Server refuses for varbinary(max)."""
    from .support.pyodbc_double import sql_type

    assert sql_type(None).startswith("SQL_UNKNOWN")


def test_send_many_is_one_round_trip():
    server = Server()
    tr = transport(server, "9.1")
    queue = tr.queue(QUEUE)
    with tr.engine.connect() as conn:
        queue.peek(conn)  # the runtime's cursor made (and its session set up) first
        before = server.round_trips
        ids = queue.send_many(conn, [(None if n % 2 else b"x", headers(n)) for n in range(50)])
        assert server.round_trips == before + 1 and len(ids) == 50
    (call,) = [call for call in server.calls if call.method == "executemany"]
    assert call.fast and len(call.params) == 50
    at = queue.statements["send"].native("qmark")[1].index("Body")
    assert {types[at] for types in call.types} == {"SQL_VARBINARY(max)"}


def test_the_runtime_session_reads_committed_before_it_receives():
    server = Server()
    tr = transport(server, "9.1")
    queue = tr.queue(QUEUE)
    with tr.engine.connect() as conn:
        queue.receive(conn)
    sent = [call.sql for call in server.calls]
    isolation = sent.index("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    (receive,) = [at for at, sql in enumerate(sent) if "[dbo].[Sales] WITH (UPDLOCK, READPAST" in sql]
    assert isolation < receive and sent.count(sent[isolation]) == 1  # once per connection, before its first statement


@pytest.mark.parametrize("version,copied", [("3.1.0", True), ("4.0.0", True), ("5.0.3", True), ("6.3.1", True), ("7.0.0", False)])
def test_correlation_and_reply_to_come_from_the_headers(version, copied):
    server = Server()
    tr = transport(server, version)
    queue = tr.queue(QUEUE)
    sent = {**headers(1), wire.CORRELATION_ID: "order-42", wire.REPLY_TO_ADDRESS: "Billing@[dbo]"}
    with tr.engine.connect() as conn:
        queue.send(conn, b"x", sent)
        queue.send(conn, b"y", wire.encode_headers(sent))  # passed on unchanged (the error queue, forwarding)
    order = queue.statements["send"].native("qmark")[1]
    for call in calls_of(server, queue.statements["send"]):
        values = dict(zip(order, call.params))
        if copied:
            assert (values["CorrelationId"], values["ReplyToAddress"]) == ("order-42", "Billing@[dbo]")
        else:
            assert "CorrelationId" not in values and "ReplyToAddress" not in values


class ExpiredRows:
    def __init__(self, count: int):
        self.count = count

    def purge(self, sql: str, params: tuple) -> list:
        (batch,) = params
        deleted = min(batch, self.count)
        self.count -= deleted
        return [deleted]


def test_purge_expired_commits_each_batch_on_its_own_connection():
    server, rows = Server(), ExpiredRows(23)
    tr = transport(server, "9.1")
    queue = tr.queue(QUEUE)
    server.on("Expires < GETUTCDATE()", rows.purge)
    commits = server.commits
    assert queue.purge_expired(batch_size=10) == 23
    assert server.commits - commits == 3 and rows.count == 0  # a transaction per batch, as upstream's purger


def test_purge_expired_on_the_callers_connection_stays_in_its_transaction():
    server, rows = Server(), ExpiredRows(23)
    tr = transport(server, "9.1")
    queue = tr.queue(QUEUE)
    server.on("Expires < GETUTCDATE()", rows.purge)
    with tr.engine.connect() as conn:
        commits = server.commits
        assert queue.purge_expired(conn, batch_size=10) == 23
        assert server.commits == commits


# ------------------------------------------------------------------ the pump's purge of expired messages
def pump_on_double(version: str, **options):
    from sqltransport_schema.runtime.pump import MessagePump

    server, rows = Server(), ExpiredRows(12)
    server.on("Expires < GETUTCDATE()", rows.purge)
    tr = transport(server, version)
    pump = MessagePump(tr, tr.queue(QUEUE), lambda message, context: None, peek_delay=0.1, **options)
    return server, rows, pump


def purges_and_peeks(server: Server) -> list[str]:
    return [
        "purge" if "Expires < GETUTCDATE()" in call.sql else "peek"
        for call in server.calls
        if "Expires < GETUTCDATE()" in call.sql or "count(*)" in call.sql or "isnull(cast(max" in call.sql
    ]


@pytest.mark.parametrize("version", ["4.0.0", "5.0.3", "6.1.1"])
def test_the_pump_of_4_0_to_6_1_1_purges_expired_messages_once_before_it_receives(version):
    server, rows, pump = pump_on_double(version)
    pump.start()
    deadline = time.monotonic() + 5
    while purges_and_peeks(server).count("peek") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    pump.stop(5)
    seen = purges_and_peeks(server)
    assert seen[:2] == ["purge", "peek"] and "purge" not in seen[2:] and rows.count == 0


def test_the_pump_of_3_1_purges_expired_messages_periodically():
    server, rows, pump = pump_on_double("3.1.0", purge_interval=0.05)
    pump.start()
    deadline = time.monotonic() + 5
    while purges_and_peeks(server).count("purge") < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    pump.stop(5)
    assert purges_and_peeks(server).count("purge") >= 4 and rows.count == 0


@pytest.mark.parametrize(
    "version,asked,purges", [("6.1.2", None, False), ("9.1", None, False), ("9.1", True, True), ("4.0.0", False, False)]
)
def test_later_pumps_purge_only_when_asked(version, asked, purges):
    server, rows, pump = pump_on_double(version, purge_expired=asked)
    pump.start()
    deadline = time.monotonic() + 5
    while purges_and_peeks(server).count("peek") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    pump.stop(5)
    assert ("purge" in purges_and_peeks(server)) is purges


# ------------------------------------------------------------------ the outbox on the double
def test_the_outbox_runs_its_statements_with_unicode_and_timestamp_binds():
    """SQL persistence's outbox on SQL Server: the handler's store, the lookups, the dispatch and the cleanup each
    send their own statement's text, one execute (or one fast executemany) each; MessageId and Operations bind as
    nvarchar (ADO.NET's string: never varchar, which would lose what is not in the code page), the times as
    timestamps, the batch size as an integer."""
    from datetime import datetime, timedelta, timezone

    from sqltransport_schema.runtime.outbox import OutboxTable, OutgoingOperation
    from sqltransport_schema.schema import Kind, TableSpec

    server = Server()
    spec = TableSpec(Kind.OUTBOX, TableName("Sales_OutboxData", "dbo"), saga_prefix="Sales_")
    table = OutboxTable(Transport(server.engine(), "9.1").dialect, spec)
    server.on("DELETE TOP", lambda sql, params: [3])
    operation = OutgoingOperation("ä-1", "ünïcode".encode(), {"NServiceBus.MessageId": "ä-1"}, {"Destination": "Billing"})
    with server.engine().connect() as conn:
        assert table.get(conn, "m-1") is None
        table.store(conn, "m-1", [operation])
        table.store_many(conn, [("m-2", [operation]), ("m-3", [])])
        table.set_dispatched(conn, "m-1")
        table.set_dispatched_many(conn, ["m-2", "m-3"])
        assert table.cleanup_batch(conn, datetime.now(timezone.utc) - timedelta(days=7), 500) == 3
    ran = {name: calls_of(server, statement) for name, statement in {**table.statements, **table.batch_statements}.items()}
    assert {name for name, calls in ran.items() if calls} >= {"get_outbox", "store_outbox", "set_outbox_dispatched", "cleanup_outbox"}
    for name, calls in ran.items():
        for call in calls:
            rows = call.types if call.method == "executemany" else [call.types]
            assert call.method == "execute" or call.fast, (name, call.method)
            for types in rows:
                assert not any(t.startswith("SQL_VARCHAR") for t in types), (name, types)
    (store,) = ran["store_outbox"][:1]
    assert store.types[:2] == ("SQL_WVARCHAR", "SQL_WVARCHAR"), store.types  # MessageId, Operations
    (dispatched,) = ran["set_outbox_dispatched"][:1]
    assert "SQL_TYPE_TIMESTAMP" in dispatched.types, dispatched.types
    (cleanup,) = ran["cleanup_outbox"]
    assert sorted(cleanup.types) == ["SQL_INTEGER", "SQL_TYPE_TIMESTAMP"], cleanup.types
