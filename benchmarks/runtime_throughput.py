"""Send and receive throughput on PostgreSQL: this library, the same SQL raw, and pgmq.

Messages carry a 1 KB JSON body and a realistic NServiceBus header map (about 500 B
as wire.encode_headers writes it, a fresh message id each). Every cell runs a fixed
number of messages per worker in 1, 2 or 4 worker processes (multiprocessing spawn);
the time is wall time from the moment all workers are ready (a barrier) until the
last one is done. Receive cells start from a pre-filled queue (filled outside the
timing, in the server from a fill table generated once, then VACUUM ANALYZE). Before
each cell the queue is truncated.

Rounds: every cell runs once per round, the contenders one after the other, and each
cell's order turns by one each round (8 rounds: every contender takes every position
equally often). A ratio is the median of the per-round ratios: the two runs of a
round shared the disk's state, whose commit latency drifts by 2x within minutes here.
Rates are medians over the rounds; the best-of-rounds ratio is printed beside it.

Contenders, at batch size 1 / 50:

  ours  Transport/Queue through a SQLAlchemy engine (db.make_engine), a Connection held
        by the worker and `conn.begin()` per transaction, as the message pump does:
        send() per transaction / send_many(50) per transaction;
        receive() per transaction / receive_batch(50) per transaction.
  driver the same Queue calls on a psycopg connection bound once with
        Transport.driver_connection, commit on that connection per transaction (the
        runtime's path for bulk consumers without a SQLAlchemy transaction per message).
  raw   exactly the engine's SEND / RECEIVE / RECEIVE_BATCH text (Statement.native
        ("pyformat")) through psycopg.connect, cursor.execute / executemany, commit per
        transaction, same batching, on the cursor the engine makes for the runtime
        (binary results, ids loaded as text), so the same bytes cross the wire. Raw does the same wire-format work as ours (headers
        encoded with wire.encode_headers on send, decoded with wire.decode_headers on
        receive, expired rows skipped, a batch sorted by Seq), so the ratio measures what
        the library adds around the SQL.
  pgmq  the pgmq PyPI client (SyncPGMQueue, its own psycopg pool of 1 per worker) over
        the pgmq SQL functions installed from the SQL file the package bundles:
        send() / send_batch(50) (one call = one transaction);
        pop() / pop(qty=50) (read-and-delete in one statement). The body is the same JSON
        document as a dict (pgmq stores JSONB), the headers the same map as JSONB.

    .venv/bin/python benchmarks/runtime_throughput.py [--quick] [--rounds N] [--keep-db]
    .venv/bin/python benchmarks/runtime_throughput.py --sqlite [--quick] [--rounds N]

--sqlite: the same cells on one SQLite file (WAL, as the migrations create it), send and receive
at batch size 1 in 1 and 4 processes: ours and driver (sqlite3 bound with driver_connection)
against raw, the engine's SEND / RECEIVE text (Statement.native("named")) on sqlite3.connect with
isolation_level IMMEDIATE and the same busy timeout, commit per transaction, the same wire work.
    .venv/bin/python benchmarks/runtime_throughput.py --profile send|receive [--batch 1|50]

--profile: where ours spends client CPU, one worker in this process: batch-1 steps from
raw to ours (each adds one thing the library does), the pieces timed alone, then
cProfile of ours (at --batch). No comparison with pgmq.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing as mp
import os
import pstats
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _databases import admin, create_database, drop_database  # noqa: E402  (beside this script)

QUEUE = "bench"
CONTENDERS = ("ours", "driver", "raw", "pgmq")
OURS = {"ours": "ours (SQLAlchemy Connection)", "driver": "ours (driver connection)"}  # the library's two paths
WORKERS = (1, 2, 4)
BATCHES = (1, 50)
BODY_BYTES = 1024

# messages per worker, per (operation, batch size)
# every cell runs one to a few seconds at these counts: long enough that a disk stall of a few
# hundred milliseconds does not decide a round on its own (batched receive runs at 25-50k msg/s)
FULL_COUNTS = {("send", 1): 4000, ("send", 50): 12000, ("receive", 1): 4000, ("receive", 50): 36000}
FULL_ROUNDS = 8  # a multiple of the four contenders: every position in every cell equally often
QUICK_COUNTS = {("send", 1): 200, ("send", 50): 1000, ("receive", 1): 200, ("receive", 50): 1000}
# SQLite: one writer at a time, so a cell's rate is the lock's hand-over rate; a few seconds per cell
SQLITE_CONTENDERS = ("ours", "driver", "raw")
SQLITE_WORKERS = (1, 4)
SQLITE_COUNTS = {("send", 1): 500, ("receive", 1): 500}
SQLITE_ROUNDS = 6  # a multiple of the three contenders


def url_of(database: str) -> str:
    """A PostgreSQL database by name; a SQLite database by its file path (--sqlite)."""
    if is_sqlite(database):
        return f"sqlite:///{database}"
    return f"postgresql://postgres@127.0.0.1:5432/{database}"


def is_sqlite(database: str) -> bool:
    return database.endswith(".db")


# --------------------------------------------------------------------------- messages
def make_body() -> bytes:
    """A 1 KB JSON order document, as an NServiceBus endpoint would serialize it."""
    doc = {
        "OrderId": str(uuid.UUID(int=0x1234)),
        "CustomerId": "customers/4711",
        "PlacedAt": "2026-11-21T10:15:30.1234567Z",
        "Currency": "EUR",
        "Lines": [
            {"Sku": f"SKU-{i:05d}", "Description": f"Article number {i} in the catalogue", "Quantity": i % 7 + 1, "UnitPrice": 12.5 + i}
            for i in range(6)
        ],
        "ShippingAddress": {
            "Name": "Erika Mustermann",
            "Street": "Heidestrasse 17",
            "City": "Koeln",
            "PostalCode": "51147",
            "Country": "DE",
        },
        "Notes": "",
    }
    base = len(json.dumps(doc, separators=(",", ":")).encode())
    doc["Notes"] = "x" * (BODY_BYTES - base)
    body = json.dumps(doc, separators=(",", ":")).encode()
    assert len(body) == BODY_BYTES, len(body)
    return body


def make_headers() -> dict[str, str]:
    """A realistic header map of a message sent from a handler: ~500 B encoded."""
    from sqltransport_schema import wire

    return wire.standard_headers(
        message_id=str(uuid.uuid4()),
        enclosed_types=["Shop.Messages.OrderPlaced"],
        reply_to="Shop.Sales",
        originating_endpoint="Shop.Sales",
        machine="app-01",
    )


def make_messages(count: int) -> list[tuple[bytes, dict[str, str]]]:
    body = make_body()
    return [(body, make_headers()) for _ in range(count)]


# --------------------------------------------------------------------------- database
def setup_database(database: str) -> str | None:
    """Our queue table from the engine's DDL; pgmq from the SQL its package bundles. Returns pgmq's problem, if any."""
    import psycopg

    from sqltransport_schema import engines
    from sqltransport_schema.schema import Kind, TableName, TableSpec
    from sqltransport_schema.versions import profile

    with psycopg.connect(url_of(database)) as conn:
        for ddl in engines.get("postgresql").create_table(TableSpec(Kind.QUEUE, TableName(QUEUE)), profile("9.1")):
            conn.execute(ddl)
        conn.commit()
    try:
        from pgmq.install import get_embedded_install_sql, install_pgmq_sql
    except ImportError as exc:
        return f"pgmq is not installed ({exc}); pip install pgmq"
    try:
        with psycopg.connect(url_of(database)) as conn:
            install_pgmq_sql(get_embedded_install_sql(), conn=conn)
            conn.execute("SELECT pgmq.create(%s)", (QUEUE,))
            conn.commit()
    except Exception as exc:  # reported, never faked
        return f"pgmq SQL could not be installed: {exc}"
    return None


def pgmq_versions() -> str:
    try:
        import pgmq
        from pgmq.install import get_embedded_sql_version

        return f"pgmq client {pgmq.__version__}, pgmq SQL {get_embedded_sql_version()} (bundled pgmq/sql/pgmq.sql, no extension)"
    except Exception as exc:
        return f"pgmq unavailable: {exc}"


def statements(engine: str = "postgresql"):
    from sqltransport_schema import engines
    from sqltransport_schema.schema import TableName
    from sqltransport_schema.versions import profile

    return engines.get(engine).runtime_statements(profile("9.1"), TableName(QUEUE))


def runtime_cursor(dbapi_connection):
    """The cursor the engine makes for the runtime (binary results, ids as text): raw and
    ours put the same bytes on the wire and get the same Python values back."""
    from sqltransport_schema import engines

    module = type(dbapi_connection).__module__.partition(".")[0]
    return engines.for_driver(module).runtime_cursor(dbapi_connection)


def reset(database: str, contender: str) -> None:
    if is_sqlite(database):
        with sqlite_connect(database) as conn:
            conn.execute(f'DELETE FROM "{QUEUE}"')
            conn.execute("DELETE FROM sqlite_sequence")
        return
    import psycopg

    with psycopg.connect(url_of(database), autocommit=True) as conn:
        if contender == "pgmq":
            conn.execute(f"TRUNCATE pgmq.q_{QUEUE}, pgmq.a_{QUEUE}")
        else:
            conn.execute(f'TRUNCATE "public"."{QUEUE}" RESTART IDENTITY')


FILL_CHUNK = 1000


def _grow_fill(conn, contender: str, total: int) -> None:
    """Make the fill table of a layout hold at least `total` distinct messages (generated once
    per run, through the same encoding as a send; later fills copy from it in the server)."""
    from sqltransport_schema import wire

    pgmq = contender == "pgmq"
    table = "bench_fill_pgmq" if pgmq else "bench_fill"
    columns = (
        "n bigserial PRIMARY KEY, message jsonb, headers jsonb" if pgmq else "n bigserial PRIMARY KEY, id uuid, headers text, body bytea"
    )
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
    have = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    body = make_body()
    cur = conn.cursor()
    while have < total:
        n = min(FILL_CHUNK, total - have)
        if pgmq:
            text = body.decode()
            cur.executemany(
                f"INSERT INTO {table} (message, headers) VALUES (%s::jsonb, %s::jsonb)",
                [(text, json.dumps(make_headers())) for _ in range(n)],
            )
        else:
            rows = []
            for _ in range(n):
                h = make_headers()
                rows.append((h[wire.MESSAGE_ID], wire.encode_headers(h), body))
            cur.executemany(f"INSERT INTO {table} (id, headers, body) VALUES (%s, %s, %s)", rows)
        have += n
    conn.commit()


def prefill(database: str, contender: str, total: int) -> None:
    """Fill the queue outside the timing, in the server from the run's fill table, then VACUUM ANALYZE.

    Rows arrive in fill order, each with its own message id in Id and Headers, the same rows a
    send writes (Expires NULL; pgmq: vt = clock_timestamp(), as pgmq.send() writes it). pgmq's
    Python client encodes jsonb[] arrays slowly, and the fill is not what is measured."""
    if is_sqlite(database):
        return prefill_sqlite(database, total)
    import psycopg

    with psycopg.connect(url_of(database)) as conn:
        _grow_fill(conn, contender, total)
        if contender == "pgmq":
            conn.execute(
                f"INSERT INTO pgmq.q_{QUEUE} (vt, message, headers) "
                "SELECT clock_timestamp(), message, headers FROM bench_fill_pgmq ORDER BY n LIMIT %s",
                (total,),
            )
        else:
            conn.execute(
                f'INSERT INTO "public"."{QUEUE}" (Id, Expires, Headers, Body) '
                "SELECT id, NULL, headers, body FROM bench_fill ORDER BY n LIMIT %s",
                (total,),
            )
        conn.commit()
    with psycopg.connect(url_of(database), autocommit=True) as conn:
        table = f"pgmq.q_{QUEUE}" if contender == "pgmq" else f'"public"."{QUEUE}"'
        conn.execute(f"VACUUM ANALYZE {table}")


def sqlite_connect(path: str):
    """sqlite3 as raw uses it: sqlite3's implicit BEGIN as BEGIN IMMEDIATE, the runtime's busy timeout."""
    import sqlite3

    from sqltransport_schema import engines

    return sqlite3.connect(path, isolation_level="IMMEDIATE", timeout=engines.get("sqlite").BUSY_TIMEOUT_MS / 1000)


def setup_sqlite(path: str) -> str:
    """A new database file in WAL with our queue table from the engine's DDL, as the migrations make it."""
    from sqltransport_schema import engines
    from sqltransport_schema.schema import Kind, TableName, TableSpec
    from sqltransport_schema.versions import profile

    sqlite = engines.get("sqlite")
    with sqlite_connect(path) as conn:
        assert sqlite.new_database_in_wal(conn)
        for ddl in sqlite.create_table(TableSpec(Kind.QUEUE, TableName(QUEUE)), profile("9.1")):
            conn.execute(ddl)
        conn.execute("CREATE TABLE bench_fill (n INTEGER PRIMARY KEY, id TEXT, headers TEXT, body BLOB)")
    return path


