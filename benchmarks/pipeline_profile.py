"""Where pipeline move's time goes, PostgreSQL -> PostgreSQL: the move run in this process (no Spark,
partitions one after another) with the engine's pipeline steps timed, and what it cost in CPU
(the source's and the destination's server processes, read from /proc; this process), WAL (the
whole server's: other sessions' writes count too) and temporary files (the source database's). The
in-database INSERT INTO ... SELECT of the same rows is measured after it, in CPU too: CPU seconds
compare on a machine others load, where wall times do not.

    .venv/bin/python benchmarks/pipeline_profile.py --rows 200000 --rows-per-partition 50000
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from benchmarks._databases import create_database, drop_database  # noqa: E402
from benchmarks.pipeline_move import PG, create_queue, fill  # noqa: E402
from sqltransport_schema.engines.pipeline import Pipeline as NeutralPipeline  # noqa: E402
from sqltransport_schema.engines.postgresql.pipeline import Pipeline as PostgreSQLPipeline  # noqa: E402
from sqltransport_schema.pipeline import move as pipeline_move  # noqa: E402
from sqltransport_schema.pipeline.connect import Endpoint  # noqa: E402
from sqltransport_schema.schema import TableName  # noqa: E402

STEPS = ("stream_partition", "_pipe", "insert_ledger", "commit", "drop_claim", "mark_deleted", "ledger_row", "column_types")
seconds: dict[str, float] = collections.defaultdict(float)
calls: collections.Counter = collections.Counter()
backends: dict[int, str] = {}  # server process id -> database
cpu_seen: dict[int, float] = {}


def timed(cls: type, name: str) -> None:
    original = cls.__dict__[name]

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - started
            calls[name] += 1

    setattr(cls, name, wrapper)


def process_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watch(stop: threading.Event) -> None:
    """The CPU of each server process the move opened, sampled until it ends."""
    while not stop.wait(0.05):
        for pid in list(backends):
            value = process_cpu(pid)
            if value is not None:
                cpu_seen[pid] = value


def instrument() -> None:
    for name in STEPS:
        for cls in (PostgreSQLPipeline, NeutralPipeline):
            if name in cls.__dict__:
                timed(cls, name)
    connect = pipeline_move.dbapi_connect

    def connecting(url: str, *args, **kwargs):
        conn = connect(url, *args, **kwargs)
        pid, database = conn.execute("SELECT pg_backend_pid(), current_database()").fetchone()
        conn.rollback()
        backends[pid] = database
        return conn

    pipeline_move.dbapi_connect = connecting


def bound_cpu(db: str) -> tuple[float, float]:
    """(seconds, server CPU seconds) of INSERT INTO ... SELECT ... ORDER BY seq in one database."""
    with psycopg.connect(PG.format(db=db)) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        cpu, started = process_cpu(pid), time.perf_counter()
        conn.execute(
            'INSERT INTO "public"."Dest" (id, expires, headers, body) SELECT id, expires, headers, body FROM "public"."Source" ORDER BY seq'
        )
        conn.commit()
        return time.perf_counter() - started, process_cpu(pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--rows-per-partition", type=int, default=50_000)
    args = parser.parse_args()
    instrument()
    a, b = create_database(), create_database()
    try:
        create_queue(a, "Source")
        create_queue(b, "Dest")
        fill(a, "Source", args.rows, args.body)
        with psycopg.connect(PG.format(db=a), autocommit=True) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            temp = conn.execute("SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]
        stop = threading.Event()
        threading.Thread(target=watch, args=(stop,), daemon=True).start()
        own, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        source, dest = Endpoint(PG.format(db=a), TableName("Source", "public")), Endpoint(PG.format(db=b), TableName("Dest", "public"))
        result = pipeline_move.move(source, dest, rows_per_partition=args.rows_per_partition, progress=False)
        wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
        stop.set()
        time.sleep(0.7)  # the statistics collector's delay
        with psycopg.connect(PG.format(db=a), autocommit=True) as conn:
            wal = int(conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", (lsn,)).fetchone()[0])
            temp = conn.execute("SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()").fetchone()[0] - temp
        assert result.rows == args.rows and result.remaining_in_source == 0, result
        by_side = collections.Counter({"source": 0.0, "destination": 0.0})
        for pid, cpu in cpu_seen.items():
            by_side["source" if backends[pid] == a else "destination"] += cpu
        python = after.ru_utime + after.ru_stime - own.ru_utime - own.ru_stime
        print(f"rows {args.rows:,}, body {args.body} B, {result.partitions} partitions, no Spark: {wall:.2f} s")
        print(f"CPU s: source server {by_side['source']:.2f}, destination server {by_side['destination']:.2f}, this process {python:.2f}")
        print(f"WAL (whole server) {wal / 1e6:,.0f} MB, temporary files (source database) {temp / 1e6:,.0f} MB")
        for name, total in sorted(seconds.items(), key=lambda item: -item[1]):
            print(f"  {name:<18}{total:8.2f} s  x{calls[name]}")
        create_queue(a, "Dest")
        fill(a, "Source", args.rows, args.body)
        bound, cpu = bound_cpu(a)
        print(f"in-database INSERT INTO ... SELECT: {bound:.2f} s, server CPU {cpu:.2f} s")
    finally:
        drop_database(a)
        drop_database(b)


if __name__ == "__main__":
    main()
