"""What the pump's outbox costs in round trips to PostgreSQL (docs/outbox.md), counted by libpq's own
protocol trace on a real server: each time the pump's connection stops sending and waits for the
server's answer is one round trip, and each Parse/Bind or simple Query one statement. The outbox
needs, beyond the plain pump, the lookup-and-claim of the message ids, the store of the rows and the
second transaction that takes, dispatches and sets them (docs/outbox.md, "What the outbox costs");
the bounds below hold it there at batch 1 and at batch 50."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from sqlalchemy import event

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .test_outbox_pump import TOPOLOGY  # Sales with its outbox, Billing, Shipping, error

# round trips per message at most, at each batch size: the outbox's beyond the plain pump's (batch 1:
# none; the lookup is joined with the lock, the dispatch's BEGIN and take go with the handler's
# commit), and its own per batch (BEGIN, the lock, the store with the commit and the take, the
# dispatch with its commit; a few more where psycopg prepares a statement)
EXTRA_AT_BATCH_1 = 0.1
OUTBOX_PER_BATCH_50 = 4.5


def _trace_counts(path: Path) -> tuple[int, int]:
    """(round trips, statements) in a libpq trace: a round trip is a run of frontend messages the
    server then answers; a statement a Bind (extended protocol) or a Query (simple protocol)."""
    trips = statements = 0
    sending = False
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        direction, kind = parts[0], parts[2].split(" ")[0]
        if direction == "F":
            statements += kind in ("Bind", "Query")
            sending = True
        elif direction == "B" and sending:
            trips += 1
            sending = False
    return trips, statements


def _per_message(project, url: str, tmp_path: Path, batch: int, outbox: bool, count: int) -> tuple[float, float]:
    transport = Transport.from_database(make_engine(url), str(project.ini))
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        sales.send_many(conn, [(b"{}", {wire.MESSAGE_ID: str(uuid.uuid4())}) for _ in range(count)])
    transport.engine.dispose()  # the pump's connection is a new one, traced from its start
    trace = tmp_path / f"trace-{batch}-{outbox}.txt"
    files = []

    def traced(dbapi_connection, _record) -> None:
        from psycopg import pq

        handle = open(trace, "w")  # noqa: SIM115 - closed after the pump is
        files.append(handle)
        dbapi_connection.pgconn.trace(handle.fileno())
        dbapi_connection.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def handler(message, context) -> None:
        context.send("Billing", b"{}", {wire.MESSAGE_ID: str(uuid.uuid4())})

    pump = MessagePump(transport, sales, handler, batch_size=batch, peek_delay=0.1, outbox=outbox)
    transport.engine.dispose()  # the outbox's table lookup's connection: the pump's own comes next
    event.listen(transport.engine, "connect", traced)
    receive = pump.receive_one if batch == 1 else pump.receive_batch
    for _ in range(count // batch):
        assert receive()
    assert pump.processed == count
    event.remove(transport.engine, "connect", traced)
    assert len(files) == 1  # the pump's one connection
    for handle in files:  # before the pump's connection goes: what it sends on return is not the pump's
        handle.flush()
        os.fsync(handle.fileno())
    trips, statements = _trace_counts(trace)
    pump.close()
    for handle in files:
        handle.close()
    transport.engine.dispose()
    with transport.engine.begin() as conn:  # every send arrived
        billed = 0
        while transport.queue("Billing").receive(conn) is not None:
            billed += 1
        assert billed == count
    transport.engine.dispose()
    return trips / count, statements / count


@pytest.mark.parametrize("batch", [1, 50])
def test_the_outbox_costs_few_round_trips_per_message_beyond_the_plain_pump(project, pg_url, tmp_path, monkeypatch, batch):
    project.deploy(pg_url, TOPOLOGY)
    monkeypatch.chdir(project.root)
    count = 4 * batch if batch > 1 else 20
    plain = _per_message(project, pg_url, tmp_path, batch, False, count)
    outbox = _per_message(project, pg_url, tmp_path, batch, True, count)
    print(f"batch {batch}: round trips, statements per message: plain {plain}, outbox {outbox}")
    if batch == 1:
        assert outbox[0] <= plain[0] + EXTRA_AT_BATCH_1, (plain, outbox)
    else:
        assert outbox[0] * batch <= OUTBOX_PER_BATCH_50, (plain, outbox)
