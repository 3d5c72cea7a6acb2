"""The message pump end to end on PostgreSQL with durable commits, batch 1 / 10 / 50, beside the raw
batched receive loop of the same batch size.

Every cell drains a pre-filled queue (1 KB JSON bodies, ~500 B NServiceBus headers, filled outside
the timing as benchmarks/runtime_throughput.py fills it) in 1 or 4 worker processes (spawned once,
kept for the whole run); the time is wall time from "go" until the last worker is done. The
server's synchronous_commit and fsync are left on (printed): each commit waits for its WAL flush.

Contenders, per batch size b and handler:

  pump  MessagePump(transport, queue, handler, batch_size=b).start() in each worker (concurrency 1,
        the peek / receive loop as it runs in production); the worker stops it once the workers'
        pumps have committed every message (their `processed` counts, shared, polled every
        POLL_S). b = 1: receive() per transaction; b > 1 locks a batch, runs the handlers without
        savepoints (isolation="optimistic", the default), deletes the handled rows, commits once.
  pump+sp the same pump with isolation="savepoint" (b > 1 only): each handler after its own
        savepoint, taken when the handler first uses the context's connection or cursor.
  raw   psycopg.connect and the engine's RECEIVE (b = 1) / RECEIVE_BATCH (b > 1) text, commit per
        transaction, headers decoded with wire.decode_headers, on the runtime's cursor: the batched
        receive loop with no savepoints, no pump around it (the targets' reference).
  raw+sp the same loop taking a SAVEPOINT before each message's handler (b > 1 only), as a loop
        must that lets one handler fail alone: what the per-message isolation costs by itself.

Handlers: noop (does nothing), insert (one INSERT of the message id into an effects table, in the
receive's transaction: context.cursor.execute for the pump, the handler's driver cursor,
cursor.execute for raw).

Rounds: each cell runs the contenders one after the other, their order turning each round; a
ratio is the median of the per-round ratios, a rate the median over the rounds.

    .venv/bin/python benchmarks/pump_throughput.py [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _databases import admin, create_database, drop_database  # noqa: E402  (beside this script)
from runtime_throughput import QUEUE, prefill, reset, runtime_cursor, url_of  # noqa: E402

BATCHES = (1, 10, 50)
WORKERS = (1, 4)
HANDLERS = ("noop", "insert")
CONTENDERS = ("pump", "pump+sp", "raw", "raw+sp")
ISOLATED = ("pump+sp", "raw+sp")  # contenders with a savepoint per message: b > 1 only
# messages per worker per batch size: a cell runs about a second or two at these counts
FULL_COUNTS = {1: 800, 10: 2500, 50: 6000}
QUICK_COUNTS = {1: 100, 10: 300, 50: 1000}
POLL_S = 0.01
# per handler: pump/raw at batch 50 at least, batch 50 at least this many times batch 1 (and pump/raw
# at least 0.7 at every batch size above 1)
TARGETS = {"noop": (0.7, 5.0), "insert": (0.85, 4.0)}
TARGETS_TEXT = "pump >= 0.7x raw at batch 10 and 50; noop: batch 50 >= 5x batch 1; insert: pump >= 0.85x raw and >= 4x batch 1 at batch 50"
INSERT_EFFECT = "INSERT INTO effects (message_id) VALUES (%(id)s)"


# --------------------------------------------------------------------------- workers
def _pump_cell(url: str, batch: int, handler_name: str, done, slot: int, total: int, isolation: str):
    """A pump ready to start, and how to run it until the workers' pumps have committed `total`."""
    from sqltransport_schema.db import make_engine
    from sqltransport_schema.runtime.pump import MessagePump
    from sqltransport_schema.runtime.transport import Transport

    transport = Transport(make_engine(url), "9.1")
    queue = transport.queue(QUEUE)

    def insert(message, context) -> None:
        context.cursor.execute(INSERT_EFFECT, {"id": message.id})

    handler = insert if handler_name == "insert" else (lambda message, context: None)
    pump = MessagePump(transport, queue, handler, batch_size=batch, peek_delay=0.1, isolation=isolation)
    # warm the pool and the dialect before the clock starts, as the raw loop connects before it: the
    # pump holds two connections (its peek on its own thread, the receive task on the pool's)
    with transport.engine.connect(), transport.engine.connect():
        pass

    def run() -> int:
        pump.start()
        while True:
            done[slot] = pump.processed
            if sum(done) >= total:
                break
            time.sleep(POLL_S)
        pump.stop(timeout=60)
        assert pump.failure is None, pump.failure
        transport.engine.dispose()
        return pump.processed

    return run


