"""The pump with the outbox (docs/outbox.md), on real SQLite and PostgreSQL: a process killed with
SIGKILL after the handler's commit, or between the dispatch and setting the row as dispatched, then
run again, delivers every outgoing message once and never runs a handler twice for one incoming
message (the handler counts its runs in a second database); a duplicate is not handled again; a
failing handler stores nothing; the pump refuses to start without the endpoint's outbox table."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqltransport_schema import errors, wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.outbox import OutboxTable, PumpOutbox, deserialize
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .support.outbox_child import TOPIC, billing_ids, derived_id, event_id

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    outbox: true
  - name: Billing
  - name: Shipping
queues:
  - name: error
"""
INCOMING = [f"00000000-0000-0000-0000-{i:012d}" for i in range(1, 9)]
STORED = derived_id("stored", "1")


@pytest.fixture
def effects_url(db_url, request, tmp_path) -> str:
    """The handler's second database (SQLite beside SQLite, a second PostgreSQL database beside
    PostgreSQL), with the table where it counts its runs."""
    url = f"sqlite:///{tmp_path / 'effects.db'}" if db_url.startswith("sqlite") else request.getfixturevalue("pg_url2")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE effects (message_id VARCHAR(200) NOT NULL)"))
    engine.dispose()
    return url


@pytest.fixture
def sales(project, db_url, monkeypatch):
    """TOPOLOGY deployed; Shipping subscribed to the topic; the incoming messages in Sales."""
    project.deploy(db_url, TOPOLOGY)
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(db_url), str(project.ini))
    with transport.engine.begin() as conn:
        transport.subscriptions().subscribe(conn, "Shipping", transport.queue("Shipping").address, TOPIC)
        for message_id in INCOMING:
            transport.queue("Sales").send(conn, b'{"order": 1}', {wire.MESSAGE_ID: message_id})
    yield transport
    transport.engine.dispose()


def _child(project, db_url: str, effects_url: str, batch: int, *crash: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tests.support.outbox_child", db_url, str(project.ini), effects_url, str(batch), *crash]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)


def _drain(transport: Transport, queue: str) -> list[str]:
    ids = []
    with transport.engine.begin() as conn:
        while (message := transport.queue(queue).receive(conn)) is not None:
            ids.append(message.id)
    return ids


def _effects(url: str) -> Counter:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return Counter(row[0] for row in conn.execute(sa.text("SELECT message_id FROM effects")))
    finally:
        engine.dispose()


def _outbox(transport: Transport) -> OutboxTable:
    return OutboxTable.from_blueprint(transport.engine, transport.blueprint, transport.name("Sales_OutboxData"))


# (step, batch size, the nth time the step runs is the crash, handlers run by then, the first message waiting)
CRASHES = [
    ("after-commit", 1, 3, 3, 2),  # messages 1-2 done, 3 handled
    ("after-commit", 5, 2, 8, 5),  # the first batch (1-5) done, the second (6-8) handled
    ("after-dispatch", 1, 3, 3, 2),
    ("after-dispatch", 5, 1, 5, 0),  # the first batch handled; its dispatch (sent, rows set) undone
]


@pytest.mark.parametrize("point, batch, crash_at, handled, waiting", CRASHES, ids=[f"{c[0]}-batch{c[1]}" for c in CRASHES])
def test_a_pump_killed_at_either_step_then_restarted_delivers_everything_and_handles_nothing_twice(
    project, db_url, effects_url, sales, point, batch, crash_at, handled, waiting
):
    crashed = _child(project, db_url, effects_url, batch, point, str(crash_at))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]

    # what the crash left: messages handled and their rows stored, nothing of them dispatched, the
    # messages themselves still in Sales (they come back)
    assert _effects(effects_url) == Counter(INCOMING[:handled])
    outbox, waiting = _outbox(sales), INCOMING[waiting]
    with sales.engine.begin() as conn:
        record = outbox.get(conn, waiting)
        assert record is not None and not record.dispatched
        assert [(op.message_id, op.options) for op in record.operations] == [
            *[(i, {"Destination": sales.queue("Billing").address}) for i in billing_ids(waiting)],
            (event_id(waiting), {"EventType": TOPIC}),
        ]
        assert all(op.headers[wire.MESSAGE_ID] == op.message_id for op in record.operations)
        assert sales.queue("Sales").peek(conn) > 0

    restarted = _child(project, db_url, effects_url, batch)
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    assert _effects(effects_url) == Counter(INCOMING)  # every message handled, none twice
    assert sorted(_drain(sales, "Billing")) == sorted(i for m in INCOMING for i in billing_ids(m))  # each once
    assert sorted(_drain(sales, "Shipping")) == sorted(event_id(m) for m in INCOMING)
    assert _drain(sales, "Sales") == [] and _drain(sales, "error") == []
    with sales.engine.begin() as conn:
        rows = [outbox.get(conn, m) for m in INCOMING]
    assert all(r is not None and r.dispatched and r.operations == [] for r in rows)


