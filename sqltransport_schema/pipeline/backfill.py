"""backfill: fill a saga's transitional correlation column from the saga's JSON Data.

SQL persistence saga tables (transport-facts §8, PostgreSQL layout): "Id" uuid, "Metadata" text,
"Data" jsonb, "PersistenceVersion", "SagaTypeVersion", "Concurrency" int, "Correlation_<Prop>".
Rows whose column is NULL are read (Spark's JDBC reader), the property is taken from Data
(get_json_object, no Python per row), and each partition updates its rows through one DBAPI
connection: ``SET col = CAST(value AS <the column's type>) WHERE Id = ? AND Concurrency = ? AND col IS NULL``.
The Concurrency guard skips a saga an endpoint changed meanwhile (a rerun picks it up); the NULL
guard makes reruns harmless. Without Spark the same runs in this process.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import errors
from ..defaults import BACKFILL_BATCH
from ..statements import Statement, run
from .connect import dbapi_connect, engine_of, jdbc, table_name
from .results import JobResult

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pyspark.sql import SparkSession


@dataclass
class BackfillResult(JobResult):
    table: str
    property: str
    column: str
    candidates: int
    updated: int
    missing: int
    unreadable: int
    skipped_concurrent: int
    seconds: float


@dataclass(frozen=True)
class _Job:
    url: str
    update: Statement  # @Value, @Id, @Concurrency
    paramstyle: str
    batch_size: int


def property_value(data_text: str | None, path: list[str]) -> str | None:
    """The property's value as text for CAST (None: absent or null); raises ValueError on unreadable JSON."""
    if data_text is None:
        return None
    value = json.loads(data_text)
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _write(job: _Job, rows: Iterable[tuple]) -> tuple[int, int]:
    """(updated, skipped) for (id, value, concurrency) rows, committed per batch."""
    conn = dbapi_connect(job.url)
    updated = skipped = 0
    try:
        batch = []

        def flush() -> None:
            nonlocal updated, skipped
            cur = conn.cursor()
            for value, id_, concurrency in batch:
                run(cur, job.update, job.paramstyle, {"Value": value, "Id": id_, "Concurrency": concurrency})
                if cur.rowcount:
                    updated += 1
                else:
                    skipped += 1
            conn.commit()
            batch.clear()

        for id_, value, concurrency in rows:
            batch.append((value, id_, concurrency))
            if len(batch) >= job.batch_size:
                flush()
        if batch:
            flush()
    finally:
        conn.close()
    return updated, skipped


def backfill(
    url: str,
    table: str,
    prop: str,
    column: str,
    *,
    spark: SparkSession | None = None,
    batch_size: int = BACKFILL_BATCH,
    overwrite: bool = False,
) -> BackfillResult:
    started = time.perf_counter()
    engine = engine_of(url)
    pipeline = engine.pipeline
    if not pipeline.backfills_sagas:
        raise errors.UsageError(f"backfill supports the PostgreSQL saga layout; {engine.name} is not supported yet")
    name = table_name(table, engine)
    qualified = engine.qualified(name)
    conn = dbapi_connect(url)
    try:
        column_type = pipeline.saga_column_type(conn, name, column)
        conn.rollback()
    finally:
        conn.close()
    if column_type is None:
        raise errors.UsageError(f"{qualified} has no column {column!r}")
    read, update = pipeline.backfill_statements(name, column, column_type, overwrite)
    path = prop.split(".")
    job = _Job(url, update, pipeline.paramstyle, batch_size)
    if spark is None:
        conn = dbapi_connect(url)
        try:
            records = pipeline.execute(conn.cursor(), read).fetchall()
            conn.rollback()
        finally:
            conn.close()
        values, missing, unreadable = [], 0, 0
        for id_, data, concurrency in records:
            try:
                value = property_value(data, path)
            except ValueError:
                unreadable += 1
                continue
            if value is None:
                missing += 1
            else:
                values.append((id_, value, concurrency))
        updated, skipped = _write(job, values)
        candidates = len(records)
    else:
        from pyspark.sql import functions as F

        j = jdbc(url)
        df = spark.read.format("jdbc").option("url", j.url).option("driver", j.driver).option("dbtable", f"({read.sql}) saga").load()
        json_path = "$." + ".".join(path)
        df = df.select(
            "id",
            "concurrency",
            F.get_json_object("data", json_path).alias("value"),
            F.expr("data IS NOT NULL AND get_json_object(data, '$') IS NULL").alias("unreadable"),
        ).cache()
        candidates = df.count()
        unreadable = df.where("unreadable").count()
        missing = df.where("value IS NULL AND NOT unreadable").count()
        todo = df.where("value IS NOT NULL").select("id", "value", "concurrency")
        counts = todo.rdd.mapPartitions(lambda rows: [_write(job, ((r[0], r[1], r[2]) for r in rows))]).collect()
        df.unpersist()
        updated = sum(c[0] for c in counts)
        skipped = sum(c[1] for c in counts)
    return BackfillResult(
        qualified, prop, column, candidates, updated, missing, unreadable, skipped, round(time.perf_counter() - started, 3)
    )
