"""archive: queue rows (audit and error above all) to Parquet partitioned by date, the standard
headers as columns; replay: archived messages back into a queue, byte for byte.

Archive reads through Spark's JDBC reader (drivers from /usr/share/java), partitioned on the
queue's order column, and turns the Headers JSON into columns with Spark SQL (from_json as a
map): no Python per row. The raw Headers text and Body bytes are kept, so a replay writes back
exactly what was archived. Replay writes in archived order, in batches, each batch with a ledger
row in the destination's transaction: a rerun after a crash skips what committed. Without Spark
(--no-spark) both run in this process: the same columns made in Python, Parquet read and written
with pyarrow, so either reads what the other wrote.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO

from .. import errors, wire
from ..defaults import ARCHIVE_PARTITIONS
from ..engines.pipeline import LedgerRow
from .connect import Endpoint, dbapi_connect, jdbc
from .layouts import QueueRow, to_utc_naive, write_queue_row
from .results import JobResult

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pyspark.sql import DataFrame, SparkSession

# header -> column (strings); timestamps are parsed from the transport's wire format
HEADER_COLUMNS = {
    "message_id": wire.MESSAGE_ID,
    "enclosed_message_types": wire.ENCLOSED_MESSAGE_TYPES,
    "message_intent": wire.MESSAGE_INTENT,
    "correlation_id": wire.CORRELATION_ID,
    "conversation_id": wire.CONVERSATION_ID,
    "related_to": wire.RELATED_TO,
    "reply_to_address": wire.REPLY_TO_ADDRESS,
    "content_type": wire.CONTENT_TYPE,
    "originating_endpoint": wire.ORIGINATING_ENDPOINT,
    "originating_machine": wire.ORIGINATING_MACHINE,
    "processing_endpoint": wire.PROCESSING_ENDPOINT,
    "processing_machine": wire.PROCESSING_MACHINE,
    "failed_queue": wire.FAILED_Q,
    "exception_type": wire.EXCEPTION_TYPE,
    "failure_reason": wire.EXCEPTION_MESSAGE,
    "nservicebus_version": wire.NSERVICEBUS_VERSION,
}
TIME_HEADERS = {
    "time_sent": wire.TIME_SENT,
    "time_of_failure": wire.TIME_OF_FAILURE,
    "processing_started": wire.PROCESSING_STARTED,
    "processing_ended": wire.PROCESSING_ENDED,
}
REPLAY_BATCH = 5_000


def _time_expr(column: str) -> str:
    """'yyyy-MM-dd HH:mm:ss:ffffff Z' (the transport's format) -> timestamp, NULL when unreadable."""
    return (
        f"try_to_timestamp(regexp_replace({column}, "
        "'^(\\\\d{4}-\\\\d{2}-\\\\d{2} \\\\d{2}:\\\\d{2}:\\\\d{2}):(\\\\d+) Z$', '$1.$2'), "
        "'yyyy-MM-dd HH:mm:ss.SSSSSS')"
    )


def select_sql(source: Endpoint) -> str:
    """The read, one column list for every layout (Id as text, the order column as `seq`)."""
    return source.dialect.pipeline.archive_read(source.target).sql


@dataclass
class ArchiveResult(JobResult):
    source: str
    path: str
    rows: int
    dates: list
    seconds: float


def archive_frame(spark: SparkSession, source: Endpoint, partitions: int = ARCHIVE_PARTITIONS) -> DataFrame:
    """The archive rows of a queue as a DataFrame (nothing written)."""
    from pyspark.sql import functions as F

    j = jdbc(source.url)
    s = source.dialect.pipeline
    conn = dbapi_connect(source.url)
    try:
        low, high, _count = s.bounds(conn, source.target)
        s.rollback(conn)
    finally:
        conn.close()
    reader = (
        spark.read.format("jdbc")
        .option("url", j.url)
        .option("driver", j.driver)
        .option("dbtable", f"({select_sql(source)}) archived")
        .option("fetchsize", "5000")
    )
    if s.text_times:  # SQLite's driver types a computed column by its first value: name the types
        reader = reader.option("customSchema", "id STRING, expires STRING, headers STRING, body BINARY, seq LONG")
    if low is not None and high > low and partitions > 1:
        reader = (
            reader.option("partitionColumn", "seq")
            .option("lowerBound", str(low))
            .option("upperBound", str(high + 1))
            .option("numPartitions", str(partitions))
        )
    df = reader.load()
    if dict(df.dtypes).get("expires") == "string":  # SQLite keeps times as text
        df = df.withColumn("expires", F.expr("try_to_timestamp(expires)"))
    df = df.withColumn("seq", F.col("seq").cast("long"))
    h = F.from_json(F.col("headers"), "map<string,string>")
    df = df.withColumn("_h", h)
    for column, header in HEADER_COLUMNS.items():
        df = df.withColumn(column, F.col("_h").getItem(header))
    for column, header in TIME_HEADERS.items():
        df = df.withColumn(column, F.expr(_time_expr(f"_h['{header}']")))
    df = (
        df.withColumn("message_type", F.expr("trim(split(split(enclosed_message_types, ';')[0], ',')[0])"))
        .withColumn("headers_readable", F.col("_h").isNotNull())
        .withColumn("source_table", F.lit(source.describe().split(" ", 1)[1]))
        .withColumn("archived_at", F.current_timestamp())
        .withColumn("date", F.coalesce(F.to_date("time_sent"), F.to_date("time_of_failure"), F.current_date()))
        .drop("_h")
    )
    return df


def archive(
    spark: SparkSession | None, source: Endpoint, path: str, *, mode: str = "errorifexists", partitions: int = ARCHIVE_PARTITIONS
) -> ArchiveResult:
    """Write the queue's rows to Parquet at `path`, partitioned by date (of TimeSent, else TimeOfFailure).
    spark None: in this process, read through the driver and written with pyarrow, the same columns."""
    started = time.perf_counter()
    if spark is None:
        rows, dates = _archive_in_process(source, path, mode)
        return ArchiveResult(source.describe(), path, rows, dates, round(time.perf_counter() - started, 3))
    df = archive_frame(spark, source, partitions).cache()
    rows = df.count()
    dates = sorted(str(r[0]) for r in df.select("date").distinct().collect())
    df.write.mode(mode).partitionBy("date").parquet(path)
    df.unpersist()
    return ArchiveResult(source.describe(), path, rows, dates, round(time.perf_counter() - started, 3))


# --------------------------------------------------------------------------- without Spark
def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.dataset
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise errors.Unavailable("archive and replay without Spark read and write Parquet with pyarrow: pip install -e '.[spark]'") from exc
    return pyarrow


def _time_header(value: str | None) -> datetime | None:
    """A header in the transport's time format as UTC, None when unreadable (as _time_expr)."""
    try:
        return wire.parse_time_sent(value) if value is not None else None
    except (ValueError, TypeError):
        return None


def _header_map(text: str | None) -> dict | None:
    """The headers as a map of strings, None when they are not a JSON object (as from_json as a map)."""
    try:
        parsed = json.loads(text) if text is not None else None
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    return {k: v if isinstance(v, str) or v is None else json.dumps(v) for k, v in parsed.items()}


def archive_record(row: tuple, source_table: str, archived_at: datetime) -> dict:
    """One archive row from (id, expires, headers, body, seq): archive_frame's columns, in Python."""
    id_, expires, headers, body, seq = row
    found = _header_map(headers)
    record: dict[str, Any] = {
        "id": str(id_),
        "expires": None if expires is None else to_utc_naive(expires).replace(tzinfo=timezone.utc),
        "headers": headers,
        "body": None if body is None else bytes(body),
        "seq": int(seq),
    }
    for column, header in HEADER_COLUMNS.items():
        record[column] = found.get(header) if found is not None else None
    for column, header in TIME_HEADERS.items():
        record[column] = _time_header(found.get(header)) if found is not None else None
    enclosed = record["enclosed_message_types"]
    record["message_type"] = enclosed.split(";")[0].split(",")[0].strip() if enclosed is not None else None
    record["headers_readable"] = found is not None
    record["source_table"] = source_table
    record["archived_at"] = archived_at
    when = record["time_sent"] or record["time_of_failure"] or archived_at
    record["date"] = when.date().isoformat()
    return record


def _archive_schema(pa: Any) -> Any:
    """The archive's columns with the types Spark gives them (timestamps as UTC instants)."""
    instant = pa.timestamp("us", tz="UTC")
    fields = [("id", pa.string()), ("expires", instant), ("headers", pa.string()), ("body", pa.binary()), ("seq", pa.int64())]
    fields += [(column, pa.string()) for column in HEADER_COLUMNS]
    fields += [(column, instant) for column in TIME_HEADERS]
    fields += [("message_type", pa.string()), ("headers_readable", pa.bool_()), ("source_table", pa.string())]
    fields += [("archived_at", instant), ("date", pa.string())]
    return pa.schema(fields)


def _archive_in_process(source: Endpoint, path: str, mode: str) -> tuple[int, list[str]]:
    """archive without Spark: the rows through the driver, Parquet partitioned by date with pyarrow."""
    import shutil
    import uuid
    from pathlib import Path

    pa = _pyarrow()
    pipeline = source.dialect.pipeline
    conn = dbapi_connect(source.url)
    try:
        rows = pipeline.execute(conn.cursor(), pipeline.archive_read(source.target)).fetchall()
        pipeline.rollback(conn)
    finally:
        conn.close()
    archived_at = datetime.now(timezone.utc)
    table_name = source.describe().split(" ", 1)[1]
    records = [archive_record(row, table_name, archived_at) for row in rows]
    folder = Path(path)
    if folder.exists() and any(folder.iterdir()):
        if mode == "errorifexists":
            raise errors.Refused(f"{path} holds an archive already: pass --mode append to add to it, or --mode overwrite to replace it")
        if mode == "overwrite":
            shutil.rmtree(folder)
    table = pa.Table.from_pylist(records, schema=_archive_schema(pa))
    pa.dataset.write_dataset(
        table,
        str(folder),
        format="parquet",
        partitioning=pa.dataset.partitioning(pa.schema([("date", pa.string())]), flavor="hive"),
        basename_template=f"part-{uuid.uuid4().hex}-{{i}}.parquet",
        existing_data_behavior="overwrite_or_ignore",
    )
    return len(records), sorted({r["date"] for r in records})


def _archived_in_process(path: str, filters: dict[str, Any]) -> list[Any]:
    """select_archived without Spark, filters its keywords: the selected rows, in archived order."""
    from types import SimpleNamespace

    if filters.get("where"):
        raise errors.UsageError("--where is a Spark SQL condition: replay with Spark (without --no-spark) to use it")
    pa = _pyarrow()
    dataset = pa.dataset.dataset(path, format="parquet", partitioning="hive")
    columns = ["id", "expires", "headers", "body", "seq", "message_id", "message_type", "source_table", "date"]
    ids, types = set(filters.get("message_ids") or ()), set(filters.get("message_types") or ())
    since, until = filters.get("since"), filters.get("until")
    out = []
    for row in dataset.to_table(columns=columns).to_pylist():
        date = str(row["date"])
        if (ids and row["message_id"] not in ids and row["id"] not in ids) or (types and row["message_type"] not in types):
            continue
        if (since and date < since) or (until and date > until):
            continue
        out.append(SimpleNamespace(**row, date_text=date))
    out.sort(key=lambda r: (r.source_table or "", r.seq, r.date_text))
    return out


# --------------------------------------------------------------------------- replay
@dataclass
class ReplayResult(JobResult):
    replay_id: str
    destination: str
    rows: int
    batches: int
    skipped_batches: int
    seconds: float


def select_archived(
    spark: SparkSession,
    path: str,
    *,
    message_ids: Iterable[str] | None = None,
    message_types: Iterable[str] | None = None,
    since: str | None = None,
    until: str | None = None,
    where: str | None = None,
) -> DataFrame:
    from pyspark.sql import functions as F

    df = spark.read.parquet(path)
    if message_ids:
        df = df.where(F.col("message_id").isin(list(message_ids)) | F.col("id").isin(list(message_ids)))
    if message_types:
        df = df.where(F.col("message_type").isin(list(message_types)))
    if since:
        df = df.where(F.col("date") >= F.lit(since).cast("date"))
    if until:
        df = df.where(F.col("date") <= F.lit(until).cast("date"))
    if where:
        df = df.where(F.expr(where))
    return df.orderBy("source_table", "seq", "date")


def replay(
    spark: SparkSession | None,
    path: str,
    destination: Endpoint,
    *,
    replay_id: str | None = None,
    batch_size: int = REPLAY_BATCH,
    progress: TextIO | bool | None = False,
    **filters,
) -> ReplayResult:
    """Send the selected archived messages into `destination`, in archived order, exactly once per replay
    id. spark None: the archive read and filtered in this process (pyarrow; no --where)."""
    started = time.perf_counter()
    if spark is None:
        records: Iterable[Any] = _archived_in_process(path, filters)
    else:
        records = select_archived(spark, path, **filters).select("id", "expires", "headers", "body", "seq").toLocalIterator()
    if replay_id is None:
        key = repr((path, sorted((k, repr(v)) for k, v in filters.items()), destination.describe()))
        replay_id = "replay-" + hashlib.sha1(key.encode()).hexdigest()[:24]
    dst_sql = destination.dialect.pipeline
    lay = destination.layout
    columns = lay.columns[:-1]  # the destination assigns its own order, in replay order
    conn = dbapi_connect(destination.url)
    rows = batches = skipped = 0
    try:
        dst_sql.ensure_ledger(conn)
        batch: list = []

        def flush(part: int) -> None:
            nonlocal rows, skipped
            dst_sql.begin(conn, write=True)
            if dst_sql.ledger_row(conn, replay_id, part) is not None:
                dst_sql.rollback(conn)
                skipped += 1
                return
            out = [
                write_queue_row(
                    lay,
                    QueueRow(r.id, None, None, to_utc_naive(r.expires), r.headers, None if r.body is None else bytes(r.body), 0),
                    None,
                    dst_sql.text_times,
                )[:-1]
                for r in batch
            ]
            dst_sql.write_rows(conn, destination.target, columns, out)
            dst_sql.insert_ledger(conn, LedgerRow(replay_id, part, None, None, len(out), "replay", b""))
            dst_sql.commit(conn)
            rows += len(out)
            if progress is not False:
                stream = progress or sys.stderr
                stream.write(f"[replay] batch {part + 1}: {rows:,} message(s) written\n")
                stream.flush()

        for record in records:
            batch.append(record)
            if len(batch) >= batch_size:
                flush(batches)
                batches += 1
                batch = []
        if batch:
            flush(batches)
            batches += 1
    finally:
        conn.close()
    return ReplayResult(replay_id, destination.describe(), rows, batches, skipped, round(time.perf_counter() - started, 3))
