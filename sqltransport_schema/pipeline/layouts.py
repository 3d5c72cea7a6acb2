"""Queue-table layouts and the conversion between them (pure functions, no I/O).

Two layouts exist (transport-facts §1 and §7):

- ``mssql``: the SQL Server transport's columns, also used by this project's SQLite tables:
  queue ``Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body, RowVersion``;
  delayed ``Headers, Body, Due, RowVersion``.
- ``postgresql``: the PostgreSQL transport's columns: queue ``Id, Expires, Headers, Body, Seq``;
  delayed ``Id, Headers, Body, Due``.

A layout is a property of the table, not of the server it lives on: a SQL Server-shaped table can
be hosted on PostgreSQL (that is how the conversion is tested here, where no SQL Server runs). A
layout's columns are those of the engine it is named for (`Dialect.COLUMNS`); which layout an
engine's own DDL gives is the engine's `pipeline.layout`.

Rows travel between layouts as neutral tuples:

- queue: ``QueueRow(id, correlation_id, reply_to, expires, headers, body, order)``
- delayed: ``DelayedRow(id, headers, body, due, order)``
- subscriptions: ``SubscriptionRow(queue_address, endpoint, topic)``

Times are naive UTC ``datetime`` values in a neutral row.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import NamedTuple

from .. import engines, errors
from ..schema import Kind

LAYOUTS = ("mssql", "postgresql")  # each named for the engine whose transport defines its columns


class QueueRow(NamedTuple):
    id: str
    correlation_id: str | None
    reply_to: str | None
    expires: datetime | None
    headers: str
    body: bytes | None
    order: int


class DelayedRow(NamedTuple):
    id: str | None
    headers: str
    body: bytes | None
    due: datetime
    order: int | str


class SubscriptionRow(NamedTuple):
    queue_address: str
    endpoint: str
    topic: str


@dataclass(frozen=True)
class Layout:
    """The physical columns of one table kind in one layout.

    ``columns`` are written unquoted, as the transports write them (PostgreSQL folds them to
    lower case, SQL Server and SQLite compare them without case). ``order`` is the FIFO column,
    ``key`` the unique column source rows are deleted by (None: the whole row is the key).
    ``explicit_order``: the order column may be written with explicit values (a sequence or
    AUTOINCREMENT that can be moved past a reserved range), so partitions may commit in any order
    and still land in source order. ``columns_beside_headers``: the engine's
    `Dialect.columns_beside_headers` (CorrelationId and ReplyToAddress as queue columns, delayed
    rows without an Id), which decides how a row converts.
    """

    name: str
    kind: Kind
    columns: tuple[str, ...]
    order: str | None
    key: str | None
    explicit_order: bool = False
    columns_beside_headers: bool = False

    @property
    def insert_columns(self) -> tuple[str, ...]:
        return self.columns


def _layout(name: str, kind: Kind, order: str | None, key: str | None, explicit_order: bool = False) -> Layout:
    engine = engines.get(name)
    return Layout(name, kind, engine.column_names(kind), order, key, explicit_order, engine.columns_beside_headers)


QUEUE_MSSQL = _layout("mssql", Kind.QUEUE, order="RowVersion", key="RowVersion", explicit_order=True)
QUEUE_POSTGRESQL = _layout("postgresql", Kind.QUEUE, order="Seq", key="Seq", explicit_order=True)
DELAYED_MSSQL = _layout("mssql", Kind.DELAYED, order="RowVersion", key="RowVersion")
DELAYED_POSTGRESQL = _layout("postgresql", Kind.DELAYED, order=None, key="Id")
# the same columns in both transports
SUBSCRIPTIONS = Layout("any", Kind.SUBSCRIPTIONS, engines.get("mssql").column_names(Kind.SUBSCRIPTIONS), order=None, key=None)

_LAYOUTS = {
    ("mssql", Kind.QUEUE): QUEUE_MSSQL,
    ("postgresql", Kind.QUEUE): QUEUE_POSTGRESQL,
    ("mssql", Kind.DELAYED): DELAYED_MSSQL,
    ("postgresql", Kind.DELAYED): DELAYED_POSTGRESQL,
    ("mssql", Kind.SUBSCRIPTIONS): SUBSCRIPTIONS,
    ("postgresql", Kind.SUBSCRIPTIONS): SUBSCRIPTIONS,
}


def layout(name: str, kind: Kind) -> Layout:
    try:
        return _LAYOUTS[(name, Kind(kind))]
    except KeyError:
        raise errors.UsageError(f"unknown layout {name!r}; known layouts: {', '.join(LAYOUTS)}") from None


# --------------------------------------------------------------------------- values
SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


def to_utc_naive(value: datetime | str | None) -> datetime | None:
    """A stored time (datetime, aware or naive UTC, or SQLite's text) as naive UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().replace("T", " ")
        for fmt in (SQLITE_TIME, "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"):
            try:
                return datetime.strptime(text, fmt)
            except ValueError:
                continue
        raise errors.UsageError(f"unreadable time {value!r}")
    if value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def sqlite_time(value: datetime | None) -> str | None:
    """The text SQLite's runtime statements write and compare ('YYYY-MM-DD HH:MM:SS.SSS')."""
    return None if value is None else value.strftime(SQLITE_TIME)[:-3]


def canonical_id(value: object) -> str:
    """A message id as lower-case canonical GUID text (uuid objects and bytes included)."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return str(uuid.UUID(bytes=bytes(value)))
    text = str(value)
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return text  # not a GUID: passed on as it is


def derived_id(namespace: str, key: object) -> str:
    """A stable id for a row that has none in its source layout (SQL Server delayed rows)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"sqltransport-schema:{namespace}:{key}"))


