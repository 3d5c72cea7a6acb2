"""Custom message ids (issue 53, item 2): NServiceBus allows any string in `NServiceBus.MessageId`,
while the row's `Id` is a uuid (uniqueidentifier on SQL Server, uuid on PostgreSQL). The header is
kept as given and the row gets a uuid made for the id (wire.row_id); sent and received on real
SQLite and PostgreSQL, through the pump's recoverability, the error queue and `retry --message-id`,
and the outbox, which recognises a second copy of such a message as it does one with a uuid id."""

from __future__ import annotations

import logging
import uuid

import pytest

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.errorqueue import retry
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .support.messages import headers

CUSTOM = "order-42"


# -- the rule ----------------------------------------------------------------------------------


def test_a_uuid_id_is_the_rows_id_as_given():
    given = "0B0C6B5E-1C1E-4A43-9A53-0A1B2C3D4E5F"
    assert wire.row_id(given) == given
    assert wire.row_id(given.lower()) == given.lower()


@pytest.mark.parametrize("message_id", [CUSTOM, "{0b0c6b5e-1c1e-4a43-9a53-0a1b2c3d4e5f}", "0b0c6b5e1c1e4a439a530a1b2c3d4e5f", " ", "ü"])
def test_any_other_id_gets_one_uuid_of_its_own(message_id):
    made = wire.row_id(message_id)
    assert str(uuid.UUID(made)) == made and made != message_id
    assert wire.row_id(message_id) == made  # every copy of the message: one Id
    assert made == str(uuid.uuid5(wire.ROW_ID_NAMESPACE, message_id))


def test_no_id_gets_a_new_uuid():
    first, second = wire.row_id(None), wire.row_id(None)
    assert uuid.UUID(first) and first != second


# -- send and receive ----------------------------------------------------------------------------


def test_a_custom_id_is_sent_and_received_with_its_header_kept(transport):
    sales = transport.queue("Sales")
    given = {**headers(1), wire.MESSAGE_ID: CUSTOM}
    with transport.engine.begin() as conn:
        row_id = sales.send(conn, b"one", given)
        many = sales.send_many(conn, [(b"two", {**headers(2), wire.MESSAGE_ID: "order-43"}), (b"three", headers(3))])
        bare = sales.send(conn, b"four", {"NServiceBus.EnclosedMessageTypes": "Shop.Ping"}, message_id="order-44")
    assert row_id == wire.row_id(CUSTOM) and many[0] == wire.row_id("order-43") and bare == wire.row_id("order-44")
    with transport.engine.begin() as conn:
        received = sales.receive_batch(conn, 10)
    assert [m.body for m in received] == [b"one", b"two", b"three", b"four"]
    assert received[0].headers == given  # byte for byte as sent
    assert [m.headers[wire.MESSAGE_ID] for m in received] == [CUSTOM, "order-43", received[2].headers[wire.MESSAGE_ID], "order-44"]
    assert [m.id for m in received] == [row_id, many[0], many[1], bare]
    assert received[2].id == received[2].headers[wire.MESSAGE_ID]  # a uuid id stays the row's Id
    assert received[3].headers[wire.CORRELATION_ID] == "order-44"


def test_a_failing_custom_id_message_reaches_the_error_queue_and_retry_finds_it_by_its_header(transport, caplog):
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        row_id = sales.send(conn, b"boom", {**headers("boom"), wire.MESSAGE_ID: CUSTOM})
    seen = []

    def handler(message, context):
        seen.append((message.id, message.headers[wire.MESSAGE_ID]))
        raise ValueError("cannot process order 42")

    pump = MessagePump(transport, sales, handler, immediate_retries=2, delayed_retries=0, peek_delay=0.1)
    with caplog.at_level(logging.ERROR):
        for _ in range(4):
            pump.receive_one()
    pump.close()
    assert seen == [(row_id, CUSTOM)] * 3  # the immediate retries counted by the header: first attempt + 2
    with transport.engine.begin() as conn:
        assert sales.receive(conn) is None
        assert transport.queue("error").peek(conn) == 1

    report = retry(transport, message_ids=[CUSTOM.upper()])
    assert report.moved == 1 and report.not_found == []
    with transport.engine.begin() as conn:
        back = sales.receive(conn)
    assert back.headers[wire.MESSAGE_ID] == CUSTOM and wire.FAILED_Q not in back.headers and back.body == b"boom"
    assert uuid.UUID(back.id)


# -- the outbox ------------------------------------------------------------------------------------

OUTBOX_TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    outbox: true
  - name: Billing
queues:
  - name: error
"""


@pytest.fixture
def sales_outbox(project, db_url, monkeypatch):
    project.deploy(db_url, OUTBOX_TOPOLOGY)
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(db_url), str(project.ini))
    yield transport
    transport.engine.dispose()


def test_the_outbox_recognises_a_second_copy_of_a_custom_id_message(sales_outbox):
    transport = sales_outbox
    sales, billing = transport.queue("Sales"), transport.queue("Billing")
    runs = []

    def handler(message, context):
        runs.append(message.headers[wire.MESSAGE_ID])
        context.send("Billing", b"{}", {wire.MESSAGE_ID: message.headers[wire.MESSAGE_ID] + "/bill"})

    pump = MessagePump(transport, sales, handler, peek_delay=0.1, outbox=True)
    for _ in range(2):  # the same message twice (a sender that sent it again)
        with transport.engine.begin() as conn:
            sales.send(conn, b'{"order": 42}', {wire.MESSAGE_ID: CUSTOM})
        while pump.receive_one():
            pass
    pump.close()
    assert runs == [CUSTOM]
    with transport.engine.begin() as conn:
        sent = billing.receive_batch(conn, 10)
        assert sales.receive(conn) is None
    assert [(m.headers[wire.MESSAGE_ID], m.id) for m in sent] == [(f"{CUSTOM}/bill", wire.row_id(f"{CUSTOM}/bill"))]
