"""archive -> Parquet (partitioned by date, standard headers as columns) and replay back, byte for byte."""

from __future__ import annotations

import pytest

from sqltransport_schema import wire
from sqltransport_schema.pipeline import archive as pipeline_archive
from sqltransport_schema.pipeline.connect import Endpoint, dbapi_connect
from sqltransport_schema.schema import TableName

from .support.pipeline import create_table, fill_queue, queue_contents, queue_spec


def _expires(url, table, order):
    conn = dbapi_connect(url)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT Expires FROM {table} ORDER BY {order}")
        return [r[0] for r in cur.fetchall()]
    finally:
        conn.close()


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_archive_then_replay_round_trips_byte_for_byte(spark, tmp_path, pg_url, sqlite_url, engine):
    url, table = (pg_url, TableName("audit", "public")) if engine == "postgresql" else (sqlite_url, TableName("audit"))
    create_table(url, queue_spec(table.table, table.schema))
    fill_queue(url, table, 3_000, body_size=200, seed=21)
    before = queue_contents(url, table)
    order = "Seq" if engine == "postgresql" else "RowVersion"
    qualified = '"public"."audit"' if engine == "postgresql" else '"audit"'
    expires_before = _expires(url, qualified, order)
    source = Endpoint(url, table)
    path = str(tmp_path / "archive")

    result = pipeline_archive.archive(spark, source, path)
    assert result.rows == 3_000
    assert result.dates == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert sorted(p.name for p in (tmp_path / "archive").iterdir() if p.is_dir()) == [f"date={d}" for d in result.dates]

    df = spark.read.parquet(path)
    row = df.where(df.message_id == before[5][0]).collect()[0]
    assert row.message_type == "Shop.Order5" and row.content_type == "application/json"
    assert str(row.time_sent) == "2026-11-03 10:00:00.000005"
    assert bytes(row.body) == before[5][2] and row.headers == before[5][1]

    conn = dbapi_connect(url)
    conn.cursor().execute(f"DELETE FROM {qualified}")
    conn.commit()
    conn.close()
    replayed = pipeline_archive.replay(spark, path, source, batch_size=1_000)
    assert (replayed.rows, replayed.batches) == (3_000, 3)
    assert queue_contents(url, table) == before  # ids, headers, bodies, order
    after_expires = _expires(url, qualified, order)
    assert after_expires == expires_before

    again = pipeline_archive.replay(spark, path, source, batch_size=1_000)  # same replay: nothing twice
    assert (again.rows, again.skipped_batches) == (0, 3)
    assert len(queue_contents(url, table)) == 3_000


def test_replay_selected_messages_of_the_error_queue(spark, tmp_path, pg_url):
    create_table(pg_url, queue_spec("error", "public"))
    create_table(pg_url, queue_spec("Sales", "public"))
    conn = dbapi_connect(pg_url)
    import uuid

    for i in range(4):
        message_id = str(uuid.uuid4())
        headers = {
            wire.MESSAGE_ID: message_id,
            wire.ENCLOSED_MESSAGE_TYPES: f"Shop.Cmd{i % 2}, Shop, Version=1.0.0.0",
            wire.FAILED_Q: "Sales@[public]",
            wire.EXCEPTION_MESSAGE: f"boom {i}",
            wire.TIME_OF_FAILURE: "2026-11-20 08:00:00:000000 Z",
        }
        conn.execute(
            'INSERT INTO "public"."error" (Id, Headers, Body) VALUES (%s, %s, %s)',
            (message_id, wire.encode_headers(headers), f"body {i}".encode()),
        )
    conn.commit()
    conn.close()
    path = str(tmp_path / "errors")
    pipeline_archive.archive(spark, Endpoint(pg_url, TableName("error", "public")), path)
    df = spark.read.parquet(path)
    assert sorted(r.failure_reason for r in df.collect()) == ["boom 0", "boom 1", "boom 2", "boom 3"]
    assert {r.message_type for r in df.collect()} == {"Shop.Cmd0", "Shop.Cmd1"}
    result = pipeline_archive.replay(spark, path, Endpoint(pg_url, TableName("Sales", "public")), message_types=["Shop.Cmd1"])
    assert result.rows == 2
    assert [bytes(b) for _, _, b in queue_contents(pg_url, TableName("Sales", "public"))] == [b"body 1", b"body 3"]
