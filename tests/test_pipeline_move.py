"""pipeline move with a real local Spark session: 100,000 messages between PostgreSQL and SQLite,
count, content checksum (Id, Headers, Body) and FIFO equal on both sides; layout conversion
(SQL Server-shaped tables hosted on PostgreSQL); address rewriting; delayed tables; reruns."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from sqltransport_schema import wire
from sqltransport_schema.pipeline import move as pipeline_move
from sqltransport_schema.pipeline.connect import Endpoint, dbapi_connect
from sqltransport_schema.pipeline.layouts import partition_ranges
from sqltransport_schema.schema import Kind, TableName, TableSpec

from .support.pipeline import checksum, create_table, fill_queue, queue_contents, queue_spec

N = 100_000


def _move_and_compare(spark, src_url, src_table, dst_url, dst_table, count, **options):
    create_table(src_url, queue_spec(src_table.table, src_table.schema))
    create_table(dst_url, queue_spec(dst_table.table, dst_table.schema))
    fill_queue(src_url, src_table, count)
    before = queue_contents(src_url, src_table)
    source = Endpoint(src_url, src_table)
    dest = Endpoint(dst_url, dst_table)
    result = pipeline_move.move(source, dest, spark=spark, progress=False, **options)
    after = queue_contents(dst_url, dst_table)
    assert result.rows == count
    assert result.remaining_in_source == 0
    assert queue_contents(src_url, src_table) == []
    assert checksum(after) == checksum(before)  # count and content
    assert [row[0] for row in after] == [row[0] for row in before]  # FIFO
    return result


@pytest.mark.slow
def test_move_100k_postgresql_to_postgresql(spark, pg_url, pg_url2):
    result = _move_and_compare(
        spark, pg_url, TableName("Sales", "public"), pg_url2, TableName("Billing", "public"), N, rows_per_partition=12_500
    )
    assert result.partitions == 8


@pytest.mark.slow
def test_move_100k_postgresql_to_sqlite(spark, pg_url, sqlite_url):
    _move_and_compare(spark, pg_url, TableName("Sales", "public"), sqlite_url, TableName("Sales"), N)


@pytest.mark.slow
def test_move_100k_sqlite_to_postgresql(spark, sqlite_url, pg_url):
    _move_and_compare(spark, sqlite_url, TableName("Sales"), pg_url, TableName("Sales", "public"), N)


def test_move_within_one_database_is_one_transaction_per_partition(spark, pg_url):
    result = _move_and_compare(
        spark, pg_url, TableName("Old", "public"), pg_url, TableName("New", "public"), 3_000, rows_per_partition=1_000
    )
    assert result.partitions == 3


def test_destination_keeps_existing_messages_first_and_later_sends_after(spark, pg_url, sqlite_url):
    """The reserved range sits after what the destination holds; senders afterwards land after it."""
    create_table(pg_url, queue_spec("Sales", "public"))
    create_table(sqlite_url, queue_spec("Sales"))
    fill_queue(pg_url, TableName("Sales", "public"), 500, seed=2)
    fill_queue(sqlite_url, TableName("Sales"), 10, seed=3)
    existing = queue_contents(sqlite_url, TableName("Sales"))
    moved = queue_contents(pg_url, TableName("Sales", "public"))
    pipeline_move.move(
        Endpoint(pg_url, TableName("Sales", "public")),
        Endpoint(sqlite_url, TableName("Sales")),
        spark=spark,
        progress=False,
        rows_per_partition=100,
    )
    fill_queue(sqlite_url, TableName("Sales"), 5, seed=4)
    later = queue_contents(sqlite_url, TableName("Sales"))
    assert later[:10] == existing
    assert later[10:510] == moved
    assert len(later) == 515


def test_rerun_of_a_finished_move_moves_only_new_messages(spark, pg_url, pg_url2):
    create_table(pg_url, queue_spec("Sales", "public"))
    create_table(pg_url2, queue_spec("Sales", "public"))
    fill_queue(pg_url, TableName("Sales", "public"), 200, seed=5)
    source, dest = Endpoint(pg_url, TableName("Sales", "public")), Endpoint(pg_url2, TableName("Sales", "public"))
    first = pipeline_move.move(source, dest, spark=spark, progress=False)
    second = pipeline_move.move(source, dest, spark=spark, progress=False)
    assert (first.rows, second.rows) == (200, 0)
    fill_queue(pg_url, TableName("Sales", "public"), 50, seed=6)
    third = pipeline_move.move(source, dest, spark=spark, progress=False)
    assert third.rows == 50 and third.move_id != first.move_id
    assert len(queue_contents(pg_url2, TableName("Sales", "public"))) == 250


# --------------------------------------------------------------------------- layouts
MSSQL_SHAPED = (
    "CREATE TABLE {table} (Id uuid NOT NULL, CorrelationId varchar(255), ReplyToAddress varchar(255), "
    "Recoverable integer NOT NULL, Expires timestamp, Headers text NOT NULL, Body bytea, RowVersion bigserial NOT NULL)"
)


def test_sql_server_layout_to_postgresql_layout_and_back(spark, pg_url, sqlite_url):
    """No SQL Server here: a SQL Server-shaped queue hosted on PostgreSQL, moved into the PostgreSQL
    layout and back into the SQL Server layout (on SQLite, whose tables have the SQL Server columns)."""
    conn = dbapi_connect(pg_url)
    conn.execute(MSSQL_SHAPED.format(table='"public"."Legacy"'))
    rows = []
    for i in range(300):
        message_id = uuid.uuid4()
        legacy = i % 3 == 0  # a v1/v2 sender: correlation id and reply-to address only in the columns
        headers = (
            f'{{"NServiceBus.MessageId":"{message_id}"}}'
            if legacy
            else f'{{"NServiceBus.MessageId":"{message_id}","NServiceBus.CorrelationId":"corr-{i}"}}'
        )
        rows.append(
            (
                message_id,
                f"corr-{i}" if legacy else None,
                "Sales@[dbo]" if legacy else None,
                1,
                datetime(2031, 1, 1) + timedelta(minutes=i) if i % 2 else None,
                headers,
                bytes([i % 256]) * 10,
            )
        )
    with conn.cursor().copy(
        'COPY "public"."Legacy" (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) FROM STDIN'
    ) as copy:
        for row in rows:
            copy.write_row(row)
    conn.commit()
    conn.close()
    create_table(pg_url, queue_spec("Modern", "public"))
    legacy = Endpoint(pg_url, TableName("Legacy", "public"), layout_name="mssql")
    modern = Endpoint(pg_url, TableName("Modern", "public"))
    before = queue_contents(pg_url, TableName("Legacy", "public"), layout="mssql")
    pipeline_move.move(legacy, modern, spark=spark, progress=False, rows_per_partition=100)
    moved = queue_contents(pg_url, TableName("Modern", "public"))
    assert [(i, b) for i, _, b in moved] == [(i, b) for i, _, b in before]
    for n, ((_, h_before, _), (_, h_after, _)) in enumerate(zip(before, moved)):
        if n % 3:
            assert h_after == h_before  # headers already complete: byte for byte
        else:  # the legacy columns became the headers later receivers read
            assert wire.decode_headers(h_after) == {
                **wire.decode_headers(h_before),
                wire.CORRELATION_ID: f"corr-{n}",
                wire.REPLY_TO_ADDRESS: "Sales@[dbo]",
            }
    before = moved
    conn = dbapi_connect(pg_url)
    expires = [r[0] for r in conn.execute('SELECT Expires FROM "public"."Modern" ORDER BY Seq').fetchall()]
    conn.close()
    assert expires == [r[4] for r in rows]

    create_table(sqlite_url, queue_spec("Sales"))
    pipeline_move.move(modern, Endpoint(sqlite_url, TableName("Sales")), spark=spark, progress=False)
    from .support.pipeline import sqlite_rows

    back = sqlite_rows(sqlite_url, 'SELECT Recoverable, CorrelationId, ReplyToAddress, Expires FROM "Sales" ORDER BY RowVersion')
    assert {r[0] for r in back} == {1}
    assert back[1][3] == "2031-01-01 00:01:00.000" and back[0][3] is None
    assert queue_contents(sqlite_url, TableName("Sales")) == before


def test_rewrites_reply_to_and_forward_destination(spark, pg_url, sqlite_url):
    create_table(sqlite_url, queue_spec("Sales"))
    create_table(pg_url, queue_spec("Sales", "public"))
    conn = dbapi_connect(sqlite_url)
    headers = [
        {wire.MESSAGE_ID: "1", wire.REPLY_TO_ADDRESS: "Billing@[dbo]@[nsb]", "Other": "Billing@[dbo]@[nsb]"},
        {wire.MESSAGE_ID: "2", wire.FORWARD_DESTINATION: "Billing@[dbo]@[nsb]", wire.REPLY_TO_ADDRESS: "Shipping@[dbo]"},
        {wire.MESSAGE_ID: "3", wire.REPLY_TO_ADDRESS: "Billing@[other]@[nsb]"},
    ]
    conn.execute("BEGIN")
    for h in headers:
        conn.execute(
            'INSERT INTO "Sales" (Id, Recoverable, Headers, Body) VALUES (?, 1, ?, NULL)', (str(uuid.uuid4()), wire.encode_headers(h))
        )
    conn.execute("COMMIT")
    conn.close()
    rewrites = pipeline_move.parse_rewrites(["Billing@[dbo]@[nsb]=Billing@[public]"])
    pipeline_move.move(
        Endpoint(sqlite_url, TableName("Sales")),
        Endpoint(pg_url, TableName("Sales", "public")),
        spark=spark,
        progress=False,
        rewrites=rewrites,
    )
    out = [wire.decode_headers(h) for _, h, _ in queue_contents(pg_url, TableName("Sales", "public"))]
    assert out[0][wire.REPLY_TO_ADDRESS] == "Billing@[public]" and out[0]["Other"] == "Billing@[dbo]@[nsb]"
    assert out[1][wire.FORWARD_DESTINATION] == "Billing@[public]" and out[1][wire.REPLY_TO_ADDRESS] == "Shipping@[dbo]"
    assert out[2][wire.REPLY_TO_ADDRESS] == "Billing@[other]@[nsb]"


def test_subscription_rows_are_copied_with_addresses_rewritten(pg_url, sqlite_url):
    create_table(sqlite_url, TableSpec(Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting")))
    create_table(pg_url, TableSpec(Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting", "public")))
    conn = dbapi_connect(sqlite_url)
    conn.executemany(
        'INSERT INTO "SubscriptionRouting" VALUES (?, ?, ?)',
        [("Billing@[dbo]@[nsb]", "Billing", "Shop.OrderPlaced"), ("Shipping@[dbo]", "Shipping", "Shop.OrderPlaced")],
    )
    conn.close()
    source = Endpoint(sqlite_url, TableName("SubscriptionRouting"), Kind.SUBSCRIPTIONS)
    dest = Endpoint(pg_url, TableName("SubscriptionRouting", "public"), Kind.SUBSCRIPTIONS)
    rewrites = pipeline_move.parse_rewrites(["Billing@[dbo]@[nsb]=Billing@[public]"])
    for _ in range(2):  # a rerun changes nothing
        assert pipeline_move.move_subscriptions(source, dest, rewrites) == 2
    conn = dbapi_connect(pg_url)
    rows = sorted(conn.execute('SELECT QueueAddress, Endpoint, Topic FROM "public"."SubscriptionRouting"').fetchall())
    conn.close()
    assert rows == [("Billing@[public]", "Billing", "Shop.OrderPlaced"), ("Shipping@[dbo]", "Shipping", "Shop.OrderPlaced")]


def test_delayed_messages_move_with_their_due_times(spark, sqlite_url, pg_url):
    create_table(sqlite_url, TableSpec(Kind.DELAYED, TableName("Sales.Delayed")))
    create_table(pg_url, TableSpec(Kind.DELAYED, TableName("Sales.Delayed", "public")))
    conn = dbapi_connect(sqlite_url)
    conn.execute("BEGIN")
    due = [datetime(2030, 5, 1, 12, 0, 0) + timedelta(seconds=7 * i) for i in range(120)]
    conn.executemany(
        'INSERT INTO "Sales.Delayed" (Headers, Body, Due) VALUES (?, ?, ?)',
        [
            (
                f'{{"NServiceBus.MessageId":"{i}","NServiceBus.SqlServer.ForwardDestination":"Billing@[dbo]"}}',
                bytes([i]),
                d.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
            )
            for i, d in enumerate(due)
        ],
    )
    conn.execute("COMMIT")
    conn.close()
    source = Endpoint(sqlite_url, TableName("Sales.Delayed"), Kind.DELAYED)
    dest = Endpoint(pg_url, TableName("Sales.Delayed", "public"), Kind.DELAYED)
    rewrites = pipeline_move.parse_rewrites(["Billing@[dbo]=Billing@[public]"])
    result = pipeline_move.move(source, dest, spark=spark, progress=False, rewrites=rewrites, rows_per_partition=50)
    assert result.rows == 120 and result.remaining_in_source == 0
    conn = dbapi_connect(pg_url)
    conn.execute("SET TIME ZONE 'UTC'")
    rows = conn.execute('SELECT Due, Headers, Body FROM "public"."Sales.Delayed" ORDER BY Due').fetchall()
    conn.close()
    assert [r[0].replace(tzinfo=None) for r in rows] == due
    assert [bytes(r[2]) for r in rows] == [bytes([i]) for i in range(120)]
    assert all('"NServiceBus.SqlServer.ForwardDestination":"Billing@[public]"' in r[1] for r in rows)


def test_partition_ranges_cover_every_value_once():
    for low, high, count in [(1, 100, 7), (5, 5, 3), (1, 3, 10), (10, 1_000_000, 40)]:
        ranges = partition_ranges(low, high, count)
        assert ranges[0][0] == low and ranges[-1][1] == high + 1
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert partition_ranges(5, 4, 3) == []


def test_keys_round_trip():
    keys = [1, 2, 2**40]
    assert pipeline_move.unpack_keys(pipeline_move.pack_keys(keys)) == keys
    ids = [str(uuid.uuid4()) for _ in range(3)]
    assert pipeline_move.unpack_keys(pipeline_move.pack_keys(ids)) == ids


@pytest.mark.slow
def test_the_job_runs_under_spark_submit(spark, tmp_path, sqlite_url):
    """`spark-submit .../pipeline/job.py move ...`: the session spark-submit made is used."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from sqltransport_schema.pipeline import job

    submit = Path(sys.executable).parent / "spark-submit"
    if not submit.exists():
        pytest.skip("spark-submit is not installed next to this Python")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    create_table(sqlite_url, queue_spec("Sales"))
    create_table(other, queue_spec("Sales"))
    fill_queue(sqlite_url, TableName("Sales"), 1_000, seed=41)
    before = queue_contents(sqlite_url, TableName("Sales"))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [
            str(submit),
            "--master",
            "local[2]",
            job.__file__,
            "move",
            "--from-url",
            sqlite_url,
            "--from-table",
            "Sales",
            "--to-url",
            other,
            "--rows-per-partition",
            "300",
            "--format",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"partitions": 4' in done.stdout and '"master"' not in done.stdout
    assert queue_contents(other, TableName("Sales")) == before


@pytest.mark.parametrize("source_engine", ["postgresql", "sqlite"])
def test_names_with_question_marks_percent_signs_and_braces(pg_url, pg_url2, sqlite_url, source_engine):
    """Names reach SQL only quoted; `?`, `%` and `{}` in them are never taken for placeholders (in-process runner)."""
    odd = 'Odd?%{x}"q'
    if source_engine == "postgresql":
        src_url, src = pg_url, TableName(odd, "public")
    else:
        src_url, src = sqlite_url, TableName(odd)
    for url, name in ((src_url, src), (pg_url2, TableName(odd, "public")), (pg_url, TableName(odd + "2", "public"))):
        create_table(url, queue_spec(name.table, name.schema))
    fill_queue(src_url, src, 300, seed=51)
    before = queue_contents(src_url, src)
    pipeline_move.move(Endpoint(src_url, src), Endpoint(pg_url2, TableName(odd, "public")), progress=False, rows_per_partition=100)
    assert queue_contents(pg_url2, TableName(odd, "public")) == before
    pipeline_move.move(
        Endpoint(pg_url2, TableName(odd, "public")),
        Endpoint(pg_url, TableName(odd + "2", "public")),
        progress=False,
        rows_per_partition=100,
        rewrites=pipeline_move.parse_rewrites(["A=B"]),
    )
    assert queue_contents(pg_url, TableName(odd + "2", "public")) == before


def test_delayed_messages_move_from_postgresql_to_the_sql_server_layout(pg_url, sqlite_url):
    create_table(pg_url, TableSpec(Kind.DELAYED, TableName("Sales.Delayed", "public")))
    create_table(sqlite_url, TableSpec(Kind.DELAYED, TableName("Sales.Delayed")))
    conn = dbapi_connect(pg_url)
    conn.execute("SET TIME ZONE 'UTC'")
    due = [datetime(2030, 5, 1, 12, 0, 0) + timedelta(seconds=i) for i in range(40)]
    for i, d in enumerate(due):
        conn.execute(
            'INSERT INTO "public"."Sales.Delayed" (Headers, Body, Due) VALUES (%s, %s, %s)',
            (f'{{"NServiceBus.MessageId":"{i}"}}', bytes([i]), d.replace(tzinfo=timezone.utc)),
        )
    conn.commit()
    conn.close()
    source = Endpoint(pg_url, TableName("Sales.Delayed", "public"), Kind.DELAYED)
    dest = Endpoint(sqlite_url, TableName("Sales.Delayed"), Kind.DELAYED)
    for _ in range(2):  # the rerun finds nothing left
        pipeline_move.move(source, dest, progress=False)
    from .support.pipeline import sqlite_rows

    rows = sqlite_rows(sqlite_url, 'SELECT Due, Headers, Body FROM "Sales.Delayed" ORDER BY Due')
    assert [r[0] for r in rows] == [d.strftime("%Y-%m-%d %H:%M:%S.000") for d in due]
    assert [r[2] for r in rows] == [bytes([i]) for i in range(40)]
    conn = dbapi_connect(pg_url)
    assert conn.execute('SELECT count(*) FROM "public"."Sales.Delayed"').fetchone()[0] == 0
    conn.close()
