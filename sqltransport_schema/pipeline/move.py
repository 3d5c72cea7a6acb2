"""move: messages from one queue table to another (same or another database, engine or layout),
exactly once across crashes. The protocol (docs/pipeline.md):

1. The driver snapshots the source (min/max order value, count) and, in one destination transaction,
   reserves a range of destination order values (Seq / RowVersion) as wide as the source's and
   records the move in ``sqltransport_pipeline_moves``. A rerun finds the unfinished move and resumes it.
2. The source order range is cut into partitions [lo, hi). Each partition is one task, three
   transactions: the claim (source: the partition's rows deleted from the queue into its claim table,
   passing over rows a receiver holds; from its commit no receiver sees them again); the copy
   (destination: the claim's rows written with order = base + (source order - source low), together
   with a ledger row: move id, partition, count, checksum, the source keys); the release (source: the
   claim dropped), then the ledger row marked source_deleted. Inside one database: one transaction.
3. A partition with a ledger row is never written again; if its claim is still there, the rerun
   compares its keys with the ledger's, drops it and reports both counts. A claim without a ledger row
   is copied by the rerun. So a message is, at every commit, in exactly one of: the source queue, a
   claim, the destination (or a receiver took it), whatever step the job is killed at.

Because every partition lands in its own reserved slot of the destination order, partitions may
commit in any order and the destination still reads in source order. Where the destination cannot
take explicit order values (SQL Server IDENTITY, delayed tables), partitions run one after another.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO, TypedDict

from .. import errors, wire
from ..defaults import DEFAULT_ROWS_PER_PARTITION
from ..engines.pipeline import ClaimBusy, LedgerRow, MoveRow, Route, Table
from ..schema import Kind
from .connect import Endpoint, dbapi_connect, same_database
from .layouts import (
    Checksum,
    partition_ranges,
    read_delayed_row,
    read_queue_row,
    write_delayed_row,
    write_queue_row,
)
from .results import JobResult

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pyspark.sql import SparkSession
    from typing_extensions import Unpack  # typing's own from Python 3.12; SQLAlchemy depends on typing_extensions

    from ..engines.pipeline import Pipeline

FAILPOINT_ENV = "SQLTRANSPORT_PIPELINE_FAILPOINT"  # "<point>:<partition>", e.g. "after-dest-commit:2"
FAILPOINT_FILE_ENV = "SQLTRANSPORT_PIPELINE_FAILPOINT_FILE"
# Every step of a move, in order (docs/pipeline.md): the crash tests kill the job at each.
FAILPOINTS = (
    "after-reserve",
    "before-claim-commit",
    "after-claim",
    "before-dest-commit",
    "after-dest-commit",
    "before-release-commit",
    "after-release",
    "before-finish",
)
CLAIM_PREFIX = "sqltransport_claim_"
CLAIMS_STATE = "claiming"  # a move's state while it runs under the claims protocol (older moves: 'running')


class MoveError(errors.Failed):
    """A move that cannot run as asked, or stopped with its ledger incomplete."""


# --------------------------------------------------------------------------- address rewriting
REWRITTEN_HEADERS = (wire.REPLY_TO_ADDRESS, wire.FORWARD_DESTINATION)


def parse_rewrites(pairs: Iterable[str | tuple[str, str]] | None) -> dict:
    """['Old@[dbo]=New@[public]', ...] -> {Address: new text}."""
    out = {}
    for pair in pairs or ():
        if isinstance(pair, str):
            old, sep, new = pair.partition("=")
            if not sep:
                raise errors.UsageError(f"--rewrite-address {pair!r}: expected OLD=NEW")
        else:
            old, new = pair
        out[wire.parse_address(old.strip())] = wire.parse_address(new.strip()).format()
    return out


def rewrite_address(text: str | None, rewrites: dict) -> str | None:
    if not text or not rewrites:
        return text
    try:
        parsed = wire.parse_address(text)
    except ValueError:
        return text
    return rewrites.get(parsed, text)


def rewrite_headers(text: str, rewrites: dict) -> str:
    """Headers with ReplyToAddress / ForwardDestination rewritten; unchanged text when nothing matches."""
    if not rewrites or not any(a.table in text for a in rewrites):
        return text
    try:
        headers = wire.decode_headers(text)
    except wire.PoisonHeaders:
        return text  # poison stays poison, byte for byte
    changed = False
    for name in REWRITTEN_HEADERS:
        if name in headers:
            new = rewrite_address(headers[name], rewrites)
            if new != headers[name]:
                headers[name] = new
                changed = True
    return wire.encode_headers(headers) if changed else text


def fold_legacy_columns(headers: str, correlation_id: str | None, reply_to: str | None) -> str:
    """SQL Server layout -> PostgreSQL layout: a v1/v2 sender's CorrelationId / ReplyToAddress columns
    become the headers later receivers read, where the headers lack them (else the text is kept as is)."""
    if not correlation_id and not reply_to:
        return headers
    try:
        decoded = wire.decode_headers(headers)
    except wire.PoisonHeaders:
        return headers
    added = False
    for name, value in ((wire.CORRELATION_ID, correlation_id), (wire.REPLY_TO_ADDRESS, reply_to)):
        if value and name not in decoded:
            decoded[name] = value
            added = True
    return wire.encode_headers(decoded) if added else headers


# --------------------------------------------------------------------------- keys
def pack_keys(keys: list) -> bytes:
    if not keys:
        return b""
    if isinstance(keys[0], int):
        return b"I" + struct.pack(f"<{len(keys)}q", *keys)
    return b"U" + b"".join(uuid.UUID(str(k)).bytes for k in keys)


def unpack_keys(data: bytes | None) -> list:
    data = bytes(data or b"")
    if not data:
        return []
    body = data[1:]
    if data[:1] == b"I":
        return list(struct.unpack(f"<{len(body) // 8}q", body))
    return [str(uuid.UUID(bytes=body[i : i + 16])) for i in range(0, len(body), 16)]


# --------------------------------------------------------------------------- failpoints (tests)
def failpoint(name: str, part: int | None = None) -> None:
    """Stop dead at a named point (the crash tests SIGKILL the job while it waits here)."""
    wanted = os.environ.get(FAILPOINT_ENV)
    if not wanted:
        return
    point, _, index = wanted.partition(":")
    if point != name or (index and part is not None and int(index) != part):
        return
    marker = os.environ.get(FAILPOINT_FILE_ENV)
    if marker:
        with open(marker, "w") as f:
            f.write(f"{name}:{part}\n")
    while True:
        time.sleep(1)


# --------------------------------------------------------------------------- the task
@dataclass
class Task:
    """Everything one partition needs; pickled to Spark executors."""

    move_id: str
    source: Endpoint
    destination: Endpoint
    kind: str
    src_low: int | None
    src_high: int | None
    base: int | None
    ranges: list
    explicit_order: bool
    rewrites: dict = field(default_factory=dict)
    claims: bool = True  # the move began under the claims protocol (an older move's rows wait in the source queue)


def claim_table(task: Task, part: int) -> Table:
    """Where partition `part`'s rows wait between the source and the destination: a table of the
    source's columns in the source's schema, named by the move and the partition."""
    source = task.source.target
    digest = hashlib.blake2b(task.move_id.encode(), digest_size=8).hexdigest()
    name = source.name._replace(table=f"{CLAIM_PREFIX}{digest}_{part}")
    return source._replace(name=name, where=f"claim {part} of {source.where}")


@dataclass(frozen=True)
class _Partition:
    """One partition's move as its steps pass it along: the task, the partition, both connections and
    both engines' statements (`same`: one database, `src is dst`)."""

    task: Task
    part: int
    src: Any
    dst: Any
    src_sql: Pipeline
    dst_sql: Pipeline
    same: bool

    def __iter__(self):  # noqa: ANN204 - unpacked by each step, never copied (the connections are live)
        return iter((self.task, self.part, self.src, self.dst, self.src_sql, self.dst_sql, self.same))