def _pump(transport: Transport, handler, **options) -> MessagePump:
    return MessagePump(transport, transport.queue("Sales"), handler, peek_delay=0.1, outbox=True, **options)


def _drain_with(pump: MessagePump) -> None:
    while pump.receive_one():
        pass


def test_a_message_handled_before_is_not_handled_again(sales):
    runs = []

    def handler(message, context):
        runs.append(message.id)
        context.send("Billing", b"{}", {wire.MESSAGE_ID: derived_id(message.id, "billing")})

    pump = _pump(sales, handler)
    _drain_with(pump)
    with sales.engine.begin() as conn:  # the same message again (a sender that retried, say)
        sales.queue("Sales").send(conn, b'{"order": 1}', {wire.MESSAGE_ID: INCOMING[0]})
    _drain_with(pump)
    pump.close()
    assert runs == INCOMING
    assert sorted(_drain(sales, "Billing")) == sorted(derived_id(m, "billing") for m in INCOMING)  # nothing sent again
    assert _drain(sales, "Sales") == []


def test_a_message_twice_in_one_batch_is_handled_and_sent_once(project, sqlite_url, monkeypatch):
    """SQLite's queue holds an Id more than once (PostgreSQL's refuses the second): the copy later in
    the batch finds the row the first stored and leaves its operations to the first's dispatch."""
    project.deploy(sqlite_url, TOPOLOGY)
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(sqlite_url), str(project.ini))
    with transport.engine.begin() as conn:
        for _ in range(2):
            transport.queue("Sales").send(conn, b"{}", {wire.MESSAGE_ID: INCOMING[0]})
    runs = []

    def handler(message, context):
        runs.append(message.id)
        context.send("Billing", b"{}", {wire.MESSAGE_ID: derived_id(message.id, "billing")})

    pump = _pump(transport, handler, batch_size=10)
    assert pump.receive_batch() == 2
    pump.close()
    assert runs == [INCOMING[0]]
    assert _drain(transport, "Billing") == [derived_id(INCOMING[0], "billing")]
    assert _drain(transport, "Sales") == []
    transport.engine.dispose()


def test_a_row_stored_but_not_dispatched_is_dispatched_when_its_message_comes_back(sales):
    """What a crash after the handler's commit leaves, made by hand: the pump sends the stored
    operations, sets the row as dispatched and takes the message, without running the handler."""
    outbox = _outbox(sales)
    payload = json.dumps(
        [{"MessageId": STORED, "Body": "e30=", "Headers": {wire.MESSAGE_ID: STORED}, "Options": {"Destination": "Billing"}}]
    )
    with sales.engine.begin() as conn:
        outbox.store(conn, INCOMING[0], deserialize(payload))
    runs = []
    pump = _pump(sales, lambda message, context: runs.append(message.id), batch_size=50)
    pump.receive_batch()
    pump.close()
    assert runs == INCOMING[1:]
    with sales.engine.begin() as conn:
        billing = sales.queue("Billing").receive(conn)
        assert (billing.id, billing.body) == (STORED, b"{}")
        assert outbox.get(conn, INCOMING[0]).dispatched