def prefill_sqlite(path: str, total: int) -> None:
    """The SQLite queue filled from the run's fill table (grown once, encoded as a send encodes)."""
    from sqltransport_schema import wire

    body = make_body()
    with sqlite_connect(path) as conn:
        have = conn.execute("SELECT count(*) FROM bench_fill").fetchone()[0]
        rows = []
        for _ in range(max(0, total - have)):
            h = make_headers()
            rows.append((h[wire.MESSAGE_ID], wire.encode_headers(h), body))
        conn.executemany("INSERT INTO bench_fill (id, headers, body) VALUES (?, ?, ?)", rows)
        conn.execute(
            f'INSERT INTO "{QUEUE}" (Id, Recoverable, Expires, Headers, Body) '
            "SELECT id, 1, NULL, headers, body FROM bench_fill ORDER BY n LIMIT ?",
            (total,),
        )


# --------------------------------------------------------------------------- contenders
class Ours:
    def __init__(self, url: str):
        from sqltransport_schema.db import make_engine
        from sqltransport_schema.runtime.transport import Transport

        self.engine = make_engine(url)
        self.queue = Transport(self.engine, "9.1").queue(QUEUE)
        self.conn = self.engine.connect()  # held, as each pump thread holds one; connecting is not timed
        self.conn.exec_driver_sql("SELECT 1")
        self.conn.commit()

    def send(self, messages, batch: int) -> int:
        conn, queue = self.conn, self.queue
        if batch == 1:
            for body, headers in messages:
                with conn.begin():
                    queue.send(conn, body, headers)
        else:
            for i in range(0, len(messages), batch):
                with conn.begin():
                    queue.send_many(conn, messages[i : i + batch])
        return len(messages)

    def receive(self, count: int, batch: int) -> tuple[int, int]:
        conn, queue = self.conn, self.queue
        got = empty = 0
        while got < count and empty < 100:
            with conn.begin():
                if batch == 1:
                    taken = 1 if queue.receive(conn) is not None else 0
                else:
                    taken = len(queue.receive_batch(conn, min(batch, count - got)))
            got += taken
            empty += taken == 0
        return got, empty

    def close(self):
        self.conn.close()
        self.engine.dispose()


