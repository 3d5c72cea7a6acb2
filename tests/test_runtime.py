"""The runtime against tables made by the project's own migrations, on real SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .support import catalog
from .support.messages import headers
from .support.runtime import TOPOLOGY, deployed


def test_from_database_reads_the_deployed_version(transport):
    assert transport.version == "9.1"
    assert transport.subscription_table.table == "SubscriptionRouting"


def test_fifo_order_and_headers_round_trip(transport):
    sales = transport.queue("Sales")
    sent = []
    with transport.engine.begin() as conn:
        for n in range(25):
            h = headers(n, path="a/b", text="Fäktura ☃")
            sent.append((sales.send(conn, f"body {n}".encode(), h), h))
    received = []
    with transport.engine.begin() as conn:
        assert sales.peek(conn) == 25
        while (message := sales.receive(conn)) is not None:
            received.append(message)
    assert [m.id for m in received] == [message_id for message_id, _ in sent]
    assert [m.headers for m in received] == [h for _, h in sent]
    assert received[3].body == b"body 3"


def test_expired_messages_are_dropped_never_returned(transport):
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        sales.send(conn, b"short-lived", headers("gone"), time_to_be_received=0.05)
        keep = sales.send(conn, b"kept", headers("kept"))
        sales.send(conn, b"short-lived", headers("gone"), time_to_be_received=0.05)
    time.sleep(0.3)
    with transport.engine.begin() as conn:
        assert sales.receive(conn).id == keep
        assert sales.receive(conn) is None


def test_purge_expired_in_batches_and_purge_all(transport):
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        sales.send_many(conn, [(b"x", headers(n)) for n in range(7)], time_to_be_received=0.01)
        sales.send(conn, b"y", headers("live"))
    time.sleep(0.2)
    with transport.engine.begin() as conn:
        assert sales.purge_expired(conn, batch_size=3) == 7
        assert sales.peek(conn) == 1
        assert sales.purge(conn) == 1
        assert sales.receive(conn) is None
    # without a connection, as upstream's purger: on one of its own, each batch committed as it goes
    with transport.engine.begin() as conn:
        sales.send_many(conn, [(b"x", headers(n)) for n in range(5)], time_to_be_received=0.01)
    time.sleep(0.2)
    assert sales.purge_expired(batch_size=2) == 5
    with transport.engine.begin() as conn:
        assert sales.peek(conn) == 0


def test_rollback_puts_the_message_back_with_the_callers_writes(transport):
    sales, audit = transport.queue("Sales"), transport.queue("audit")
    with transport.engine.begin() as conn:
        first = sales.send(conn, b"1", headers(1))
    with transport.engine.connect() as conn:
        with pytest.raises(RuntimeError):
            with conn.begin():
                assert sales.receive(conn).id == first
                audit.send(conn, b"side effect", headers("audit"))  # the caller's own write
                raise RuntimeError("handler failed")
    with transport.engine.begin() as conn:
        assert audit.receive(conn) is None  # rolled back with the receive
        assert sales.receive(conn).id == first  # back in the queue
        audit.send(conn, b"side effect", headers("audit"))
    with transport.engine.begin() as conn:
        assert audit.receive(conn) is not None and sales.receive(conn) is None  # committed together


def test_batched_receive_keeps_fifo_and_leaves_the_rest(transport):
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        ids = sales.send_many(conn, [(bytes([n]), headers(n)) for n in range(120)])
    with transport.engine.begin() as conn:
        batch = sales.receive_batch(conn, 50)
    assert [m.id for m in batch] == ids[:50]
    with transport.engine.begin() as conn:
        assert [m.id for m in sales.receive_batch(conn, 100)] == ids[50:]
        assert sales.receive_batch(conn, 10) == []


def test_bodies_and_headers_arrive_byte_for_byte_single_and_batched(transport):
    """Every byte value, an empty and a NULL body, non-ASCII headers: the same on every engine
    (PostgreSQL returns results in binary on the runtime's cursor)."""
    sales = transport.queue("Sales")
    bodies = [bytes(range(256)) * 5, b"", None, b"\x00" * 3, "Fäktura ☃".encode("utf-16-le")]
    sent = [headers(n, text="Fäktura ☃ \u2028 \"q\"") for n in range(2 * len(bodies))]
    with transport.engine.begin() as conn:
        for body, h in zip(bodies * 2, sent):
            sales.send(conn, body, h)
    with transport.engine.begin() as conn:
        single = [sales.receive(conn) for _ in bodies]
        batched = sales.receive_batch(conn, 50)
    for received, expected in ((single, sent[: len(bodies)]), (batched, sent[len(bodies) :])):
        assert [m.body for m in received] == bodies
        assert [m.headers for m in received] == expected
        assert all(isinstance(m.id, str) and uuid.UUID(m.id) for m in received)


def test_the_postgresql_runtime_cursor_fetches_binary_results(pg_url):
    import psycopg

    from sqltransport_schema import engines

    engine = make_engine(pg_url)
    try:
        with engine.connect() as conn:
            cursor = engines.get("postgresql").runtime_cursor(conn.connection.dbapi_connection)
            cursor.execute("SELECT %s::bytea", (b"\x00\xff",))
            assert cursor.fetchone()[0] == b"\x00\xff"
            assert cursor.pgresult.fformat(0) == psycopg.pq.Format.BINARY
    finally:
        engine.dispose()


def test_delayed_messages_move_when_due_and_are_forwarded(transport):
    sales = transport.endpoint("Sales")
    billing = transport.queue("Billing")
    with transport.engine.begin() as conn:
        sales.send_delayed(conn, billing, b"later", headers("delayed"), due_after=0.4)
        assert sales.move_due(conn) == 0  # not due yet
        assert sales.next_due(conn) is not None
    time.sleep(0.8)
    with transport.engine.begin() as conn:
        assert sales.move_due(conn) == 1
        assert sales.next_due(conn) is None
    with transport.engine.begin() as conn:
        moved = sales.input.receive(conn)
    assert moved.headers[wire.FORWARD_DESTINATION] == billing.address
    assert moved.body == b"later"

    # The input queue's pump forwards it to where it was sent.
    with transport.engine.begin() as conn:
        sales.input.send(conn, moved.body, moved.headers)
    handled = []
    pump = MessagePump(transport, sales.input, lambda m, c: handled.append(m), endpoint=sales, peek_delay=0.1)
    assert pump.receive_one() is True
    pump.close()
    assert handled == []
    with transport.engine.begin() as conn:
        arrived = billing.receive(conn)
    assert arrived.body == b"later" and wire.FORWARD_DESTINATION not in arrived.headers


def test_subscribe_unsubscribe_find_and_publish(transport):
    subs = transport.subscriptions()
    billing, audit = transport.queue("Billing"), transport.queue("audit")
    with transport.engine.begin() as conn:
        subs.subscribe(conn, "Billing", billing.address, "Shop.OrderPlaced")
        subs.subscribe(conn, "Audit", audit.address, "Shop.OrderPlaced")
        subs.subscribe(conn, "Audit", audit.address, "Shop.OrderShipped")
        subs.subscribe(conn, "Billing", billing.address, "Shop.OrderPlaced")  # again: no duplicate
        assert subs.subscribers(conn, ["Shop.OrderPlaced"]) == sorted([billing.address, audit.address])
        assert subs.subscribers(conn, ["Shop.OrderShipped", "Shop.Nothing"]) == [audit.address]
        subs.unsubscribe(conn, "Audit", "Shop.OrderPlaced")
        assert subs.subscribers(conn, ["Shop.OrderPlaced"]) == [billing.address]
        assert transport.publish(conn, ["Shop.OrderPlaced"], b"event", headers("event")) == [billing.address]
    with transport.engine.begin() as conn:
        event = billing.receive(conn)
        assert event.headers[wire.MESSAGE_INTENT] == "Publish" and audit.receive(conn) is None


def test_poison_headers_go_to_the_error_queue_unchanged(transport):
    sales, error = transport.queue("Sales"), transport.queue("error")
    raw = '{"NServiceBus.MessageId": "x", broken'
    with transport.engine.begin() as conn:
        poison_id = sales.send(conn, b"\x00\x01poison", raw)
    pump = MessagePump(transport, sales, lambda m, c: pytest.fail("handler must not see poison"), peek_delay=0.1)
    assert pump.receive_one() is True
    pump.close()
    with transport.engine.begin() as conn:
        moved = error.receive(conn)
    assert (moved.id, moved.raw_headers, moved.body) == (poison_id, raw, b"\x00\x01poison")
    assert moved.poison is not None


def test_failing_handler_retries_then_error_queue_with_exception(transport, caplog):
    sales, error = transport.queue("Sales"), transport.queue("error")
    with transport.engine.begin() as conn:
        message_id = sales.send(conn, b"boom", headers("boom"))
    calls = []

    def handler(message, context):
        calls.append(message.id)
        raise ValueError("cannot process order 42")

    pump = MessagePump(transport, sales, handler, immediate_retries=2, peek_delay=0.1)
    with caplog.at_level(logging.ERROR):
        for _ in range(4):
            pump.receive_one()
    pump.close()
    assert calls == [message_id] * 3  # first attempt + 2 immediate retries
    with transport.engine.begin() as conn:
        failed = error.receive(conn)
        assert sales.receive(conn) is None
    assert failed.id == message_id and failed.body == b"boom"
    assert failed.headers[wire.EXCEPTION_MESSAGE] == "cannot process order 42"
    assert "ValueError" in failed.headers[wire.EXCEPTION_TYPE]
    assert failed.headers[wire.FAILED_Q] == sales.address


def test_pump_drains_with_concurrency_and_stops_gracefully(transport):
    sales, audit = transport.queue("Sales"), transport.queue("audit")
    with transport.engine.begin() as conn:
        sales.send_many(conn, [(str(n).encode(), headers(n)) for n in range(60)])
    seen, lock = [], threading.Lock()

    def handler(message, context):
        context.send(audit.address, message.body, {"n": message.headers["n"]})  # in the receive's transaction
        with lock:
            seen.append(int(message.headers["n"]))

    pump = MessagePump(transport, sales, handler, concurrency=4, peek_delay=0.1)
    pump.start()
    deadline = time.time() + 30
    while len(seen) < 60 and time.time() < deadline:
        time.sleep(0.05)
    pump.stop(timeout=10)
    assert sorted(seen) == list(range(60))
    with transport.engine.begin() as conn:
        assert len(audit.receive_batch(conn, 100)) == 60


def test_peek_delay_outside_the_recommended_range_warns(transport, caplog):
    with caplog.at_level(logging.WARNING):
        MessagePump(transport, transport.queue("Sales"), lambda m, c: None, peek_delay=30)
    assert "outside the recommended" in caplog.text


def test_missing_table_is_reported_as_a_warning(transport, db_url, caplog):
    catalog.execute(db_url, 'DROP TABLE "audit"' if db_url.startswith("sqlite") else 'DROP TABLE "public"."audit"')
    with caplog.at_level(logging.WARNING):
        Transport.from_database(transport.engine, "alembic.ini")
    assert "queue table" in caplog.text and "audit" in caplog.text and "missing" in caplog.text


def test_interoperates_with_the_postgresql_transports_own_sql(project, pg_url):
    """Messages written and read with the exact statements of transport-facts §7."""
    import psycopg

    project.write_topology(TOPOLOGY.replace('"9.1"', '"9.1"\nengines: [postgresql]'))
    project.compile("initial")
    project.upgrade(pg_url)
    engine = make_engine(pg_url)
    transport = Transport(engine, "9.1")
    sales = transport.queue("Sales")
    nsb_send = (
        'INSERT INTO "public"."Sales" (Id, Expires, Headers, Body) VALUES (%(Id)s, (now() AT TIME ZONE \'UTC\') + '
        "(%(TimeToBeReceivedMs)s || ' ms')::INTERVAL, %(Headers)s, %(Body)s)"
    )
    nsb_receive = (
        'DELETE FROM "public"."Sales" rs WHERE rs.id = (SELECT id FROM "public"."Sales" ORDER BY Seq LIMIT 1 FOR UPDATE SKIP LOCKED) '
        "RETURNING rs.id, CASE WHEN Expires IS NULL THEN 0 WHEN Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1 END Expired, "
        "rs.Headers, rs.Body"
    )
    nsb_headers = (
        '{"NServiceBus.MessageId":"0b0c6b5e-1c1e-4a43-9a53-0a1b2c3d4e5f","NServiceBus.ReplyToAddress":"Shop@[public]","x":"a\\/b"}'
    )
    with psycopg.connect(pg_url.replace("+psycopg", "")) as raw:
        raw.execute(nsb_send, {"Id": uuid.uuid4(), "TimeToBeReceivedMs": None, "Headers": nsb_headers, "Body": b"from .NET"})
    with engine.begin() as conn:
        received = sales.receive(conn)
    assert received.headers == {
        "NServiceBus.MessageId": "0b0c6b5e-1c1e-4a43-9a53-0a1b2c3d4e5f",
        "NServiceBus.ReplyToAddress": "Shop@[public]",
        "x": "a/b",
    }
    assert received.body == b"from .NET"

    ours = headers("to .NET", path="x/y")
    with engine.begin() as conn:
        sent_id = sales.send(conn, b"from Python", ours)
    with psycopg.connect(pg_url.replace("+psycopg", "")) as raw:
        row = raw.execute(nsb_receive).fetchone()
    assert (str(row[0]), row[1], row[3]) == (sent_id, 0, b"from Python")
    assert wire.decode_headers(row[2]) == ours and '"x\\/y"' in row[2]
    engine.dispose()


def test_missing_expiry_index_is_reported_the_way_the_transport_reports_it(project, sqlite_url, monkeypatch, caplog):
    transport = deployed(project, sqlite_url, monkeypatch)  # the PostgreSQL layout has no expiry index
    catalog.execute(sqlite_url, 'DROP INDEX "Sales_Expires"')
    with caplog.at_level(logging.WARNING):
        Transport.from_database(transport.engine, "alembic.ini", purges_expired=True)
    assert 'Table "Sales" does not contain index "Sales_Expires"' in caplog.text
    assert "billing" not in caplog.text.casefold()
    # as the transport since 6.3.2: the index only matters to a process that purges expired messages
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        Transport.from_database(transport.engine, "alembic.ini")
    assert "Sales_Expires" not in caplog.text


def test_statements_command_prints_every_statement_for_review(capsys):
    from sqltransport_schema import cli

    assert cli.main(["statements", "--engine", "postgresql", "--queue", "Sales", "--topics", "2"]) == 0
    out = capsys.readouterr().out
    for name in (
        "send",
        "receive",
        "receive_batch",
        "lock_batch",
        "delete_locked",
        "savepoint",
        "rollback_to_savepoint",
        "peek",
        "purge_expired",
        "purge_all",
        "store_delayed",
        "move_due_delayed",
        "subscribe",
        "unsubscribe",
        "find_subscribers",
    ):
        assert f"-- {name}: " in out
    assert 'INSERT INTO "public"."Sales" (Id, Expires, Headers, Body)' in out
    assert "WHERE Topic IN (@Topic_0, @Topic_1)" in out  # upstream's parameter names
    assert cli.main(["statements", "--engine", "postgresql", "--transport-version", "4.0"]) == 2


def test_send_fills_the_standard_headers_a_receiver_expects(transport):
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        message_id = sales.send(conn, b"{}", {"NServiceBus.EnclosedMessageTypes": "Shop.Ping"})
        message = sales.receive(conn)
    h = message.headers
    assert h[wire.MESSAGE_ID] == message_id == message.id
    assert h[wire.CORRELATION_ID] == message_id and h[wire.MESSAGE_INTENT] == "Send"
    assert uuid.UUID(h[wire.CONVERSATION_ID]) and wire.parse_time_sent(h[wire.TIME_SENT])


def test_due_mover_loop_delivers_delayed_messages(transport):
    from sqltransport_schema.runtime.pump import DueMover

    sales = transport.endpoint("Sales")
    with transport.engine.begin() as conn:
        for n in range(5):
            sales.send_delayed(conn, sales.input, str(n).encode(), headers(n), due_after=0.2)
    mover = DueMover(transport, sales, interval=0.1, batch_size=2)
    mover.start()
    deadline = time.time() + 10
    while mover.moved < 5 and time.time() < deadline:
        time.sleep(0.05)
    mover.stop(timeout=5)
    with transport.engine.begin() as conn:
        arrived = sales.input.receive_batch(conn, 10)
    assert sorted(m.body for m in arrived) == [str(n).encode() for n in range(5)]


@pytest.mark.parametrize("batch_size", [1, 20])
def test_pump_survives_its_connections_being_killed_and_loses_nothing(project, pg_url, monkeypatch, caplog, batch_size):
    """A failover or server restart cuts the pump's connections mid-work: it reconnects and goes on;
    every message is handled and committed exactly once (the handler's write commits with the receive;
    in a batch, with the batch's one commit)."""
    import psycopg

    transport = deployed(project, pg_url, monkeypatch)
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE handled (n int PRIMARY KEY)")  # a duplicate would violate the key
        sales.send_many(conn, [(str(n).encode(), headers(n)) for n in range(400)])

    def handler(message, context):
        context.connection.exec_driver_sql("INSERT INTO handled (n) VALUES (%(n)s)", {"n": int(message.headers["n"])})
        time.sleep(0.002)

    pump = MessagePump(transport, sales, handler, concurrency=3, peek_delay=0.1, failure_timeout=20, batch_size=batch_size)
    raw_url = pg_url.replace("+psycopg", "")
    kills = 0
    with caplog.at_level(logging.WARNING, logger="sqltransport_schema.pump"):
        pump.start()
        with psycopg.connect(raw_url, autocommit=True) as admin:
            deadline = time.time() + 60
            while time.time() < deadline:
                done = admin.execute("SELECT count(*) FROM handled").fetchone()[0]
                if done >= 400:
                    break
                if kills < 4 and done >= 60 * (kills + 1):
                    kills += (
                        admin.execute(
                            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = ''"
                        ).fetchone()[0]
                        > 0
                    )
                time.sleep(0.02)
        pump.stop(timeout=10)
    assert kills == 4
    assert pump.failure is None and not pump._daemon.thread.is_alive()
    assert "retrying in 0.1 s" in caplog.text
    transport.engine.dispose()  # the pool may still hold a connection that was cut
    with transport.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*), min(n), max(n) FROM handled").one() == (400, 0, 399)
        assert sales.peek(conn) == 0
        assert transport.queue("error").peek(conn) == 0  # no handler failed (a duplicate would have)
    transport.engine.dispose()