@dataclass(frozen=True)
class _Written:
    """What a partition wrote to the destination: its key range, the source keys, their count and checksum."""

    lo: int | None
    hi: int | None
    keys: list
    count: int
    digest: str


def run_partition(task: Task, part: int) -> dict:
    """Move one partition exactly once (see the module docstring). Returns what it did."""
    src_sql = task.source.dialect.pipeline
    dst_sql = task.destination.dialect.pipeline
    same = same_database(task.source.url, task.destination.url)
    src = dbapi_connect(task.source.url)
    dst = src if same else dbapi_connect(task.destination.url)
    moving = _Partition(task, part, src, dst, src_sql, dst_sql, same)
    try:
        dst_sql.begin(dst)
        done = dst_sql.ledger_row(dst, task.move_id, part)
        dst_sql.rollback(dst)
        if done is not None:
            return _settle(moving, done)
        if same:  # one database: the partition's one transaction is its claim
            src_sql.begin(src, write=True)  # SQLite: the write lock now, so the read and the delete see the same rows
            if _streamable(task):
                return _stream_partition(moving)
            return _move_partition(moving, task.source.target)
        if _streamable(task):
            claim = claim_table(task, part)
            if src_sql.claim_keys(src, claim) is None:  # no earlier claim: claim and copy in one pass
                src_sql.rollback(src)
                try:
                    return _stream_partition(moving, claim, fresh=True)
                except ClaimBusy:  # a receiver holds a row of it: claim passing over held rows, then copy
                    dst_sql.rollback(dst)
            src_sql.rollback(src)
            return _stream_partition(moving, _claim(task, part, src, src_sql))
        claim = _claim(task, part, src, src_sql)
        src_sql.begin(src)
        return _move_partition(moving, claim)
    finally:
        src.close()
        if not same:
            dst.close()