class Driver(Ours):
    def __init__(self, url: str):
        import psycopg

        from sqltransport_schema.db import make_engine
        from sqltransport_schema.runtime.transport import Transport

        self.engine = make_engine(url)  # names the engine; no connection is taken from it
        transport = Transport(self.engine, "9.1")
        self.queue = transport.queue(QUEUE)
        if url.startswith("sqlite"):
            import sqlite3

            self.raw = sqlite3.connect(self.engine.url.database)  # as a user opens it; binding sets it up
        else:
            self.raw = psycopg.connect(url)
        self.conn = transport.driver_connection(self.raw)
        self.raw.execute("SELECT 1")
        self.raw.commit()

    def send(self, messages, batch: int) -> int:
        conn, queue, commit = self.conn, self.queue, self.raw.commit
        if batch == 1:
            for body, headers in messages:
                queue.send(conn, body, headers)
                commit()
        else:
            for i in range(0, len(messages), batch):
                queue.send_many(conn, messages[i : i + batch])
                commit()
        return len(messages)

    def receive(self, count: int, batch: int) -> tuple[int, int]:
        conn, queue, commit = self.conn, self.queue, self.raw.commit
        got = empty = 0
        while got < count and empty < 100:
            if batch == 1:
                taken = 1 if queue.receive(conn) is not None else 0
            else:
                taken = len(queue.receive_batch(conn, min(batch, count - got)))
            commit()
            got += taken
            empty += taken == 0
        return got, empty

    def close(self):
        self.raw.close()
        self.engine.dispose()