def test_pump_stops_with_pump_failed_when_the_database_stays_unreachable(caplog):
    from sqltransport_schema.runtime.pump import PumpFailed

    transport = Transport(make_engine("postgresql://postgres@127.0.0.1:1/nowhere"), "9.1")  # a port nothing listens on
    pump = MessagePump(transport, transport.queue("Sales"), lambda m, c: None, peek_delay=0.1, failure_timeout=0.5)
    started = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, logger="sqltransport_schema.pump"),
        pytest.raises(PumpFailed, match="Sales@\\[public\\] failed for"),
    ):
        pump.run()
    assert 0.5 <= time.monotonic() - started < 10
    assert isinstance(pump.failure, PumpFailed)
    assert caplog.text.count("retrying in 0.1 s") >= 2 and "stopping" in caplog.text


def test_negative_delays_on_sqlite_mean_already_past(project, sqlite_url, monkeypatch):
    """A time-to-be-received or a delay below zero is a time in the past (SQLite's modifier takes
    its own sign), not NULL: the message is expired, the delayed one due at once."""
    transport = deployed(project, sqlite_url, monkeypatch)
    sales, endpoint = transport.queue("Sales"), transport.endpoint("Sales")
    with transport.engine.begin() as conn:
        sales.send(conn, b"stale", headers(), time_to_be_received=-2.5)
        endpoint.send_delayed(conn, endpoint.input, b"overdue", headers(), due_after=-2.5)
    with transport.engine.begin() as conn:
        (expires,) = conn.exec_driver_sql('SELECT Expires FROM "Sales"').one()
        assert expires is not None
        assert sales.receive(conn) is None  # expired: dropped, never handed out
        assert endpoint.move_due(conn) == 1
    transport.engine.dispose()


