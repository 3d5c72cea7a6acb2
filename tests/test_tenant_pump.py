"""The pump with tenant databases (docs/tenants.md) on real PostgreSQL: a shared database holding the
queues and three tenant databases holding the outbox table and the handler's own table. A process
killed with SIGKILL at each step (in the handler's tenant transaction, after the tenants' commits,
after the shared commit) and run again applies every message's effect once, in its tenant's
database, and sends every outgoing message once; without the outbox the handler writes to its
tenant and sends with the receive; a failing handler leaves no trace in its tenant."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter

import pytest
import sqlalchemy as sa

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.outbox import OutboxTable
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport
from sqltransport_schema.schema import Kind, TableName, TableSpec

from .support.databases import pg_databases
from .support.outbox_child import TOPIC, billing_ids, event_id
from .support.projects import REPO
from .support.tenant_child import TENANT_HEADER
from .support.topology import TENANT_PLACEMENT
from .test_outbox_pump import _drain

TOPOLOGY = TENANT_PLACEMENT.replace("queues:", "  - name: Billing\n  - name: Shipping\nqueues:")  # and the endpoints Sales sends to
TENANTS = 3
INCOMING = [f"00000000-0000-0000-0000-{i:012d}" for i in range(1, 10)]
OUTBOX = TableSpec(Kind.OUTBOX, TableName("Sales_OutboxData"), saga_prefix="Sales_", tenant=True)


def tenant_of(message_id: str) -> int:
    return INCOMING.index(message_id) % TENANTS


@pytest.fixture
def urls(request, tmp_path):
    """The shared database and TENANTS tenant databases: PostgreSQL, or SQLite files."""
    if getattr(request, "param", "postgresql") == "sqlite":
        yield [f"sqlite:///{tmp_path / f'db{i}.db'}" for i in range(TENANTS + 1)]
        return
    yield from pg_databases(TENANTS + 1)


@pytest.fixture
def deployed(project, urls, monkeypatch):
    """TOPOLOGY built in its roles; `effects` in each tenant; Shipping subscribed; the messages in Sales."""
    shared, *tenants = urls
    project.deploy(shared, TOPOLOGY)
    for url in tenants:
        project.upgrade(url, "head", "role=tenant")
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE effects (message_id VARCHAR(200) NOT NULL, tenant VARCHAR(10) NOT NULL)"))
        engine.dispose()
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(shared), str(project.ini))
    with transport.engine.begin() as conn:
        transport.subscriptions().subscribe(conn, "Shipping", transport.queue("Shipping").address, TOPIC)
        for message_id in INCOMING:
            headers = {wire.MESSAGE_ID: message_id, TENANT_HEADER: str(tenant_of(message_id))}
            transport.queue("Sales").send(conn, b'{"order": 1}', headers)
    yield transport, tenants
    transport.engine.dispose()


def _child(project, shared: str, tenants: list[str], batch: int, *crash: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tests.support.tenant_child", shared, str(project.ini), ",".join(tenants), str(batch), *crash]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)


def _effects(tenants: list[str]) -> Counter:
    """(message id, the tenant whose database holds the effect) -> how many times."""
    found: Counter = Counter()
    for index, url in enumerate(tenants):
        engine = make_engine(url)
        with engine.connect() as conn:
            for message_id, tenant in conn.execute(sa.text("SELECT message_id, tenant FROM effects")):
                assert tenant == str(index), f"{message_id}'s effect is in tenant {index}'s database, not tenant {tenant}'s"
                found[(message_id, index)] += 1
        engine.dispose()
    return found


def _rows(tenants: list[str]) -> dict[str, bool]:
    """message id -> dispatched, over every tenant's outbox table."""
    rows = {}
    for url in tenants:
        engine = make_engine(url)
        table = OutboxTable(Transport(engine).dialect, OUTBOX)
        with engine.connect() as conn:
            for message_id in INCOMING:
                record = table.get(conn, message_id)
                if record is not None:
                    rows[message_id] = record.dispatched
        engine.dispose()
    return rows


def _everything_once(transport: Transport, tenants: list[str]) -> None:
    assert _effects(tenants) == Counter((m, tenant_of(m)) for m in INCOMING)  # each once, in its own tenant
    assert sorted(_drain(transport, "Billing")) == sorted(i for m in INCOMING for i in billing_ids(m))  # each sent once
    assert sorted(_drain(transport, "Shipping")) == sorted(event_id(m) for m in INCOMING)
    assert _drain(transport, "Sales") == [] and _drain(transport, "error") == []


# (step, batch size, the nth time the step runs is the crash, effects committed by then, rows left not dispatched)
CRASHES = [
    ("in-handler", 1, 4, 3, []),  # messages 1-3 done; 4's effect and row rolled back with its tenant's transaction
    ("in-handler", 3, 5, 4, []),  # the first batch done; in the second, 4 committed in its tenant, 5 not
    ("after-commit", 1, 3, 3, []),  # 3 handled in its tenant; nothing of it taken or sent
    ("after-commit", 3, 2, 6, []),  # the second batch (4-6) handled in their tenants; the shared commit never came
    ("after-dispatch", 1, 3, 3, [2]),  # 3 taken and sent; its row not set as dispatched
    ("after-dispatch", 3, 2, 3, [1, 2]),  # the first batch taken and sent; rows 2 and 3 not set
]


@pytest.mark.parametrize("point, batch, crash_at, handled, left", CRASHES, ids=[f"{c[0]}-batch{c[1]}" for c in CRASHES])
def test_a_tenant_pump_killed_at_each_step_then_restarted_applies_every_effect_and_sends_every_message_once(
    project, urls, deployed, point, batch, crash_at, handled, left
):
    transport, tenants = deployed
    crashed = _child(project, urls[0], tenants, batch, point, str(crash_at))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert sum(_effects(tenants).values()) == handled

    restarted = _child(project, urls[0], tenants, batch)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    _everything_once(transport, tenants)
    rows = _rows(tenants)
    assert set(rows) == set(INCOMING)  # every message handled with its row in its tenant's database
    assert sorted(m for m, dispatched in rows.items() if not dispatched) == [INCOMING[i] for i in left]


@pytest.mark.parametrize("urls", ["sqlite", "postgresql"], indirect=True)
def test_without_the_outbox_the_handler_writes_to_its_tenant_and_a_failure_leaves_nothing_there(project, urls, deployed):
    transport, tenants = deployed
    tries: Counter = Counter()

    def handler(message, context) -> None:
        insert = sa.text("INSERT INTO effects (message_id, tenant) VALUES (:id, :tenant)")
        context.connection.execute(insert, {"id": message.id, "tenant": message.headers[TENANT_HEADER]})
        for outgoing in billing_ids(message.id):
            context.send("Billing", b"{}", {wire.MESSAGE_ID: outgoing})
        context.publish(TOPIC, b"{}", {wire.MESSAGE_ID: event_id(message.id)})
        tries[message.id] += 1
        if message.id == INCOMING[4] and tries[message.id] == 1:
            raise RuntimeError("the first try fails after writing and sending")

    engines = [make_engine(url) for url in tenants]  # an Engine is returned as it is, and never disposed by the pump
    choose = lambda headers: engines[int(headers[TENANT_HEADER])]  # noqa: E731
    pump = MessagePump(transport, transport.queue("Sales"), handler, batch_size=4, peek_delay=0.1, tenant_database=choose)
    while pump.receive_batch():
        pass
    pump.close()
    assert tries[INCOMING[4]] == 2 and pump.processed == len(INCOMING)
    _everything_once(transport, tenants)
    for engine in engines:
        engine.dispose()