def _claim(task: Task, part: int, src: Any, src_sql: Pipeline) -> Table:
    """The partition's rows out of the source queue into its claim, in the transaction that locks them:
    from its commit on no receiver of the source can see them again. A claim made by an earlier run
    (killed before the destination committed) is kept and takes what of the range is still there."""
    claim = claim_table(task, part)
    lo, hi = task.ranges[part] if task.ranges and task.source.layout.order is not None else (None, None)
    src_sql.begin(src, write=True)
    src_sql.claim(src, task.source.target, claim, lo, hi, task.src_high)
    failpoint("before-claim-commit", part)
    src_sql.commit(src)
    failpoint("after-claim", part)
    return claim


def _settle(moving: _Partition, done: tuple) -> dict:
    """A partition the ledger holds: the destination has its rows. Its claim (if the run that wrote
    them was killed before dropping it) is dropped, and what it held is compared with the ledger's
    keys: `expected` the keys the ledger names, `found` those this rerun found where they should be."""
    task, part, src, dst, src_sql, dst_sql, same = moving
    rows, checksum, keys, deleted = done
    expected = unpack_keys(keys)
    result = {"part": part, "rows": rows, "checksum": checksum, "skipped": True}
    if deleted:
        return result
    claim = claim_table(task, part)
    src_sql.begin(src, write=True)
    held = None if same else src_sql.claim_keys(src, claim)
    if held is not None:  # killed between the destination's commit and the claim's drop
        found, note = len(set(map(str, held)) & set(map(str, expected))), "claim dropped"
        src_sql.drop_claim(src, claim)
    elif task.claims:  # the claim's drop committed before the kill: its rows are the ledger's
        src_sql.rollback(src)
        src_sql.begin(src, write=True)
        found, note = len(expected), "claim dropped before the kill"
    else:  # a move begun before claims: its rows waited in the source queue, unlocked since the kill
        src_sql.rollback(src)
        src_sql.begin(src, write=True)
        found, note = src_sql.delete_keys(src, task.source.target, expected), "deleted from the source queue"
    failpoint("before-release-commit", part)
    if not same:
        src_sql.commit(src)
        dst_sql.begin(dst, write=True)
    dst_sql.mark_deleted(dst, task.move_id, part)
    dst_sql.commit(dst)
    return {**result, "expected": len(expected), "found": found, "note": note}