class Raw:
    def __init__(self, url: str):
        import psycopg

        from sqltransport_schema import wire

        self.wire = wire
        sqlite = url.startswith("sqlite")
        self.conn = sqlite_connect(url.removeprefix("sqlite:///")) if sqlite else psycopg.connect(url)
        found = statements("sqlite" if sqlite else "postgresql")
        style = "named" if sqlite else "pyformat"  # both take the parameters as a dict
        self.send_sql = found["send"].native(style)[0]
        self.receive_sql = found["receive"].native(style)[0]
        self.receive_batch_sql = found["receive_batch"].native(style)[0]
        columns = getattr(found["receive_batch"], "columns", ())
        # the row layout the hand-written code below relies on
        assert not columns or tuple(columns[:5]) == ("Id", "Expired", "Headers", "Body", "Order"), columns
        self.conn.execute("SELECT 1")
        self.conn.commit()

    def send(self, messages, batch: int) -> int:
        conn, sql, encode, message_id = self.conn, self.send_sql, self.wire.encode_headers, self.wire.MESSAGE_ID
        cur = runtime_cursor(conn)
        if batch == 1:
            for body, headers in messages:
                cur.execute(sql, {"Id": headers[message_id], "TimeToBeReceivedMs": None, "Headers": encode(headers), "Body": body})
                conn.commit()
        else:
            for i in range(0, len(messages), batch):
                cur.executemany(
                    sql,
                    [
                        {"Id": h[message_id], "TimeToBeReceivedMs": None, "Headers": encode(h), "Body": b}
                        for b, h in messages[i : i + batch]
                    ],
                )
                conn.commit()
        return len(messages)

    def receive(self, count: int, batch: int) -> tuple[int, int]:
        conn, decode = self.conn, self.wire.decode_headers
        cur = runtime_cursor(conn)
        got = empty = 0
        while got < count and empty < 100:
            if batch == 1:
                taken = 0
                while True:
                    cur.execute(self.receive_sql)
                    row = cur.fetchone()
                    if row is None or not row[1]:
                        break
                if row is not None:
                    str(row[0]), bytes(row[3]), decode(row[2])
                    taken = 1
            else:
                cur.execute(self.receive_batch_sql, {"BatchSize": min(batch, count - got)})
                rows = cur.fetchall()
                rows.sort(key=lambda r: r[4])
                taken = len([(str(r[0]), bytes(r[3]), decode(r[2])) for r in rows if not r[1]])
            conn.commit()
            got += taken
            empty += taken == 0
        return got, empty

    def close(self):
        self.conn.close()


class Pgmq:
    def __init__(self, url: str):
        from pgmq import SyncPGMQueue

        self.client = SyncPGMQueue(conn_string=url, pool_size=1, init_extension=False)
        self.client.pool.wait()
        self.client.metrics(QUEUE)  # first use: not timed

    def send(self, messages, batch: int) -> int:
        client = self.client
        if batch == 1:
            for doc, headers in messages:
                client.send(QUEUE, doc, headers=headers)
        else:
            for i in range(0, len(messages), batch):
                chunk = messages[i : i + batch]
                client.send_batch(QUEUE, [d for d, _ in chunk], headers=[h for _, h in chunk])
        return len(messages)

    def receive(self, count: int, batch: int) -> tuple[int, int]:
        client = self.client
        got = empty = 0
        while got < count and empty < 100:
            if batch == 1:
                taken = 1 if client.pop(QUEUE) is not None else 0
            else:
                taken = len(client.pop(QUEUE, qty=min(batch, count - got)))
            got += taken
            empty += taken == 0
        return got, empty

    def close(self):
        self.client.close()


KINDS = {"ours": Ours, "driver": Driver, "raw": Raw, "pgmq": Pgmq}


def run_one(contender: str, op: str, batch: int, count: int, database: str, barrier) -> tuple:
    client = KINDS[contender](url_of(database))
    messages = None
    if op == "send":
        messages = make_messages(count)
        if contender == "pgmq":
            doc = json.loads(messages[0][0])
            messages = [(doc, h) for _, h in messages]
    barrier.wait(timeout=600)
    started, cpu = time.monotonic(), time.process_time()
    if op == "send":
        done, empty = client.send(messages, batch), 0
    else:
        done, empty = client.receive(count, batch)
    ended, cpu = time.monotonic(), time.process_time() - cpu
    client.close()
    return started, ended, done, empty, None, cpu


def worker_loop(pipe, barriers) -> None:
    """A worker process (spawned once): runs one cell's share per command, fresh client each time."""
    while True:
        command = pipe.recv()
        if command is None:
            return
        contender, op, batch, count, database, parties = command
        try:
            pipe.send(run_one(contender, op, batch, count, database, barriers[parties]))
        except BaseException as exc:  # reported by the parent
            try:
                barriers[parties].abort()
            except Exception:
                pass
            pipe.send((0.0, 0.0, 0, 0, f"{type(exc).__name__}: {exc}", 0.0))