def test_a_message_another_receive_takes_before_the_dispatch_is_sent_once(sales, monkeypatch):
    """Between a batch's commit and its take its messages are unlocked: a second pump that takes one
    finds its row and dispatches it; the first pump's take counts one short, is rolled back, and each
    message is then taken and dispatched alone: the others sent once, the taken one not again. On
    PostgreSQL the take goes in the commit's round trip; the test sends that commit ahead of it (a
    pipeline entered syncs what is queued) to hold the window open."""
    runs = Counter()

    def handler(message, context):
        runs[message.id] += 1
        context.send("Billing", b"{}", {wire.MESSAGE_ID: derived_id(message.id, "billing")})

    first, second = _pump(sales, handler, batch_size=50), _pump(sales, handler)
    raced = []
    original_dispatch, original_take = PumpOutbox.dispatch_stored, PumpOutbox._taking

    def race() -> None:
        raced.append(True)
        assert second.receive_one()  # the head message: handled before, so dispatched by the second pump

    def racing_dispatch(self, queue, conn, stored):  # where the dispatch's transaction begins on its own
        if self is first.outbox and len(stored) > 1 and not raced:
            race()
        return original_dispatch(self, queue, conn, stored)

    def racing_take(self, queue, conn, stored):  # where the take goes with the handler's commit
        if len(stored) > 1 and not raced:
            with conn.connection.pipeline():  # the commit reaches the server before the take
                pass
            race()
        return original_take(self, queue, conn, stored)

    monkeypatch.setattr(PumpOutbox, "dispatch_stored", racing_dispatch)
    monkeypatch.setattr(PumpOutbox, "_taking", racing_take)
    first.receive_batch()
    first.close()
    second.close()
    assert raced
    assert runs == Counter(INCOMING)
    assert sorted(_drain(sales, "Billing")) == sorted(derived_id(m, "billing") for m in INCOMING)
    assert _drain(sales, "Sales") == []
    with sales.engine.begin() as conn:
        assert all(_outbox(sales).get(conn, m).dispatched for m in INCOMING)


def test_a_failing_handler_stores_nothing_and_its_retry_sends_once(sales):
    attempts = Counter()

    def handler(message, context):
        attempts[message.id] += 1
        context.send("Billing", b"{}", {wire.MESSAGE_ID: derived_id(message.id, f"attempt-{attempts[message.id]}")})
        if attempts[message.id] == 1:
            raise RuntimeError("first attempt fails")

    pump = _pump(sales, handler, batch_size=3)
    while pump.receive_batch():
        pass
    pump.close()
    assert set(attempts.values()) == {2}
    assert sorted(_drain(sales, "Billing")) == sorted(derived_id(m, "attempt-2") for m in INCOMING)
    assert _drain(sales, "error") == []


def test_an_optimistic_batch_rolls_its_outbox_rows_back_with_a_failing_handler(sales):
    """The outbox rows of the handlers before the failure go with the optimistic batch's rollback
    (stored again by the isolated re-run, once); the failing message alone reaches the error queue."""
    attempts = Counter()

    def handler(message, context):
        attempts[message.id] += 1
        context.send("Billing", b"{}", {wire.MESSAGE_ID: derived_id(message.id, "sent")})
        if message.id == INCOMING[2]:
            raise RuntimeError("always fails")

    pump = _pump(sales, handler, batch_size=8, immediate_retries=1)
    while pump.receive_batch():
        pass
    pump.close()
    assert pump.reruns == 1
    # 1-2 ran in the rolled-back optimistic run and again in the re-run; 3 at both and at its retry
    assert [attempts[m] for m in INCOMING] == [2, 2, 2, 1, 1, 1, 1, 1]
    assert sorted(_drain(sales, "Billing")) == sorted(derived_id(m, "sent") for m in INCOMING if m != INCOMING[2])
    assert _drain(sales, "error") == [INCOMING[2]]
    outbox = _outbox(sales)
    with sales.engine.connect() as conn:
        assert outbox.get(conn, INCOMING[2]) is None
        assert all(outbox.get(conn, m).dispatched for m in INCOMING if m != INCOMING[2])