def _streamable(task: Task) -> bool:
    """Queue to queue on one engine that streams their layout (PostgreSQL's, on PostgreSQL), nothing to
    rewrite: server to server."""
    source, dest = task.source, task.destination
    return (
        task.kind == Kind.QUEUE.value
        and task.explicit_order
        and not task.rewrites
        and bool(task.ranges)
        and source.dialect is dest.dialect
        and all(ep.dialect.pipeline.stream_layout == ep.layout.name for ep in (source, dest))
    )


def _stream_partition(moving: _Partition, claim: Table | None = None, fresh: bool = False) -> dict:
    """Server to server. `fresh`: the rows are claimed as they stream (the claim commits first, then
    the destination); else read from the claim an earlier step committed (one database: no claim)."""
    task, part, src, dst, src_sql, dst_sql, _ = moving
    lo, hi = task.ranges[part]
    digest = hashlib.blake2b(digest_size=16)
    origin = task.source.target if fresh or claim is None else claim
    route = Route(origin, task.destination.target, claim, lo, hi, task.src_low, task.src_high, task.base)
    keys = src_sql.stream_partition(src, dst, route, digest, claimed=not fresh)
    if fresh:
        dst_sql.insert_ledger(dst, LedgerRow(task.move_id, part, lo, hi, len(keys), digest.hexdigest(), pack_keys(keys)))
        failpoint("before-claim-commit", part)
        src_sql.commit(src)
        failpoint("after-claim", part)
    written = _Written(lo, hi, keys, len(keys), digest.hexdigest())
    return _commit_partition(moving, written, claim, ledger_written=fresh)


def _move_partition(moving: _Partition, origin: Table) -> dict:
    """The partition's rows read from `origin` (its claim; one database: the source, locked), converted
    to the destination's layout and written there."""
    task, part, src, dst, src_sql, dst_sql, same = moving
    source, dest = task.source, task.destination
    src_layout, dst_layout = source.layout, dest.layout
    kind = Kind(task.kind)
    if src_layout.order is not None and task.ranges:
        lo, hi = task.ranges[part]
        cursor = src_sql.read_range(src, origin, lo, hi, task.src_high)
    else:
        lo = hi = None
        cursor = src_sql.read_all(src, origin)
    checksum = Checksum()
    keys: list = []
    out: list[tuple] = []
    text_times = dst_sql.text_times
    rewrites = task.rewrites
    key_at = src_layout.columns.index(src_layout.key) if src_layout.key else None
    if kind is Kind.QUEUE:
        columns = dst_layout.columns if task.explicit_order else dst_layout.columns[:-1]
        fold = src_layout.columns_beside_headers and not dst_layout.columns_beside_headers
        for raw in cursor:
            row = read_queue_row(src_layout, raw)
            reply_to = rewrite_address(row.reply_to, rewrites)
            headers = rewrite_headers(row.headers, rewrites)
            if fold:
                headers = fold_legacy_columns(headers, row.correlation_id, reply_to)
            if headers is not row.headers or reply_to is not row.reply_to:
                row = row._replace(headers=headers, reply_to=reply_to)
            order = task.base + (row.order - task.src_low) if task.explicit_order else None
            values = write_queue_row(dst_layout, row, order, text_times)
            out.append(values if task.explicit_order else values[:-1])
            checksum.add(row.id, row.headers, row.body)
            keys.append(raw[key_at] if not isinstance(raw[key_at], uuid.UUID) else str(raw[key_at]))
    elif kind is Kind.DELAYED:
        columns = tuple(c for c in dst_layout.columns if c != dst_layout.order)
        for raw in cursor:
            row = read_delayed_row(src_layout, raw)
            row = row._replace(headers=rewrite_headers(row.headers, rewrites))
            values = write_delayed_row(dst_layout, row, text_times, task.move_id)
            out.append(values[:-1] if dst_layout.order else values)
            checksum.add(str(row.id or row.order), row.headers, row.body)
            keys.append(str(raw[key_at]) if isinstance(raw[key_at], uuid.UUID) else raw[key_at])
    else:
        raise MoveError("subscription rows are copied with move_subscriptions()")
    if not same:
        dst_sql.begin(dst, write=True)
    dst_sql.write_rows(dst, dest.target, columns, out)
    return _commit_partition(moving, _Written(lo, hi, keys, checksum.count, checksum.hexdigest()), origin)


