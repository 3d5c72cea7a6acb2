"""The pump's outbox works a batch at once (docs/outbox.md): one read of the batch's rows, one
setting of them as dispatched, whatever the batch's size; counted by the engines themselves
(SQLite's statement trace, PostgreSQL's table statistics) on real SQLite and PostgreSQL."""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy import event

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.outbox import OutboxTable
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .support.messages import id_for
from .test_outbox_pump import TOPOLOGY  # Sales with its outbox, Billing, Shipping, error

BATCH = 8


_id = id_for


INCOMING = [_id(f"m-{i}") for i in range(BATCH)]


def _deployed(project, url, monkeypatch) -> Transport:
    project.deploy(url, TOPOLOGY)
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(url), str(project.ini))
    with transport.engine.begin() as conn:
        transport.queue("Sales").send_many(conn, [(b"{}", {wire.MESSAGE_ID: m}) for m in INCOMING])
    transport.engine.dispose()  # the pump's connections are new ones
    return transport


def _handle_one_batch(transport: Transport) -> None:
    def handler(message, context) -> None:
        context.send("Billing", b"{}", {wire.MESSAGE_ID: _id(f"{message.id}-billed")})

    pump = MessagePump(transport, transport.queue("Sales"), handler, batch_size=BATCH, peek_delay=0.1, outbox=True)
    assert pump.receive_batch() == BATCH
    pump.close()
    with transport.engine.begin() as conn:  # every message handled, sent once, its row dispatched
        billed = []
        while (message := transport.queue("Billing").receive(conn)) is not None:
            billed.append(message.id)
        outbox = OutboxTable.from_blueprint(transport.engine, transport.blueprint, transport.name("Sales_OutboxData"))
        rows = outbox.get_many(conn, [*INCOMING, _id("never-handled")])
    assert sorted(billed) == sorted(_id(f"{m}-billed") for m in INCOMING)
    assert sorted(rows) == sorted(INCOMING)
    assert all(row.dispatched and row.operations == [] for row in rows.values())


def test_a_batch_reads_and_sets_its_outbox_rows_in_one_statement_each_on_sqlite(project, sqlite_url, monkeypatch):
    transport = _deployed(project, sqlite_url, monkeypatch)
    traced: list[str] = []
    event.listen(transport.engine, "connect", lambda dbapi, _record: dbapi.set_trace_callback(traced.append))
    _handle_one_batch(transport)
    outbox = [" ".join(sql.split()) for sql in traced if '"Sales_OutboxData"' in sql]
    reads = [sql for sql in outbox if sql.startswith("SELECT")]
    updates = [sql for sql in outbox if sql.startswith("UPDATE")]
    stores = [sql for sql in outbox if sql.startswith("INSERT")]
    # the pump's: one read and one update for the batch; the test's own get_many above is the second read
    assert len(reads) == 2 and all("json_each" in sql for sql in reads), reads
    assert len(updates) == 1 and "json_each" in updates[0], updates
    assert len(stores) == BATCH  # one executemany: a row each
    transport.engine.dispose()


def _outbox_statistics(url: str, settled: callable) -> tuple[int, int, int]:
    """The outbox table's (rows inserted, rows updated, scans) as PostgreSQL counts them, once
    `settled` holds for them (a server process reports its counts when it ends; at most 20 s)."""
    statistics = sa.text(
        "SELECT n_tup_ins, n_tup_upd, coalesce(seq_scan, 0) + coalesce(idx_scan, 0) "
        "FROM pg_stat_user_tables WHERE relname = 'Sales_OutboxData'"
    )
    engine = make_engine(url)
    try:
        deadline, last = time.monotonic() + 20, None
        while True:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
                found = tuple(conn.execute(statistics).one())
            if settled(found, last) or time.monotonic() > deadline:
                return found
            last = found
            time.sleep(0.5)
    finally:
        engine.dispose()


def test_a_batch_reads_and_sets_its_outbox_rows_in_one_statement_each_on_postgresql(project, pg_url, monkeypatch):
    transport = _deployed(project, pg_url, monkeypatch)
    before = _outbox_statistics(pg_url, lambda found, last: found == last)  # the deployment's (its DDL scans the table)
    _handle_one_batch(transport)
    transport.engine.dispose()  # the pump's server processes end, and report their counts
    inserted, updated, scans = _outbox_statistics(pg_url, lambda found, last: found[:2] == (BATCH, BATCH))
    # rows: each stored and set once; scans: the batch's read, its update, and the test's own get_many
    assert (inserted, updated, scans - before[2]) == (BATCH, BATCH, 3)