class Workers:
    """max(WORKERS) processes started with multiprocessing spawn, reused for every cell."""

    def __init__(self, size: int):
        ctx = mp.get_context("spawn")
        self.barriers = {n: ctx.Barrier(n) for n in WORKERS}
        self.pipes, self.procs = [], []
        for _ in range(size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_loop, args=(child, self.barriers), daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    def run(self, n: int, command: tuple) -> list[tuple]:
        if self.barriers[n].broken:
            self.barriers[n].reset()
        for pipe in self.pipes[:n]:
            pipe.send((*command, n))
        return [pipe.recv() for pipe in self.pipes[:n]]

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for proc in self.procs:
            proc.join(timeout=30)


def run_cell(pool: Workers, database: str, contender: str, op: str, workers: int, batch: int, count: int) -> dict:
    reset(database, contender)
    if op == "receive":
        # a margin so the last worker never finds the queue empty while others hold rows
        prefill(database, contender, workers * count + workers * batch * 2)
    outcomes = pool.run(workers, (contender, op, batch, count, database))
    errors = [o[4] for o in outcomes if o[4]]
    if errors:
        return {"error": errors[0]}
    wall = max(o[1] for o in outcomes) - min(o[0] for o in outcomes)
    done = sum(o[2] for o in outcomes)
    empty = sum(o[3] for o in outcomes)
    cpu_us = sum(o[5] for o in outcomes) / max(done, 1) * 1e6
    return {"rate": done / wall, "wall": wall, "done": done, "empty": empty, "expected": workers * count, "cpu_us": cpu_us}


# --------------------------------------------------------------------------- report
def fmt_rate(cell: dict | None) -> str:
    if cell is None:
        return "n/a"
    if "error" in cell:
        return "ERROR"
    return f"{cell['rate']:,.0f}"


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller message counts (a minute or two)")
    parser.add_argument("--rounds", type=int, help=f"interleaved rounds per cell (default {FULL_ROUNDS}; 1 with --quick)")
    parser.add_argument("--keep-db", action="store_true", help="leave the benchmark database in place")
    parser.add_argument("--profile", choices=("send", "receive"), help="cProfile ours, one worker in-process")
    parser.add_argument("--batch", type=int, default=1, choices=BATCHES, help="batch size of the cProfile run of --profile")
    parser.add_argument("--sqlite", action="store_true", help="the SQLite cells (one file in a temporary folder)")
    args = parser.parse_args()
    counts = QUICK_COUNTS if args.quick else FULL_COUNTS
    if args.sqlite:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sqlts_bench_") as folder:
            counts = {key: QUICK_COUNTS[key] for key in SQLITE_COUNTS} if args.quick else SQLITE_COUNTS
            return compare_sqlite(
                setup_sqlite(os.path.join(folder, "bench.db")), counts, args.rounds or (1 if args.quick else SQLITE_ROUNDS)
            )

    database = create_database("sqlts_bench_rt")
    try:
        problem = setup_database(database)
        if args.profile:
            return profile_ours(database, args.profile, args.batch, counts[(args.profile, args.batch)])
        return compare(database, counts, args.rounds if args.rounds else (1 if args.quick else FULL_ROUNDS), problem)
    finally:
        if args.keep_db:
            print(f"(database {database} kept)")
        else:
            drop_database(database)


def measure(database: str, contenders, workers_list, batches, counts: dict, rounds: int) -> tuple[dict, float]:
    """Every cell once per round, the contenders one after the other in an order that turns each
    round; (runs by (op, workers, batch, contender), seconds measuring took)."""
    runs: dict[tuple, list[dict]] = {}
    pool = Workers(max(WORKERS))
    started = time.monotonic()
    try:
        for contender in contenders:  # warm-up, not reported: worker imports, server caches, first WAL segments
            for op in ("send", "receive"):
                run_cell(pool, database, contender, op, max(WORKERS), 1, 50)
        for round_no in range(rounds):
            cell_no = 0
            for op in ("send", "receive"):
                for workers in workers_list:
                    for batch in batches:
                        # each cell's order turns by one every round: over a multiple of len(contenders)
                        # rounds every contender runs first, second and last in it equally often
                        shift = (round_no + cell_no) % len(contenders)
                        order = contenders[shift:] + contenders[:shift]
                        cell_no += 1
                        for contender in order:
                            cell = run_cell(pool, database, contender, op, workers, batch, counts[(op, batch)])
                            runs.setdefault((op, workers, batch, contender), []).append(cell)
                            if "error" in cell:
                                print(f"  ! {op} {contender} workers={workers} batch={batch}: {cell['error']}", flush=True)
                            elif cell["done"] != cell["expected"] or cell["empty"]:
                                print(
                                    f"  ! {op} {contender} workers={workers} batch={batch}: {cell['done']} of {cell['expected']} "
                                    f"messages, {cell['empty']} empty receives",
                                    flush=True,
                                )
                        print(
                            f"  .. round {round_no + 1} {op} workers={workers} batch={batch}: "
                            + ", ".join(f"{c} {fmt_rate(runs[(op, workers, batch, c)][-1])}" for c in contenders),
                            file=sys.stderr,
                            flush=True,
                        )
    finally:
        pool.close()
    return runs, time.monotonic() - started


def compare(database: str, counts: dict, rounds: int, pgmq_problem: str | None) -> int:
    import psycopg
    import sqlalchemy

    contenders = [c for c in CONTENDERS if not (c == "pgmq" and pgmq_problem)]
    with admin() as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('synchronous_commit', 'fsync', 'autovacuum', 'shared_buffers')"
            ).fetchall()
        )
    headers_len = len(__import__("sqltransport_schema.wire", fromlist=["wire"]).encode_headers(make_headers()))
    print(
        f"PostgreSQL {server} (synchronous_commit={settings.get('synchronous_commit')}, fsync={settings.get('fsync')}, "
        f"autovacuum={settings.get('autovacuum')}); {os.cpu_count()} cores; Python {sys.version.split()[0]}, "
        f"psycopg {psycopg.__version__}, SQLAlchemy {sqlalchemy.__version__}"
    )
    print(pgmq_versions() if not pgmq_problem else f"pgmq: NOT MEASURED -- {pgmq_problem}")
    print(f"message: {BODY_BYTES} B JSON body, {headers_len} B encoded headers (fresh message id each)")
    print("messages per worker: " + ", ".join(f"{op} batch {b}: {n:,}" for (op, b), n in counts.items()))
    print("pgmq batch 50: send_batch(50) and pop(qty=50) (read-and-delete in one statement); batch 1: send() and pop()")
    print(
        f"{rounds} round(s) per cell, interleaved: in each round the contenders run one after the other (rotating "
        "order), so a round's ratio compares runs that shared the disk's state; wall time from the barrier to the last worker done"
    )
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    runs, elapsed = measure(database, contenders, WORKERS, BATCHES, counts, rounds)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; measuring took {elapsed:.0f} s")

    def good(cells: list[dict] | None) -> list[dict] | None:
        """The cell's rounds, or None when any round failed (an error is never averaged away)."""
        if not cells or any("rate" not in c for c in cells):
            return None
        return cells

    def median_rate(key: tuple) -> float | None:
        cells = good(runs.get(key))
        return statistics.median(c["rate"] for c in cells) if cells else None

    def paired(key: tuple, a: str, b: str) -> list[float] | None:
        """a/b per round: the two ran one after the other, so they shared the disk's state."""
        x, y = good(runs.get((*key, a))), good(runs.get((*key, b)))
        if not x or not y:
            return None
        return [p["rate"] / q["rate"] for p, q in zip(x, y)]

    def paired_median(key: tuple, a: str, b: str) -> float | None:
        values = paired(key, a, b)
        return statistics.median(values) if values else None

    def best_ratio(key: tuple, a: str, b: str) -> float | None:
        x, y = good(runs.get((*key, a))), good(runs.get((*key, b)))
        return max(c["rate"] for c in x) / max(c["rate"] for c in y) if x and y else None

    def fmt_median(value: float | None) -> str:
        return "n/a" if value is None else f"{value:,.0f}"

    for op in ("send", "receive"):
        print()
        print(f"{op} (messages/s, median of {rounds} rounds; ratios: median of the per-round ratios, best-of-rounds ratio after /)")
        print(
            f"{'workers':>7} {'batch':>5} "
            + " ".join(f"{c + ' msg/s':>12}" for c in CONTENDERS)
            + " "
            + " ".join(f"{o + '/' + ref:>14}" for o in OURS for ref in ("raw", "pgmq"))
        )
        for workers in WORKERS:
            for batch in BATCHES:
                key = (op, workers, batch)
                rates = " ".join(f"{fmt_median(median_rate((*key, c))):>12}" for c in CONTENDERS)
                ratios = " ".join(
                    f"{fmt_ratio(paired_median(key, o, ref)) + ' / ' + fmt_ratio(best_ratio(key, o, ref)):>14}"
                    for o in OURS
                    for ref in ("raw", "pgmq")
                )
                print(f"{workers:>7} {batch:>5} {rates} {ratios}")

    print()
    print("targets (median of the per-round paired ratios; the batch ratio from median rates), for each of the library's paths")
    tally: dict[str, list[int]] = {o: [0, 0] for o in OURS}

    def verdict(path: str, ok: bool | None, text: str) -> None:
        state = "NOT MEASURED" if ok is None else "met" if ok else "MISSED"
        tally[path][0 if ok else 1] += 1
        print(f"  {text} -> {state}")

    for path, label in OURS.items():
        print(f" {label}")
        for op in ("send", "receive"):
            for workers in WORKERS:
                for batch in BATCHES:
                    r = paired_median((op, workers, batch), path, "raw")
                    verdict(
                        path, None if r is None else r >= 0.9, f"{op:<7} workers={workers} batch={batch:<2}: >= 0.9x raw  ({fmt_ratio(r)})"
                    )
        for op in ("send", "receive"):
            for workers in WORKERS:
                for batch in BATCHES:
                    r = paired_median((op, workers, batch), path, "pgmq")
                    verdict(
                        path, None if r is None else r >= 1.0, f"{op:<7} workers={workers} batch={batch:<2}: >= 1.0x pgmq ({fmt_ratio(r)})"
                    )
        for workers in WORKERS:
            fifty, one = median_rate(("receive", workers, 50, path)), median_rate(("receive", workers, 1, path))
            r = fifty / one if fifty and one else None
            verdict(path, None if r is None else r >= 10, f"receive workers={workers}: batch 50 >= 10x batch 1 ({fmt_ratio(r)})")
    for path, label in OURS.items():
        met, missed = tally[path]
        print(f"{label}: {met} met, {missed} missed or not measured")

    print()
    print("per-round ratios to raw (the spread the disk's commit latency puts on one cell)")
    for path in OURS:
        for op in ("send", "receive"):
            for workers in WORKERS:
                for batch in BATCHES:
                    values = paired((op, workers, batch), path, "raw")
                    print(
                        f"  {path:<6} {op:<7} workers={workers} batch={batch:<2}: "
                        + (" ".join(f"{v:.2f}" for v in values) if values else "n/a")
                    )

    print()
    print("client CPU per message in the worker processes (us; median of the rounds; server time not included)")
    print(f"{'op':<7} {'workers':>7} {'batch':>5} " + " ".join(f"{c:>6}" for c in CONTENDERS))
    for op in ("send", "receive"):
        for workers in WORKERS:
            for batch in BATCHES:
                cpu = [good(runs.get((op, workers, batch, c))) for c in CONTENDERS]
                print(
                    f"{op:<7} {workers:>7} {batch:>5} "
                    + " ".join(f"{statistics.median(x['cpu_us'] for x in c):>6.0f}" if c else f"{'n/a':>6}" for c in cpu)
                )

    if rounds > 1:
        print()
        print("every round (msg/s, " + " / ".join(CONTENDERS) + ")")
        for op in ("send", "receive"):
            for workers in WORKERS:
                for batch in BATCHES:
                    per = [
                        " / ".join(
                            fmt_rate(runs[(op, workers, batch, c)][i]) if (op, workers, batch, c) in runs else "n/a" for c in CONTENDERS
                        )
                        for i in range(rounds)
                    ]
                    print(f"  {op:<7} workers={workers} batch={batch:<2}: " + " | ".join(per))
    return 0