def _commit_partition(moving: _Partition, written: _Written, claim: Table | None, ledger_written: bool = False) -> dict:
    """The ledger row with the rows (one destination transaction); then the claim dropped; then the
    ledger row marked. One database: the rows, the ledger row and the source's delete in one commit."""
    task, part, src, dst, src_sql, dst_sql, same = moving
    lo, hi, keys, count, digest = written.lo, written.hi, written.keys, written.count, written.digest
    if not ledger_written:
        dst_sql.insert_ledger(dst, LedgerRow(task.move_id, part, lo, hi, count, digest, pack_keys(keys)))
    failpoint("before-dest-commit", part)
    result = {"part": part, "rows": count, "checksum": digest, "skipped": False}
    if same:
        if claim is not None and claim.name == task.source.target.name:  # read locked from the source itself
            src_sql.delete_keys(src, claim, keys)
        dst_sql.mark_deleted(dst, task.move_id, part)
        dst_sql.commit(dst)
        return result
    dst_sql.commit(dst)
    failpoint("after-dest-commit", part)
    src_sql.rollback(src)
    src_sql.begin(src, write=True)
    src_sql.drop_claim(src, claim)
    failpoint("before-release-commit", part)
    src_sql.commit(src)
    failpoint("after-release", part)
    dst_sql.begin(dst, write=True)
    dst_sql.mark_deleted(dst, task.move_id, part)
    dst_sql.commit(dst)
    return result


# --------------------------------------------------------------------------- the driver
@dataclass
class MoveResult(JobResult):
    move_id: str
    source: str
    destination: str
    kind: str
    partitions: int
    rows: int
    skipped_partitions: int
    resumed: bool
    seconds: float
    rows_per_second: float
    remaining_in_source: int
    checksum: str
    moved_now: int = 0  # rows this run moved (a resumed move's earlier rows are in `rows`, not here)
    settled: list = field(default_factory=list)  # partitions the ledger held, settled now: part, expected, found, note

    @property
    def mismatched(self) -> list[dict]:
        """The settled partitions whose keys found differ from the ledger's."""
        return [s for s in self.settled if s["found"] != s["expected"]]


