"""Pipeline move, PostgreSQL -> PostgreSQL, next to INSERT INTO ... SELECT inside the database.

Both sides move the same N messages (1 KB bodies) between two queue tables built with the
project's DDL, in the same run: the in-database copy is the bound (no network, no Python, no
ledger); the pipeline is the full protocol (Spark tasks, each partition claimed in the source, binary
COPY from the claim into the destination database with a ledger row, the claim dropped). Spark's
fixed start-up is reported separately.

    .venv/bin/python benchmarks/pipeline_move.py --rows 1000000 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from benchmarks._databases import create_database, drop_database  # noqa: E402
from sqltransport_schema import engines  # noqa: E402
from sqltransport_schema.pipeline import move as pipeline_move  # noqa: E402
from sqltransport_schema.pipeline.connect import Endpoint  # noqa: E402
from sqltransport_schema.schema import Kind, TableName, TableSpec  # noqa: E402
from sqltransport_schema.versions import profile  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/{db}"
HEADERS = (
    '{{"NServiceBus.MessageId":"{id}","NServiceBus.EnclosedMessageTypes":"Shop.OrderPlaced",'
    '"NServiceBus.TimeSent":"2026-11-21 10:00:00:000000 Z","NServiceBus.ContentType":"application/json"}}'
)


def create_queue(db: str, table: str) -> None:
    engine = engines.get("postgresql")
    spec = TableSpec(Kind.QUEUE, TableName(table, "public"), seq_type="bigserial")
    with psycopg.connect(PG.format(db=db), autocommit=True) as conn:
        for statement in engine.create_queue(spec, profile("9.1")):
            conn.execute(statement)


def fill(db: str, table: str, rows: int, body_size: int) -> None:
    body = os.urandom(body_size)
    with psycopg.connect(PG.format(db=db)) as conn:
        with conn.cursor().copy(f'COPY "public"."{table}" (id, headers, body) FROM STDIN (FORMAT BINARY)') as copy:
            copy.set_types(["uuid", "text", "bytea"])
            for _ in range(rows):
                message_id = uuid.uuid4()
                copy.write_row((message_id, HEADERS.format(id=message_id), body))
    with psycopg.connect(PG.format(db=db), autocommit=True) as conn:
        conn.execute(f'VACUUM ANALYZE "public"."{table}"')


def in_database(rows: int, body_size: int) -> tuple[float, float]:
    """INSERT INTO dest SELECT ... ORDER BY seq (committed), then DELETE FROM source (committed): one database."""
    db = create_database()
    try:
        create_queue(db, "Source")
        create_queue(db, "Dest")
        fill(db, "Source", rows, body_size)
        with psycopg.connect(PG.format(db=db)) as conn:
            started = time.perf_counter()
            conn.execute(
                'INSERT INTO "public"."Dest" (id, expires, headers, body) '
                'SELECT id, expires, headers, body FROM "public"."Source" ORDER BY seq'
            )
            conn.commit()
            inserted = time.perf_counter() - started
            conn.execute('DELETE FROM "public"."Source"')
            conn.commit()
            return inserted, time.perf_counter() - started
    finally:
        drop_database(db)


def pipeline(rows: int, body_size: int, spark, rows_per_partition: int) -> tuple[float, int]:
    a, b = create_database(), create_database()
    try:
        create_queue(a, "Source")
        create_queue(b, "Dest")
        fill(a, "Source", rows, body_size)
        source = Endpoint(PG.format(db=a), TableName("Source", "public"))
        dest = Endpoint(PG.format(db=b), TableName("Dest", "public"))
        started = time.perf_counter()
        result = pipeline_move.move(source, dest, spark=spark, rows_per_partition=rows_per_partition, progress=False)
        seconds = time.perf_counter() - started
        assert result.rows == rows and result.remaining_in_source == 0, result
        return seconds, result.partitions
    finally:
        drop_database(a)
        drop_database(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=1024, help="body size in bytes")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rows-per-partition", type=int, default=50_000)
    args = parser.parse_args()

    from sqltransport_schema.pipeline.session import get_session

    spark, startup = get_session(args.master)
    started = time.perf_counter()
    spark.sparkContext.parallelize([1, 2], 2).count()  # first action: the Python workers start
    first_action = time.perf_counter() - started
    print(
        f"rows {args.rows:,}, body {args.body} B, master {args.master}; Spark fixed start-up "
        f"{startup:.1f} s session + {first_action:.1f} s first action (not counted below)",
        flush=True,
    )
    insert_only, insert_delete = in_database(args.rows, args.body)
    seconds, partitions = pipeline(args.rows, args.body, spark, args.rows_per_partition)
    w = 52
    print(f"{'method':<{w}}{'seconds':>10}{'rows/s':>12}{'ratio':>8}")
    for label, t in (
        ("INSERT INTO ... SELECT (in-database bound)", insert_only),
        ("INSERT INTO ... SELECT, then DELETE (in-database)", insert_delete),
        (f"pipeline move ({partitions} partitions, claim, ledger)", seconds),
    ):
        print(f"{label:<{w}}{t:>10.2f}{args.rows / t:>12,.0f}{insert_only / t:>8.2f}")
    ratio = insert_only / seconds
    print(f"target: pipeline >= 0.5x the in-database bound -> {'met' if ratio >= 0.5 else 'missed'} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