def compare_sqlite(path: str, counts: dict, rounds: int) -> int:
    """ours and driver against raw sqlite3 on one SQLite file: rates, paired ratios per cell."""
    import sqlite3

    import sqlalchemy

    with sqlite_connect(path) as conn:
        mode, synchronous = conn.execute("PRAGMA journal_mode").fetchone()[0], conn.execute("PRAGMA synchronous").fetchone()[0]
    print(
        f"SQLite {sqlite3.sqlite_version} (journal_mode={mode}, synchronous={synchronous}); {os.cpu_count()} cores; "
        f"Python {sys.version.split()[0]}, SQLAlchemy {sqlalchemy.__version__}"
    )
    print("messages per worker: " + ", ".join(f"{op} batch {b}: {n:,}" for (op, b), n in counts.items()))
    print(f"{rounds} round(s) per cell, interleaved (rotating order); wall time from the barrier to the last worker done")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    runs, elapsed = measure(path, SQLITE_CONTENDERS, SQLITE_WORKERS, (1,), counts, rounds)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; measuring took {elapsed:.0f} s")

    def rates(key: tuple) -> list[float] | None:
        cells = runs.get(key)
        return None if not cells or any("rate" not in c for c in cells) else [c["rate"] for c in cells]

    print()
    print(f"SQLite, batch 1 (messages/s, median of {rounds} rounds; ratios: median of the per-round ratios, best-of-rounds ratio after /)")
    print(
        f"{'op':<7} {'workers':>7} "
        + " ".join(f"{c + ' msg/s':>12}" for c in SQLITE_CONTENDERS)
        + " "
        + " ".join(f"{o + '/raw':>14}" for o in OURS)
        + "  per-round ratios ours/raw | driver/raw"
    )
    for op in ("send", "receive"):
        for workers in SQLITE_WORKERS:
            found = {c: rates((op, workers, 1, c)) for c in SQLITE_CONTENDERS}
            cells = " ".join(f"{statistics.median(r):>12,.0f}" if r else f"{'n/a':>12}" for r in found.values())
            ratios, rounds_text = [], []
            for o in OURS:
                a, b = found[o], found["raw"]
                per = [x / y for x, y in zip(a, b)] if a and b else None
                ratios.append(
                    f"{fmt_ratio(statistics.median(per) if per else None) + ' / ' + fmt_ratio(max(a) / max(b) if per else None):>14}"
                )
                rounds_text.append(" ".join(f"{v:.2f}" for v in per) if per else "n/a")
            print(f"{op:<7} {workers:>7} {cells} {' '.join(ratios)}  {' | '.join(rounds_text)}")
    return 0