def test_the_pump_needs_the_endpoints_outbox_table(sales):
    with pytest.raises(
        errors.NotFound,
        match="no outbox table .Billing_OutboxData. in the deployed topology.*outbox: true.*outbox=.<table_prefix>OutboxData",
    ):
        MessagePump(sales, sales.queue("Billing"), lambda message, context: None, outbox=True)
    with sales.engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {sales.dialect.qualified(sales.name('Sales_OutboxData'))}"))
    with pytest.raises(errors.NotFound, match="outbox table .*Sales_OutboxData.* does not exist"):
        _pump(sales, lambda message, context: None)


def test_context_publish_without_the_outbox_publishes_in_the_receive(sales):
    def handler(message, context):
        context.publish(TOPIC, b"{}", {wire.MESSAGE_ID: event_id(message.id)})

    pump = MessagePump(sales, sales.queue("Sales"), handler, peek_delay=0.1)
    _drain_with(pump)
    pump.close()
    assert sorted(_drain(sales, "Shipping")) == sorted(event_id(m) for m in INCOMING)


OWN_PREFIXES = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a]
    outbox: true
  - name: Billing
    table_prefix: Bill_
    outbox: true
queues:
  - name: error
"""
# PostgreSQL refuses two outboxes in one schema (their index names would clash): Billing's in its own there
OWN_SCHEMA = OWN_PREFIXES.replace("    table_prefix: Bill_\n", "    table_prefix: Bill_\n    schema: billing\n")


def test_outbox_true_finds_the_endpoints_own_table_as_the_revision_records_it(project, db_url, monkeypatch):
    """Two endpoints' outbox tables (in one schema on SQLite), one named by its own table_prefix: each pump
    (an instance queue's too) takes its endpoint's table, as the deployed revision records its owner."""
    on_sqlite = OWN_PREFIXES.replace("endpoints:", "engines: [sqlite]\nendpoints:")
    project.deploy(db_url, OWN_SCHEMA if db_url.startswith("postgresql") else on_sqlite)
    assert '"table": "Bill_OutboxData", ' in project.revisions()[-1].read_text()
    assert '"endpoint": "Billing", "prefix": "Bill_"' in project.revisions()[-1].read_text()
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(db_url), str(project.ini))
    try:
        tables = {
            queue: MessagePump(transport, transport.queue(queue), lambda message, context: None, outbox=True).outbox.table.spec.name.table
            for queue in ("Billing", "Sales", "Sales.host-a")
        }
        assert tables == {"Billing": "Bill_OutboxData", "Sales": "Sales_OutboxData", "Sales.host-a": "Sales_OutboxData"}
    finally:
        transport.engine.dispose()


def test_outbox_true_on_a_revision_that_records_no_owner_takes_the_one_outbox_beside_the_queue(project, sqlite_url, monkeypatch):
    """A blueprint compiled before owners were recorded (the example's own revisions): Billing's
    `Bill_OutboxData`, the one outbox table in its schema, as README's example runs it."""
    import re

    project.write_topology(OWN_PREFIXES.replace("  - name: Sales\n    instances: [host-a]\n    outbox: true\n", "  - name: Sales\n"))
    assert project.compile("initial") == 0
    revision = project.revisions()[-1]
    revision.write_text(re.sub(r'"endpoint": "[^"]*", ', "", revision.read_text()))  # as compiled before this release
    project.upgrade(sqlite_url)
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(sqlite_url), str(project.ini))
    assert not transport.blueprint.owners
    pump = MessagePump(transport, transport.queue("Billing"), lambda message, context: None, outbox=True)
    assert pump.outbox.table.spec.name.table == "Bill_OutboxData"
    transport.engine.dispose()