# --------------------------------------------------------------------------- rows
def read_queue_row(source: Layout, row: tuple) -> QueueRow:
    """A row as SELECTed in ``source.columns`` order -> neutral row."""
    if source.columns_beside_headers:
        id_, correlation, reply_to, _recoverable, expires, headers, body, order = row
    else:
        id_, expires, headers, body, order = row
        correlation = reply_to = None
    return QueueRow(
        canonical_id(id_), correlation, reply_to, to_utc_naive(expires), headers, None if body is None else bytes(body), int(order)
    )


def read_delayed_row(source: Layout, row: tuple) -> DelayedRow:
    if source.columns_beside_headers:
        headers, body, due, order = row
        return DelayedRow(None, headers, None if body is None else bytes(body), to_utc_naive(due), int(order))
    id_, headers, body, due = row
    return DelayedRow(canonical_id(id_), headers, None if body is None else bytes(body), to_utc_naive(due), canonical_id(id_))


def write_queue_row(dest: Layout, row: QueueRow, order: int | None, text_times: bool) -> tuple:
    """Neutral row -> values in ``dest.columns`` order (order None: let the table assign it)."""
    expires = sqlite_time(row.expires) if text_times else row.expires
    if dest.columns_beside_headers:
        return (row.id, row.correlation_id, row.reply_to, 1, expires, row.headers, row.body, order)
    return (row.id, expires, row.headers, row.body, order)


def write_delayed_row(dest: Layout, row: DelayedRow, text_times: bool, id_namespace: str) -> tuple:
    due = sqlite_time(row.due) if text_times else row.due
    if dest.columns_beside_headers:
        return (row.headers, row.body, due, None)
    return (row.id or derived_id(id_namespace, row.order), row.headers, row.body, due)


# --------------------------------------------------------------------------- ordering
def partition_ranges(low: int, high: int, count: int) -> list[tuple[int, int]]:
    """[low, high] cut into at most `count` half-open ranges [lo, hi) of near-equal width, in order."""
    if high < low:
        return []
    span = high - low + 1
    count = max(1, min(count, span))
    step, extra = divmod(span, count)
    ranges, lo = [], low
    for i in range(count):
        hi = lo + step + (1 if i < extra else 0)
        ranges.append((lo, hi))
        lo = hi
    return ranges


def destination_order(source_order: int, source_low: int, base: int) -> int:
    """Where a source row lands in a reserved destination range: gaps kept, so source order is kept."""
    return base + (source_order - source_low)


class Checksum:
    """Order-sensitive content checksum of messages: (Id, Headers, Body), length-prefixed."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.count = 0

    def add(self, id_: str, headers: str, body: bytes | None) -> None:
        h = self._hash
        for part in (id_.encode(), headers.encode("utf-8"), body):
            if part is None:
                h.update(b"\xff\xff\xff\xff")
            else:
                h.update(len(part).to_bytes(4, "little"))
                h.update(part)
        self.count += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