def _raw_cell(url: str, batch: int, handler_name: str, savepoints: bool = False):
    import psycopg

    from sqltransport_schema import engines, wire
    from sqltransport_schema.schema import TableName
    from sqltransport_schema.versions import profile

    statements = engines.get("postgresql").runtime_statements(profile("9.1"), TableName(QUEUE))
    statement = statements["receive" if batch == 1 else "receive_batch"]
    sql, _ = statement.native("pyformat")
    at = statement.positions
    params = None if batch == 1 else {"BatchSize": batch}
    conn = psycopg.connect(url)
    cur = runtime_cursor(conn)
    insert = handler_name == "insert"
    savepoint = engines.get("postgresql").SAVEPOINT if savepoints and batch > 1 else None

    def run() -> int:
        handled = 0
        while True:
            rows = cur.execute(sql, params).fetchall()
            if not rows:
                conn.commit()
                break
            if batch > 1:
                rows.sort(key=lambda r: r[at["Order"]])
            for row in rows:
                if row[at["Expired"]]:
                    continue
                wire.decode_headers(row[at["Headers"]])
                if savepoint:
                    cur.execute(savepoint)
                if insert:
                    cur.execute(INSERT_EFFECT, {"id": row[at["Id"]]})
                handled += 1
            conn.commit()
        conn.close()
        return handled

    return run


def worker(url: str, pipe, done, slot: int) -> None:
    """Set up a cell on request, report ready, run on "go", report what it handled."""
    while True:
        task = pipe.recv()
        if task is None:
            return
        contender, batch, handler_name, total = task
        if contender.startswith("pump"):
            isolation = "savepoint" if contender == "pump+sp" else "optimistic"
            run = _pump_cell(url, batch, handler_name, done, slot, total, isolation)
        else:
            run = _raw_cell(url, batch, handler_name, savepoints=contender == "raw+sp")
        pipe.send("ready")
        assert pipe.recv() == "go"
        pipe.send(run())


# --------------------------------------------------------------------------- cells
def setup(database: str) -> None:
    import psycopg

    from sqltransport_schema import engines
    from sqltransport_schema.schema import Kind, TableName, TableSpec
    from sqltransport_schema.versions import profile

    with psycopg.connect(url_of(database)) as conn:
        for ddl in engines.get("postgresql").create_table(TableSpec(Kind.QUEUE, TableName(QUEUE)), profile("9.1")):
            conn.execute(ddl)
        conn.execute("CREATE TABLE effects (message_id uuid NOT NULL)")
        conn.commit()


def run_cell(database: str, pipes, done, contender: str, batch: int, handler: str, workers: int, per_worker: int) -> float:
    """Messages per second for one cell; asserts every message was handled once."""
    import psycopg

    reset(database, "ours")
    with psycopg.connect(url_of(database), autocommit=True) as conn:
        conn.execute("TRUNCATE effects")
    total = per_worker * workers
    prefill(database, "ours", total)
    used = pipes[:workers]
    for slot in range(len(done)):
        done[slot] = 0
    for pipe in used:
        pipe.send((contender, batch, handler, total))
    for pipe in used:
        assert pipe.recv() == "ready"
    started = time.perf_counter()
    for pipe in used:
        pipe.send("go")
    handled = sum(pipe.recv() for pipe in used)
    elapsed = time.perf_counter() - started
    assert handled == total, (contender, batch, handler, workers, handled, total)
    if handler == "insert":
        with psycopg.connect(url_of(database)) as conn:
            assert conn.execute("SELECT count(DISTINCT message_id), count(*) FROM effects").fetchone() == (total, total)
    return total / elapsed