def test_pump_settings_and_keyword_options_are_one_declaration(transport):
    """PumpSettings holds a pump's options; MessagePump's keyword arguments are its fields (PumpOptions,
    for type checkers, names the same with the same types) and override a settings object given."""
    import dataclasses
    import typing

    from sqltransport_schema.errors import UsageError
    from sqltransport_schema.runtime import pump as pumps

    hints = typing.get_type_hints(pumps.PumpOptions, vars(pumps))
    fields = typing.get_type_hints(pumps.PumpSettings, vars(pumps))
    assert hints == fields and list(hints) == [f.name for f in dataclasses.fields(pumps.PumpSettings)]
    shared = pumps.PumpSettings(batch_size=10, immediate_retries=2, peek_delay=0.2)
    pump = MessagePump(transport, transport.queue("Sales"), print, shared, batch_size=5)
    assert (pump.batch_size, pump.immediate_retries, pump.peek_delay) == (5, 2, 0.2)
    assert pump.settings == dataclasses.replace(shared, batch_size=5)
    by_keywords = MessagePump(transport, transport.queue("Sales"), print, batch_size=5, immediate_retries=2, peek_delay=0.2)
    by_settings = MessagePump(
        transport, transport.queue("Sales"), print, pumps.PumpSettings(batch_size=5, immediate_retries=2, peek_delay=0.2)
    )
    assert by_keywords.settings == by_settings.settings == pump.settings
    assert [vars(p)[name] for p in (by_keywords, by_settings) for name in ("batch_size", "peek_delay", "concurrency")] == [5, 0.2, 1] * 2
    with pytest.raises(UsageError, match="MessagePump has no option batchsize"):
        MessagePump(transport, transport.queue("Sales"), print, batchsize=5)