def prepare(
    source: Endpoint,
    destination: Endpoint,
    *,
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION,
    partitions: int | None = None,
    rewrites: dict | None = None,
    move_id: str | None = None,
) -> tuple[Task, bool]:
    """Resume the unfinished move between these tables, or snapshot the source and reserve a new one."""
    if source.kind is not destination.kind:
        raise MoveError(f"cannot move {source.kind.value} rows into a {destination.kind.value} table")
    src_sql, dst_sql = source.dialect.pipeline, destination.dialect.pipeline
    dst = dbapi_connect(destination.url)
    try:
        dst_sql.ensure_ledger(dst)
        dst_sql.begin(dst, write=True)
        if move_id is None:
            move_id = dst_sql.find_open_move(dst, source.describe(), destination.describe())
        if move_id is not None:
            row = dst_sql.get_move(dst, move_id)
            if row is not None:
                dst_sql.rollback(dst)
                _, kind, low, high, base, count, _expected, state = row
                return _task(move_id, source, destination, (low, high, base, count), rewrites, state == CLAIMS_STATE), True
        move_id = move_id or uuid.uuid4().hex
        src = dst if same_database(source.url, destination.url) else dbapi_connect(source.url)
        try:
            target = source.target
            if target.order is not None:
                low, high, rows = src_sql.bounds(src, target)
            else:
                rows, low, high = src_sql.count(src, target), None, None
            if src is not dst:
                src_sql.rollback(src)
        finally:
            if src is not dst:
                src.close()
        explicit = _explicit(source, destination)
        count = 1 if low is None else (partitions or max(1, -(-rows // rows_per_partition)))
        base = dst_sql.reserve(dst, destination.target, high - low + 1) if (explicit and low is not None) else None
        move = MoveRow(move_id, source.describe(), destination.describe(), source.kind.value, low, high, base, count, rows, CLAIMS_STATE)
        dst_sql.insert_move(dst, move)
        failpoint("after-reserve")
        dst_sql.commit(dst)
        return _task(move_id, source, destination, (low, high, base, count), rewrites), False
    finally:
        dst.close()


def _explicit(source: Endpoint, destination: Endpoint) -> bool:
    return source.kind is Kind.QUEUE and destination.layout.explicit_order and destination.dialect.pipeline.takes_explicit_order


def _task(
    move_id: str,
    source: Endpoint,
    destination: Endpoint,
    span: tuple[int | None, int | None, int | None, int],
    rewrites: dict | None,
    claims: bool = True,
) -> Task:
    """The move's task from its ledger row's span: the source's low and high order, the destination's
    reserved base, the partition count."""
    low, high, base, count = span
    ranges = partition_ranges(low, high, count) if low is not None and source.layout.order else []
    return Task(
        move_id,
        source,
        destination,
        source.kind.value,
        low,
        high,
        base,
        ranges,
        _explicit(source, destination) and base is not None,
        rewrites or {},
        claims,
    )


def _partition_count(task: Task) -> int:
    return max(1, len(task.ranges))


def _totals(destination: Endpoint, move_id: str) -> tuple[int, int, int]:
    dst_sql = destination.dialect.pipeline
    conn = dbapi_connect(destination.url)
    try:
        dst_sql.begin(conn)
        out = tuple(int(v) for v in dst_sql.ledger_totals(conn, move_id))
        dst_sql.rollback(conn)
        return out
    finally:
        conn.close()


class Progress:
    """A progress line on stderr, read from the destination's ledger (what has really committed)."""

    def __init__(
        self, destination: Endpoint, move_id: str, partitions: int, label: str, stream: TextIO | bool | None = None, interval: float = 1.0
    ):
        self.destination, self.move_id, self.partitions, self.label = destination, move_id, partitions, label
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.perf_counter()
        self.baseline = 0  # rows the ledger held when this run began (a resumed move's earlier runs)

    def __enter__(self):
        if self.stream is not False:
            try:
                self.baseline = _totals(self.destination, self.move_id)[1]
            except Exception:  # the progress line must never fail the job
                pass
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            self._print(final=True)

    def _print(self, final: bool = False) -> None:
        try:
            parts, rows, _ = _totals(self.destination, self.move_id)
        except Exception:  # the progress line must never fail the job
            return
        self.stream.write(self.line(parts, rows, time.perf_counter() - self.started, final))
        self.stream.flush()

    def line(self, parts: int, rows: int, elapsed: float, final: bool = False) -> str:
        """The progress line: the rate is this run's rows (those beyond the baseline) over this run's time."""
        now = max(0, rows - self.baseline)
        rate = now / elapsed if elapsed > 0 else 0.0
        end = "\n" if final or not self.stream.isatty() else "\r"
        earlier = f" ({self.baseline:,} of them before this run)" if self.baseline else ""
        return f"[{self.label}] {parts}/{self.partitions} partitions, {rows:,} rows{earlier}, {rate:,.0f} rows/s{end}"

    def _run(self) -> None:
        tick = 0
        while not self._stop.wait(self.interval):
            tick += 1
            if self.stream.isatty() or tick % 10 == 0:
                self._print()


def execute(task: Task, spark: SparkSession | None = None) -> list[dict]:
    """Run every partition: as Spark tasks when a session is given, else in this process, in order."""
    parts = list(range(_partition_count(task)))
    if spark is None:
        return [run_partition(task, i) for i in parts]
    slices = len(parts) if task.explicit_order else 1  # without explicit order: one task, partitions in order
    rdd = spark.sparkContext.parallelize(parts, slices)
    return rdd.mapPartitions(lambda it: [run_partition(task, i) for i in it]).collect()


class MovePlan(TypedDict, total=False):
    """prepare()'s keyword arguments, as move() takes them: how the move is cut and named."""

    rows_per_partition: int
    partitions: int | None
    rewrites: dict | None
    move_id: str | None


def move(
    source: Endpoint,
    destination: Endpoint,
    *,
    spark: SparkSession | None = None,
    progress: TextIO | bool | None = None,
    **plan: Unpack[MovePlan],
) -> MoveResult:
    """Move every message of `source` into `destination`, exactly once (resumes an unfinished move);
    `plan`: rows_per_partition, partitions, rewrites, move_id, as prepare() takes them."""
    started = time.perf_counter()
    task, resumed = prepare(source, destination, **plan)
    with Progress(destination, task.move_id, _partition_count(task), "move", stream=progress):
        results = execute(task, spark)
    seconds = time.perf_counter() - started
    failpoint("before-finish")
    dst_sql = destination.dialect.pipeline
    conn = dbapi_connect(destination.url)
    try:
        dst_sql.begin(conn, write=True)
        ledger = dst_sql.ledger_checksums(conn, task.move_id)
        dst_sql.finish_move(conn, task.move_id)
        dst_sql.commit(conn)
    finally:
        conn.close()
    if len(ledger) != _partition_count(task):
        raise MoveError(f"move {task.move_id}: {len(ledger)} of {_partition_count(task)} partitions in the ledger")
    combined = Checksum()
    for part, rows, checksum in ledger:
        combined.add(str(part), checksum, str(rows).encode())
    rows = sum(int(r[1]) for r in ledger)
    moved_now = sum(r["rows"] for r in results if not r["skipped"])
    remaining = _remaining(source)
    return MoveResult(
        task.move_id,
        source.describe(),
        destination.describe(),
        task.kind,
        _partition_count(task),
        rows,
        sum(1 for r in results if r["skipped"]),
        resumed,
        round(seconds, 3),
        round(moved_now / seconds, 1) if seconds > 0 else 0.0,
        remaining,
        combined.hexdigest(),
        moved_now,
        [{k: r[k] for k in ("part", "expected", "found", "note")} for r in results if "expected" in r],
    )


def _remaining(ep: Endpoint) -> int:
    s = ep.dialect.pipeline
    conn = dbapi_connect(ep.url)
    try:
        n = s.count(conn, ep.target)
        s.rollback(conn)
        return int(n)
    finally:
        conn.close()


# --------------------------------------------------------------------------- subscriptions
def move_subscriptions(source: Endpoint, destination: Endpoint, rewrites: dict | None = None, delete_source: bool = False) -> int:
    """Copy subscription rows with QueueAddress rewritten (upsert: rerunning is harmless). In place
    when source and destination are the same table."""
    src_sql, dst_sql = source.dialect.pipeline, destination.dialect.pipeline
    same_db = same_database(source.url, destination.url)
    src = dbapi_connect(source.url)
    dst = src if same_db else dbapi_connect(destination.url)
    try:
        src_sql.begin(src, write=True)
        rows = [tuple(r) for r in src_sql.read_all(src, source.target)]
        out = [(rewrite_address(a, rewrites or {}), e, t) for a, e, t in rows]
        if not same_db:
            dst_sql.begin(dst, write=True)
        dst_sql.upsert_subscriptions(dst, destination.target, out)
        dst_sql.commit(dst)
        if delete_source and source.qualified != destination.qualified or (delete_source and not same_db):
            src_sql.begin(src, write=True)
            src_sql.delete_subscriptions(src, source.target, [(e, t) for _, e, t in rows])
            src_sql.commit(src)
        return len(out)
    finally:
        src.close()
        if not same_db:
            dst.close()