def report(rates: dict[tuple, list[float]], ratios: dict[tuple, list[float]]) -> list[str]:
    """Print the table (medians); the targets missed."""

    def rate(handler: str, workers: int, batch: int, contender: str) -> float:
        return statistics.median(rates[(handler, workers, batch, contender)])

    print()
    print(
        f"{'handler':8} {'workers':>7} {'batch':>5} {'pump msg/s':>10} {'pump+sp':>8} {'raw msg/s':>9} {'raw+sp':>7} "
        f"{'pump/raw':>8} {'pump+sp/raw+sp':>14} {'pump vs b1':>10} {'pump+sp vs b1':>13}"
    )
    misses = []
    for handler in HANDLERS:
        least_ratio, least_speedup = TARGETS[handler]
        for workers in WORKERS:
            for batch in BATCHES:
                pump, raw = rate(handler, workers, batch, "pump"), rate(handler, workers, batch, "raw")
                ratio = statistics.median(ratios[(handler, workers, batch)])
                speedup = pump / rate(handler, workers, 1, "pump")
                if batch > 1:
                    pump_sp, raw_sp = rate(handler, workers, batch, "pump+sp"), rate(handler, workers, batch, "raw+sp")
                    isolated = f"{pump_sp:>8.0f} {raw:>9.0f} {raw_sp:>7.0f} {ratio:>8.2f} "
                    isolated += f"{statistics.median(ratios[(handler, workers, batch, 'sp')]):>14.2f} {speedup:>9.1f}x "
                    isolated += f"{pump_sp / rate(handler, workers, 1, 'pump'):>12.1f}x"
                else:
                    isolated = f"{'-':>8} {raw:>9.0f} {'-':>7} {ratio:>8.2f} {'-':>14} {speedup:>9.1f}x {'-':>13}"
                print(f"{handler:8} {workers:>7} {batch:>5} {pump:>10.0f} {isolated}")
                floor = least_ratio if batch == 50 else 0.7
                if batch > 1 and ratio < floor:
                    misses.append(f"{handler}/{workers}w/batch {batch}: pump/raw {ratio:.2f} < {floor}")
                if batch == 50 and speedup < least_speedup:
                    misses.append(f"{handler}/{workers}w: batch 50 is {speedup:.1f}x batch 1 < {least_speedup:g}x")
    for workers in WORKERS:  # the targets' cells round by round: how far the noise reaches
        per_round = " ".join(f"{r:.2f}" for r in ratios[("insert", workers, 50)])
        print(f"insert/{workers}w/batch 50 pump/raw by round: {per_round}")
    return misses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small cells, one round: a smoke run")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    counts = QUICK_COUNTS if args.quick else FULL_COUNTS
    rounds = 1 if args.quick else args.rounds

    database = create_database("sqlts_pump_bench")
    url = url_of(database)
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    done = ctx.Array("q", max(WORKERS), lock=False)  # each worker's pump.processed
    started = time.monotonic()
    try:
        setup(database)
        with admin() as conn:
            settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in ("synchronous_commit", "fsync", "wal_sync_method")}
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
        print(f"PostgreSQL {settings}; load average {' '.join(load)} at start; {rounds} round(s)")
        for slot in range(max(WORKERS)):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(url, theirs, done, slot), daemon=True)
            proc.start()
            pipes.append(mine)
            procs.append(proc)

        rates: dict[tuple, list[float]] = {}
        ratios: dict[tuple, list[float]] = {}
        for round_no in range(rounds):
            turn = round_no % len(CONTENDERS)
            order = CONTENDERS[turn:] + CONTENDERS[:turn]
            for handler in HANDLERS:
                for workers in WORKERS:
                    for batch in BATCHES:
                        contenders = [c for c in order if batch > 1 or c not in ISOLATED]  # no savepoints at batch 1
                        got = {c: run_cell(database, pipes, done, c, batch, handler, workers, counts[batch]) for c in contenders}
                        for contender, rate in got.items():
                            rates.setdefault((handler, workers, batch, contender), []).append(rate)
                        ratios.setdefault((handler, workers, batch), []).append(got["pump"] / got["raw"])
                        if "raw+sp" in got:
                            ratios.setdefault((handler, workers, batch, "sp"), []).append(got["pump+sp"] / got["raw+sp"])
            print(f"round {round_no + 1} done at {time.monotonic() - started:.0f} s", file=sys.stderr)

        misses = report(rates, ratios)
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
        print(f"\ntargets: {TARGETS_TEXT} -> {'MISSED: ' if misses else 'met'}")
        for miss in misses:
            print(f"  {miss}")
        print(f"load average {' '.join(load)} at the end; {time.monotonic() - started:.0f} s in all")
    finally:
        for pipe in pipes:
            pipe.send(None)
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        if not args.keep_db:
            drop_database(database)


if __name__ == "__main__":
    main()
