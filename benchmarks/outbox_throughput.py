"""The message pump with and without the outbox (docs/outbox.md), batch 1 and 50, on PostgreSQL with
durable commits and on a SQLite file (WAL), side by side in one run.

Each cell drains a pre-filled queue (1 KB JSON bodies, ~500 B NServiceBus headers, filled outside
the timing) with one MessagePump (concurrency 1) driven by its receive task in this process
(`receive_one()` at batch 1, `receive_batch()` at 50, until the queue is empty: the pump's own
receive path, without the peek loop's waits). The handler sends one message to a second queue
through `context.send`, the case the outbox changes:

  plain   MessagePump(transport, queue, handler, batch_size=b): the send joins the receive's
          transaction; one commit per receive (per batch).
  outbox  MessagePump(..., outbox=True): the batch is locked with its outbox rows (one
          statement), the sends captured and stored in the handler's transaction (one executemany,
          sent with the commit and, on PostgreSQL, with the dispatch's BEGIN and its take, which
          sets the rows as dispatched), then its sends sent (one statement per queue) with a
          commit that does not wait for its flush (docs/outbox.md): 4 round trips a message at
          batch 1, as the plain pump, in 9 statements to its 4.

After each cell every message's send must be in the second queue (and, with the outbox, every
message must have its row). Rounds alternate the contenders' order; a rate is the median over the rounds, a
ratio the median of the per-round ratios; each round's ratio is printed and held to the targets
(outbox >= 0.5x the plain pump at batch 1, >= 0.6x at batch 50).

    .venv/bin/python benchmarks/outbox_throughput.py [--rounds N (5)] [--quick] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _databases import admin, create_database, drop_database  # noqa: E402  (beside this script)
from runtime_throughput import make_messages  # noqa: E402

QUEUE, OUT, OUTBOX = "bench", "bench_out", "bench_OutboxData"
BATCHES = (1, 50)
CONTENDERS = ("plain", "outbox")
FULL_COUNTS = {1: 1000, 50: 5000}
TARGETS = {1: 0.5, 50: 0.6}  # outbox / plain, at least
QUICK_COUNTS = {1: 50, 50: 200}


def deploy(url: str):
    """The queues and the outbox table, by the engine's own DDL; the transport on them."""
    from sqltransport_schema.db import make_engine
    from sqltransport_schema.runtime.transport import Transport
    from sqltransport_schema.schema import Kind, TableName, TableSpec
    from sqltransport_schema.versions import profile

    transport = Transport(make_engine(url), "9.1")
    dialect = transport.dialect
    raw = transport.engine.raw_connection()
    try:
        dialect.new_database_in_wal(raw.driver_connection)  # SQLite: a new file in WAL, as the migrations make it
    finally:
        raw.close()
    with transport.engine.begin() as conn:
        for name in (QUEUE, OUT):
            for ddl in dialect.create_table(TableSpec(Kind.QUEUE, TableName(name)), profile("9.1")):
                conn.exec_driver_sql(ddl)
        for ddl in dialect.create_outbox(TableSpec(Kind.OUTBOX, TableName(OUTBOX), saga_prefix="bench_")):
            conn.exec_driver_sql(ddl)
    return transport


def run_cell(transport, contender: str, batch: int, count: int) -> float:
    """Messages per second for one cell; asserts each message's send arrived (and its outbox row exists)."""
    from sqltransport_schema.runtime.pump import MessagePump

    queue, out = transport.queue(QUEUE), transport.queue(OUT)
    outbox_table = transport.dialect.qualified(transport.name(OUTBOX))
    with transport.engine.begin() as conn:
        out.purge(conn)
        conn.exec_driver_sql(f"DELETE FROM {outbox_table}")
        queue.send_many(conn, make_messages(count))

    def handler(message, context) -> None:
        context.send(OUT, message.body, {"NServiceBus.EnclosedMessageTypes": "Bench.Billed"})

    pump = MessagePump(transport, queue, handler, batch_size=batch, peek_delay=0.1, outbox=contender == "outbox")
    receive = pump.receive_one if batch == 1 else pump.receive_batch
    started = time.perf_counter()
    while receive():
        pass
    elapsed = time.perf_counter() - started
    pump.close()
    assert pump.processed == count, (contender, batch, pump.processed, count)
    with transport.engine.begin() as conn:
        sent = conn.exec_driver_sql(f"SELECT count(*) FROM {transport.dialect.qualified(out.name)}").scalar()
        rows = conn.exec_driver_sql(f"SELECT count(*) FROM {outbox_table}").scalar()
    assert sent == count and rows == (count if contender == "outbox" else 0), (contender, batch, sent, rows)
    return count / elapsed


def measure(engine: str, transport, counts: dict, rounds: int) -> tuple[list[tuple], dict[int, list[float]]]:
    rates: dict[tuple, list[float]] = {}
    ratios: dict[int, list[float]] = {}
    for round_no in range(rounds):
        order = CONTENDERS if round_no % 2 == 0 else CONTENDERS[::-1]
        for batch in BATCHES:
            got = {c: run_cell(transport, c, batch, counts[batch]) for c in order}
            for contender, rate in got.items():
                rates.setdefault((batch, contender), []).append(rate)
            ratios.setdefault(batch, []).append(got["outbox"] / got["plain"])
        print(f"{engine}: round {round_no + 1} done", file=sys.stderr)
    rows = []
    for batch in BATCHES:
        plain, outbox = (statistics.median(rates[(batch, c)]) for c in CONTENDERS)
        rows.append((engine, batch, plain, outbox, statistics.median(ratios[batch])))
    return rows, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small cells, one round: a smoke run")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    counts = QUICK_COUNTS if args.quick else FULL_COUNTS
    rounds = 1 if args.quick else args.rounds
    started = time.monotonic()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    with admin() as conn:
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in ("synchronous_commit", "fsync")}
    print(f"PostgreSQL {settings}; SQLite in WAL, synchronous as the driver leaves it; load average {load} at start; {rounds} round(s)")
    database = create_database("sqlts_outbox_bench")
    rows = []
    try:
        transport = deploy(f"postgresql://postgres@127.0.0.1:5432/{database}")
        found, rounds_pg = measure("postgresql", transport, counts, rounds)
        rows += found
        transport.engine.dispose()
    finally:
        drop_database(database)
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as folder:
            transport = deploy(f"sqlite:///{folder}/bench.db")
            rows += measure("sqlite", transport, counts, rounds)[0]
            transport.engine.dispose()

    print()
    print(f"{'engine':10} {'batch':>5} {'plain msg/s':>11} {'outbox msg/s':>12} {'outbox/plain':>12}")
    for engine, batch, plain, outbox, ratio in rows:
        print(f"{engine:10} {batch:>5} {plain:>11.0f} {outbox:>12.0f} {ratio:>12.2f}")
    print()
    print("targets on PostgreSQL, outbox / plain in each round:")
    for batch in BATCHES:
        met = [ratio >= TARGETS[batch] for ratio in rounds_pg[batch]]
        shown = ", ".join(f"{ratio:.2f}" for ratio in rounds_pg[batch])
        verdict = "met" if all(met) else "MISSED"
        print(f"  batch {batch:>2}: >= {TARGETS[batch]}x -> {verdict} in {sum(met)} of {len(met)} rounds ({shown})")
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"load average {load} at the end; {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