# --------------------------------------------------------------------------- profile
class Ablation:
    """Steps from raw towards ours for batch-1 send/receive: each adds one thing the library does."""

    STEPS = (
        "raw: own psycopg connection, one cursor",
        "+ the SQLAlchemy pool's DBAPI connection instead",
        "+ a new cursor per transaction",
        "+ held SQLAlchemy Connection, conn.begin()/commit per tx",
        "+ Queue.send/receive instead of hand-written code",
        "= ours: engine.connect() + begin per tx (pool checkout)",
        "= ours on its own psycopg connection via Transport.driver_connection, commit on it",
    )

    def __init__(self, url: str, step: int):
        import psycopg

        from sqltransport_schema import wire
        from sqltransport_schema.db import make_engine
        from sqltransport_schema.runtime.transport import Transport

        self.step, self.wire = step, wire
        self.engine = make_engine(url)
        transport = Transport(self.engine, "9.1")
        self.queue = transport.queue(QUEUE)
        found = statements()
        self.send_sql = found["send"].native("pyformat")[0]
        self.receive_sql = found["receive"].native("pyformat")[0]
        self.sa = self.engine.connect()
        self.sa.exec_driver_sql("SELECT 1")
        self.sa.rollback()
        self.dbapi = psycopg.connect(url) if step in (0, 6) else self.sa.connection.dbapi_connection
        self.bound = transport.driver_connection(self.dbapi) if step == 6 else None

    def close(self):
        if self.step in (0, 6):
            self.dbapi.close()
        self.sa.close()
        self.engine.dispose()

    def send(self, messages, batch: int) -> int:
        step, dbapi, sql, encode, key = self.step, self.dbapi, self.send_sql, self.wire.encode_headers, self.wire.MESSAGE_ID
        cur = runtime_cursor(dbapi)
        for body, headers in messages:
            if step == 6:
                self.queue.send(self.bound, body, headers)
                dbapi.commit()
            elif step == 5:
                with self.engine.connect() as conn, conn.begin():
                    self.queue.send(conn, body, headers)
            elif step == 4:
                with self.sa.begin():
                    self.queue.send(self.sa, body, headers)
            elif step == 3:
                with self.sa.begin():
                    runtime_cursor(dbapi).execute(
                        sql, {"Id": headers[key], "TimeToBeReceivedMs": None, "Headers": encode(headers), "Body": body}
                    )
            else:
                if step == 2:
                    cur = runtime_cursor(dbapi)
                cur.execute(sql, {"Id": headers[key], "TimeToBeReceivedMs": None, "Headers": encode(headers), "Body": body})
                dbapi.commit()
        return len(messages)

    def receive(self, count: int, batch: int) -> tuple[int, int]:
        step, dbapi, sql, decode = self.step, self.dbapi, self.receive_sql, self.wire.decode_headers
        cur = runtime_cursor(dbapi)
        for _ in range(count):
            if step == 6:
                self.queue.receive(self.bound)
                dbapi.commit()
            elif step == 5:
                with self.engine.connect() as conn, conn.begin():
                    self.queue.receive(conn)
            elif step == 4:
                with self.sa.begin():
                    self.queue.receive(self.sa)
            elif step == 3:
                with self.sa.begin():
                    row = runtime_cursor(dbapi).execute(sql).fetchone()
                    str(row[0]), bytes(row[3]), decode(row[2])
            else:
                if step == 2:
                    cur = runtime_cursor(dbapi)
                row = cur.execute(sql).fetchone()
                str(row[0]), bytes(row[3]), decode(row[2])
                dbapi.commit()
        return count, 0


def per_call_us(fn, n: int = 5000) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - started)
    return best / n * 1e6


def components(database: str) -> None:
    """CPU of the pieces around the SQL, each alone (no round trip to the server involved)."""
    import psycopg

    from sqltransport_schema import wire

    ours = Ours(url_of(database))
    engine, queue = ours.engine, ours.queue
    headers = make_headers()
    text = wire.encode_headers(headers)
    statement = queue.statements["send"]
    rows = []

    def checkout_checkin():
        with engine.connect():
            pass

    held = engine.connect()

    def begin_commit():  # nothing executed: psycopg's commit of an idle connection sends nothing
        with held.begin():
            pass

    def library_cursor():
        if held.get_transaction() is None:
            held.begin()
        held.connection.dbapi_connection.cursor()

    raw = psycopg.connect(url_of(database))
    rows.append(("engine.connect() + close() (pool checkout, checkin, reset-on-return)", per_call_us(checkout_checkin)))
    rows.append(("conn.begin() + commit() around nothing (SQLAlchemy transaction objects)", per_call_us(begin_commit)))
    rows.append(("transport._cursor(): get_transaction + dbapi_connection.cursor()", per_call_us(library_cursor)))
    held.rollback()
    rows.append(("psycopg connection.cursor() alone", per_call_us(raw.cursor)))
    rows.append(("Statement.native('pyformat') (cached lookup)", per_call_us(lambda: statement.native("pyformat"))))
    rows.append(("Queue._row(): encode_headers + row dict", per_call_us(lambda: queue._row(b"", headers, None, None))))
    rows.append(("wire.encode_headers (528 B map)", per_call_us(lambda: wire.encode_headers(headers))))
    rows.append(("wire.decode_headers", per_call_us(lambda: wire.decode_headers(text))))
    rows.append(("uuid.uuid4() (not called: the headers carry the message id)", per_call_us(uuid.uuid4)))
    held.close()
    raw.close()
    ours.close()
    print("CPU of the pieces, each alone (us per call, best of 3 x 5000 calls)")
    for name, us in rows:
        print(f"  {us:>7.1f}  {name}")


def call_counts(database: str, op: str, count: int) -> None:
    """Python function calls per batch-1 message under cProfile, by package: deterministic, unlike CPU time."""
    import collections

    print("Python function calls per message (batch 1, cProfile call counts; independent of machine load)")
    for name, kind in (("raw", Raw), ("ours", Ours), ("driver", Driver)):
        reset(database, "ours")
        messages = make_messages(count) if op == "send" else None
        if op == "receive":
            prefill(database, "ours", count + 10)
        client = kind(url_of(database))
        profiler = cProfile.Profile()
        profiler.enable()
        if op == "send":
            client.send(messages, 1)
        else:
            client.receive(count, 1)
        profiler.disable()
        client.close()
        stats = pstats.Stats(profiler)
        by = collections.Counter()
        for (filename, _line, _function), (_cc, calls, *_rest) in stats.stats.items():
            package = next((p for p in ("sqlalchemy", "psycopg", "sqltransport_schema") if p in filename), None)
            by[package or ("builtins" if filename == "~" else "stdlib/other")] += calls
        parts = ", ".join(f"{package} {calls / count:.0f}" for package, calls in by.most_common() if calls / count >= 0.5)
        print(f"  {name:<6} {stats.total_calls / count:>4.0f}  ({parts})")


def profile_ours(database: str, op: str, batch: int, count: int) -> int:
    rounds = 7
    print(f"{op}, batch 1, {count} messages per run, one worker in this process: client CPU (process_time) per message,")
    print(f"median of {rounds} runs, steps alternating; the server's work is the same in every step")
    measured: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(Ablation.STEPS))}
    for _ in range(rounds):
        for step in measured:
            reset(database, "ours")
            messages = make_messages(count) if op == "send" else None
            if op == "receive":
                prefill(database, "ours", count + 10)
            client = Ablation(url_of(database), step)
            started, cpu = time.perf_counter(), time.process_time()
            if op == "send":
                client.send(messages, 1)
            else:
                client.receive(count, 1)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            client.close()
            measured[step].append((cpu / count * 1e6, count / wall))
    previous = None
    for step, values in measured.items():
        us = statistics.median(v[0] for v in values)
        delta = "" if previous is None else f"{us - previous:+6.0f}"
        print(f"  {us:>5.0f} us {delta:>6}  {Ablation.STEPS[step]}   (median wall {statistics.median(v[1] for v in values):,.0f} msg/s)")
        previous = us
    print()
    components(database)
    print()
    call_counts(database, op, count)
    print()

    reset(database, "ours")
    ours = Ours(url_of(database))
    messages = make_messages(count) if op == "send" else None
    if op == "receive":
        prefill(database, "ours", count + batch * 2)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    if op == "send":
        ours.send(messages, batch)
    else:
        ours.receive(count, batch)
    profiler.disable()
    wall = time.perf_counter() - started
    ours.close()
    print(f"ours under cProfile: {wall:.2f} s ({count / wall:,.0f} msg/s with profiler overhead)")
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(20)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
