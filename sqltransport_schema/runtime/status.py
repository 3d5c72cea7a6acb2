"""Operating a live bus: `status` (what waits in every table of the deployed blueprint) and `flow`
(messages in and out of each queue between two reports).

`status` takes a `Transport` made by `Transport.from_database` (its blueprint says which tables exist
and where) and runs the engine's statements (`dialect.live_bus`, engines/live_bus.py). The CLI's
`sqltransport-schema status` calls it; a service can call it too. Retrying failed messages is the
error queue's (`sqltransport_schema.errorqueue`: `retry`, `ErrorQueue.retry`). See docs/operations.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from .. import wire
from ..db import given_url
from ..defaults import DEFAULT_ERROR_QUEUE, DEFAULT_RETRY_BATCH
from ..schema import PERSISTENCE_KINDS, Blueprint, Kind, TableName, TableSpec
from ..urls import display_url
from .deployed import blueprint_specs as _blueprint_specs
from .deployed import existing as _existing
from .deployed import resolve
from .transport import execute

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy.engine import Connection

    from .transport import Transport

__all__ = [
    "status",
    "StatusReport",
    "TableStatus",
    "OrphanedSubscription",
    "flow",
    "Flow",
    "DEFAULT_ERROR_QUEUE",
    "DEFAULT_RETRY_BATCH",
]


# =========================================================================================== status
@dataclass
class TableStatus:
    """One table of the blueprint: where it is and what it holds (None: not measured)."""

    kind: str
    name: str
    schema: str | None
    catalog: str | None
    address: str  # as the engine knows it (SQLite: the table alone)
    canonical_address: str | None = None  # what headers and subscriptions hold (schema included), where it differs
    missing: bool = False
    readable: bool = True  # False: the table exists, but the login may not read it (no figures)
    depth: int | None = None
    estimated: bool = False  # depth is the engine's estimate (status --estimate), not a count
    expired: int | None = None  # queues: expired messages not yet purged (not counted when estimating)
    oldest_time_sent: datetime | None = None  # queues: NServiceBus.TimeSent of the head of the queue
    oldest_age_seconds: float | None = None
    due: int | None = None  # delayed tables: due now (the next move takes them)
    next_due: datetime | None = None  # delayed tables: the earliest Due (in the past while due ones wait)
    failed_queues: list[dict] | None = None  # the error queue: [{"failed_queue", "messages"}]
    topics: list[dict] | None = None  # the subscription table: [{"topic", "subscribers"}]
    high_water: int | None = None  # queues, when asked: the last RowVersion/Seq given (None: none yet, or not read)
    # outbox tables: messages not dispatched yet, and dispatched rows awaiting cleanup with the oldest's
    # DispatchedAt (the table records no time a row was stored, so a waiting row's age is unknown)
    undispatched: int | None = None
    dispatched: int | None = None
    oldest_dispatched_at: datetime | None = None
    oldest_dispatched_age_seconds: float | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "kind": self.kind,
            "schema": self.schema,
            "catalog": self.catalog,
            "name": self.name,
            "address": self.address,
            "canonical_address": self.canonical_address or self.address,
            "depth": self.depth,
            "missing": self.missing,
            "readable": self.readable,
        }
        for name in _FIGURES_OF_KIND.get(self.kind, ()):
            value = getattr(self, name)
            out[name] = _iso(value) if isinstance(value, datetime) else value
        if self.failed_queues is not None:
            out["failed_queues"] = self.failed_queues
        if self.topics is not None:
            out["topics"] = self.topics
        if self.high_water is not None:
            out["high_water"] = self.high_water
        return out


@dataclass(frozen=True)
class OrphanedSubscription:
    """A subscription row whose address names no table of the database: a publish of its topic fails."""

    endpoint: str
    topic: str
    address: str
    problem: str = "names no table in the database"

    def to_json(self) -> dict:
        return {"endpoint": self.endpoint, "topic": self.topic, "address": self.address, "problem": self.problem}

    def describe(self) -> str:
        return f"{self.address} (endpoint {self.endpoint}, topic {self.topic}) {self.problem}"


UNSUBSCRIBE_HINT = (
    "unsubscribe each with Subscriptions.unsubscribe(connection, endpoint, topic) "
    "(Transport.from_database(url).subscriptions(), docs/runtime.md)"
)


def orphaned_subscriptions(dialect: Any, rows: Sequence[tuple[str, str, str]], keys: Any) -> list[OrphanedSubscription]:
    """The subscription rows (endpoint, topic, address) whose address names none of the tables
    whose table_key is in keys (every table the database holds), or is no address at all."""
    out = []
    for endpoint, topic, address in rows:
        try:
            parsed = wire.parse_address(address)
        except ValueError as exc:
            out.append(OrphanedSubscription(endpoint, topic, address, f"is not an address ({exc})"))
            continue
        name = TableName(parsed.table, parsed.schema, parsed.catalog)
        if dialect.table_key(name) not in keys and dialect.table_key(name._replace(catalog=None)) not in keys:
            out.append(OrphanedSubscription(endpoint, topic, address))
    return out


@dataclass
class StatusReport:
    """What `status` read: one TableStatus per table of the deployed topology, and the subscription
    rows that name no table."""

    engine: str
    transport_version: str
    taken_at: datetime
    estimate: bool
    tables: list[TableStatus] = field(default_factory=list)
    database: str | None = None  # the database read, as people see its URL (password masked)
    orphaned: list[OrphanedSubscription] = field(default_factory=list)  # subscription rows naming no table
    # not in to_json: the blueprint read (its tables in `tables`' order) and the subscription table's
    # rows (endpoint, topic, address), for what draws the report (pictures.sources.from_status)
    blueprint: Blueprint | None = field(default=None, repr=False, compare=False)
    subscriptions: list[tuple[str, str, str]] = field(default_factory=list, repr=False, compare=False)

    @property
    def missing(self) -> list[TableStatus]:
        return [t for t in self.tables if t.missing]

    @property
    def unreadable(self) -> list[TableStatus]:
        """The tables that exist but that the login may not read (a partial report)."""
        return [t for t in self.tables if not t.readable]

    def to_json(self) -> dict:
        return {
            "engine": self.engine,
            "database": self.database,
            "transport_version": self.transport_version,
            "taken_at": _iso(self.taken_at),
            "estimate": self.estimate,
            "tables": [t.to_json() for t in self.tables],
            "orphaned_subscriptions": [o.to_json() for o in self.orphaned],
        }


# The figures a table's kind adds to its JSON, in the order the JSON lists them.
_FIGURES_OF_KIND = {
    Kind.QUEUE.value: ("estimated", "expired", "oldest_time_sent", "oldest_age_seconds"),
    Kind.DELAYED.value: ("due", "next_due"),
    Kind.OUTBOX.value: ("undispatched", "dispatched", "oldest_dispatched_at", "oldest_dispatched_age_seconds"),
}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@contextmanager
def _connection(transport: Transport, connection: Connection | None) -> Iterator[Connection]:
    """The caller's connection (its transaction), else one of the transport's engine, in a transaction."""
    if connection is not None:
        yield connection
        return
    with transport.engine.connect() as conn, conn.begin():
        yield conn


def _where(transport: Transport, spec: TableSpec) -> TableName:
    """The table as the database holds it (a saga or outbox table under the name SQL persistence reads)."""
    return transport.dialect.persistence_table(spec) if spec.kind in PERSISTENCE_KINDS else spec.name


def status(
    transport: Transport,
    *,
    estimate: bool = False,
    error_queue: str = DEFAULT_ERROR_QUEUE,
    connection: Connection | None = None,
    now: datetime | None = None,
    high_water: bool = False,
) -> StatusReport:
    """Every table of the deployed blueprint: depth, the head's age and the expired count (queues),
    due and next due (delayed tables), counts by FailedQ (the error queue), subscribers per topic.
    The figures of many tables come from one statement (a batch of `dialect.live_bus.batch`),
    spread over `dialect.live_bus.connections` connections of the transport's engine when no
    `connection` is given; `estimate` takes queue depths from the engine's statistics (or the
    transport's peek) instead of counting, counts no expired messages and reads no head of a queue
    estimated empty. A table missing from the database is reported as such, and so is one the
    login may not read (found by the engine's "permission denied" code: each table is then probed on
    its own, without the caller's `connection`, which such a refusal may have ended). `high_water` also reads
    the last RowVersion/Seq each queue's sequence gave (what `flow` derives messages in from)."""
    _refuse_older_server(transport, connection)
    unreadable: set[tuple] = transport.__dict__.setdefault("_status_unreadable", set())  # keys of the tables refused last
    if unreadable and connection is None:
        unreadable.intersection_update(_unreadable(transport, unreadable))  # granted since: read again
    try:
        return _status(transport, estimate, error_queue, connection, now, high_water, unreadable)
    except Exception as exc:
        if connection is not None or not transport.dialect.permission_denied(exc):
            raise
        found = _unreadable(transport)
        if found <= unreadable:
            raise  # refused, but no table's read is: something else (a sequence, a catalog view)
        unreadable.update(found)
    return _status(transport, estimate, error_queue, connection, now, high_water, unreadable)


def _refuse_older_server(transport: Transport, connection: Connection | None) -> None:
    """status on a server older than it needs (SQL Server before 2016) says so, once per transport."""
    if not transport.dialect.checks_server_version or transport.__dict__.get("_status_server_checked"):
        return
    dialect = (connection or transport.engine).dialect
    if not getattr(dialect, "server_version_info", None) and connection is None:
        with transport.engine.connect():
            pass  # the engine's first connection reads the server's version
    transport.dialect.refuse_older_server(dialect, "status")
    transport.__dict__["_status_server_checked"] = True


def _unreadable(transport: Transport, among: set[tuple] | None = None) -> set[tuple]:
    """The keys of the blueprint's tables (those `among`, if given) the login may not read: each
    probed in a transaction of its own (on some engines a refusal ends the transaction it happened in)."""
    found = set()
    with transport.engine.connect() as conn:
        for _, where, key, *_ in _layout(transport):
            if among is not None and key not in among:
                continue
            try:
                with conn.begin():
                    execute(conn, transport.dialect.live_bus.read_probe(where, transport.profile)).fetchall()
            except Exception as exc:  # a missing table is refused too, with another code
                if transport.dialect.permission_denied(exc):
                    found.add(key)
    return found


def _status(
    transport: Transport,
    estimate: bool,
    error_queue: str,
    connection: Connection | None,
    now: datetime | None,
    high_water: bool,
    unreadable: set[tuple],
) -> StatusReport:
    """status(), the tables whose keys are in `unreadable` reported as such and not read."""
    dialect, profile = transport.dialect, transport.profile
    live_bus = dialect.live_bus
    layout = _layout(transport)
    error_key = dialect.table_key(resolve(transport, error_queue))
    database = display_url(given_url(transport.engine))
    report = StatusReport(
        dialect.name, transport.version, now or datetime.now(timezone.utc), estimate, database=database, blueprint=transport.blueprint
    )
    others = live_bus.connections - 1 if connection is None else 0
    heads_after = not estimate and bool(live_bus.QUEUE_COUNT_ARM)
    seen = transport.__dict__.setdefault("_status_seen", set())  # layout positions of queues seen holding messages
    known = transport.__dict__.get("_status_heads", {})  # head Headers -> TimeSent, of the last status
    read: dict[str | None, datetime | None] = {}  # and of this one
    with _connection(transport, connection) as conn, _Spread(transport, others, live_bus.prepare) as spread:
        existing = _existing(transport, conn, [spec for spec, *_ in layout], estimate or heads_after)
        present: list[tuple[TableSpec, TableName, TableStatus]] = []
        positions = []  # in the layout, of the tables present
        empty = set()  # of the tables present: queues estimated empty (and, counting, never seen holding messages)
        for position, (spec, where, key, address, canonical) in enumerate(layout):
            # where it is, as its address says: on an engine without schemas (SQLite), nowhere but its name
            catalog = where.catalog if dialect.has_catalogs else None  # PostgreSQL's catalog is the database connected to
            schema, catalog = (where.schema or dialect.default_schema, catalog) if dialect.has_schemas else (None, None)
            entry = TableStatus(spec.kind.value, where.table, schema, catalog, address, canonical)
            entry.estimated = estimate and spec.kind is Kind.QUEUE
            entry.missing = key not in existing
            entry.readable = entry.missing or key not in unreadable
            report.tables.append(entry)
            if entry.missing or not entry.readable:
                continue
            found = existing[key]  # the engine's estimate (else the arm's)
            if spec.kind is Kind.QUEUE and found is not None and int(found) <= 0 and (estimate or position not in seen):
                empty.add(len(present))
            if entry.estimated and found is not None:
                entry.depth = max(int(found), 0)
            present.append((spec, where, entry))
            positions.append(position)
        statements = _figures(transport, tuple(positions), estimate, frozenset(empty) if estimate or heads_after else frozenset())
        for i, depth, counted, head, when in spread.rows(conn, statements):
            spec, _, entry = present[i]
            if depth is not None:
                entry.depth = int(depth)
            if spec.kind is Kind.QUEUE:
                entry.expired = None if counted is None else int(counted)
                _head(entry, head, report.taken_at, known, read)
            elif spec.kind is Kind.DELAYED:
                entry.due = int(counted or 0)
                entry.next_due = live_bus.time_value(when)
            elif spec.kind is Kind.OUTBOX and live_bus.OUTBOX_ARM:
                _outbox(entry, counted, live_bus.time_value(when), report.taken_at)
        if heads_after:  # queues counted without their head that hold messages after all (the statistics lag)
            late = [i for i in sorted(empty) if present[i][2].depth]
            for statement in live_bus.figures([(Kind.QUEUE, present[i][1]) for i in late], profile, estimate=True):
                for j, _, _, head, _ in execute(conn, statement).fetchall():
                    _head(present[late[j]][2], head, report.taken_at, known, read)
        seen.update(positions[i] for i, (spec, _, entry) in enumerate(present) if spec.kind is Kind.QUEUE and entry.depth)
        transport.__dict__["_status_heads"] = read
        if high_water:
            queues = [(i, where) for i, (spec, where, _) in enumerate(present) if spec.kind is Kind.QUEUE]
            for statement, params in live_bus.high_water(queues, profile):
                for i, top in execute(conn, statement, params, prepare=live_bus.prepare).fetchall():
                    present[i][2].high_water = None if top is None else int(top)
        _contents(transport, conn, present, error_key, existing, report)
    return report


def _outbox(entry: TableStatus, undispatched: Any, oldest: datetime | None, taken_at: datetime) -> None:
    """An outbox table's figures: waiting for dispatch, and dispatched rows awaiting cleanup."""
    entry.undispatched = int(undispatched or 0)
    entry.dispatched = (entry.depth or 0) - entry.undispatched
    entry.oldest_dispatched_at = oldest
    if oldest is not None:
        entry.oldest_dispatched_age_seconds = (taken_at - oldest).total_seconds()


def _contents(
    transport: Transport,
    conn: Connection,
    present: list[tuple[TableSpec, TableName, TableStatus]],
    error_key: tuple,
    existing: dict,
    report: StatusReport,
) -> None:
    """What two tables hold beyond their figures: the error queue's messages by FailedQ, and the
    subscription table's subscribers per topic and the subscriptions whose queue is gone."""
    dialect, live_bus, profile = transport.dialect, transport.dialect.live_bus, transport.profile
    for spec, _, entry in present:
        if spec.kind is Kind.QUEUE and dialect.table_key(spec.name) == error_key:
            rows = execute(conn, live_bus.failed_queue_counts(spec.name, profile), prepare=live_bus.prepare).fetchall()
            entry.failed_queues = [{"failed_queue": q, "messages": int(n)} for q, n in rows]
        elif spec.kind is Kind.SUBSCRIPTIONS:
            rows = execute(conn, live_bus.topics(spec.name, profile), prepare=live_bus.prepare).fetchall()
            entry.topics = [{"topic": topic, "subscribers": int(n)} for topic, n in rows]
            rows = execute(conn, live_bus.subscriptions(spec.name, profile), prepare=live_bus.prepare).fetchall()
            report.subscriptions = [tuple(row) for row in rows]
            report.orphaned = orphaned_subscriptions(dialect, rows, existing)


@dataclass(frozen=True)
class Flow:
    """Messages that arrived in a queue and left it, per second, between two status reports."""

    in_per_second: float
    out_per_second: float


def flow(previous: StatusReport, current: StatusReport) -> dict[str, Flow]:
    """Each queue's Flow (by address) between two reports taken with high_water: in is the rise of
    the last RowVersion/Seq its sequence gave (None: none given yet, 0), out is in less the rise of
    its depth. A queue missing from either report, or not counted in both, has none."""
    seconds = (current.taken_at - previous.taken_at).total_seconds()
    before = {t.address: t for t in previous.tables if t.kind == Kind.QUEUE.value and not t.missing}
    out: dict[str, Flow] = {}
    if seconds <= 0:
        return out
    for table in current.tables:
        last = before.get(table.address)
        if last is None or table.missing or table.depth is None or last.depth is None:
            continue
        arrived = (table.high_water or 0) - (last.high_water or 0)
        out[table.address] = Flow(arrived / seconds, (arrived - (table.depth - last.depth)) / seconds)
    return out


def _head(entry: TableStatus, head: str | None, taken_at: datetime, known: dict, read: dict) -> None:
    """The queue's head: its TimeSent and age. `known` holds the TimeSent of the heads of the last
    status (a head that has not moved is not read again: ~7 us a head), `read` gets this one's."""
    if head is None:
        return
    sent = known.get(head, known)
    read[head] = sent = wire.time_sent_of(head) if sent is known else sent
    entry.oldest_time_sent = sent
    if sent is not None:
        entry.oldest_age_seconds = round((taken_at - sent).total_seconds(), 3)


def _layout(transport: Transport) -> list[tuple[TableSpec, TableName, tuple, str, str | None]]:
    """(spec, the table as the database holds it, its key, its address as the engine knows it, its
    canonical address where that differs) of every table of the
    blueprint, made once per transport (a repeated status does not make them again)."""
    found = transport.__dict__.get("_status_layout")
    if found is None:
        found = []
        for spec in _blueprint_specs(transport):
            where = _where(transport, spec)
            address, canonical = transport.address_of(where, as_engine_knows=True), transport.address_of(where)
            found.append((spec, where, transport.dialect.table_key(where), address, None if canonical == address else canonical))
        transport.__dict__["_status_layout"] = found
    return found


def _figures(transport: Transport, positions: tuple[int, ...], estimate: bool, empty: frozenset[int]) -> list:
    """The figures statements of the tables at these positions of the layout, made once per
    transport (a repeated status, as --watch runs it, sends the same texts, which the driver and
    server may keep prepared); the last few sets are kept (an exact and an estimating status in
    turn make two)."""
    cache = transport.__dict__.setdefault("_status_statements", {})
    key = (positions, estimate, empty)
    found = cache.pop(key, None)
    if found is None:
        layout = _layout(transport)
        tables = [(layout[p][0].kind, layout[p][1]) for p in positions]
        found = transport.dialect.live_bus.figures(tables, transport.profile, estimate, empty)
        for old in list(cache)[:-3]:  # the least recently used
            cache.pop(old, None)
    cache[key] = found
    return found


class _Spread:
    """The figures statements shared out between the status's connection and `others` more of the
    transport's engine, each opened in a thread at once (while the first reads the table list) and
    running a share there: the server works on the sessions' shares at the same time. A pooled
    connection takes the share it ran last time where it can (remembered in its pool record), so
    in a repeated status its session has those tables' catalog entries loaded and their statements
    prepared. Once its own share is done, the first connection waits at most PATIENCE for the others
    to open, then runs every share none has taken (a connection the pool cannot give, or one late)."""

    SHARE = "sqltransport_status_share"  # the pool record's info: the share this connection ran last
    PATIENCE = 1.0  # seconds

    def __init__(self, transport: Transport, others: int, prepare: bool) -> None:
        self.prepare = prepare
        self.parts = others + 1
        self.lock = threading.Lock()
        self.taken: dict[int, int] = {}  # share -> who runs it (0: the first connection, n: the nth other)
        self.statements: Future = Future()  # every figures statement, once they are known; None: none to run
        self.decided = [threading.Event() for _ in range(others)]  # the nth other has taken its share, or none
        self.pool = ThreadPoolExecutor(others, thread_name_prefix="status") if others else None
        self.done = [self.pool.submit(self._run, transport, n) for n in range(1, self.parts)] if self.pool else []

    def _take(self, who: int, remembered: Any) -> int | None:
        """The share `who` runs next: the one it remembers if free, else the lowest free; None: all taken."""
        with self.lock:
            free = [share for share in range(self.parts) if share not in self.taken]
            if not free:
                return None
            share = remembered if remembered in free else free[0]
            self.taken[share] = who
            return share

    def _run(self, transport: Transport, who: int) -> list:
        try:
            try:
                conn = transport.engine.connect()
            except (DBAPIError, PoolTimeout):  # no connection to spare (max_connections, the pool's size)
                return []
            with conn, conn.begin():
                statements = self.statements.result()
                share = None if statements is None else self._take(who, conn.connection.info.get(self.SHARE))
                self.decided[who - 1].set()
                if share is None:
                    return []
                conn.connection.info[self.SHARE] = share
                return self._execute(conn, statements[share :: self.parts])
        finally:
            self.decided[who - 1].set()

    def _execute(self, conn: Connection, statements: list) -> list:
        return [row for statement in statements for row in execute(conn, statement, prepare=self.prepare).fetchall()]

    def rows(self, conn: Connection, statements: list) -> Iterator[tuple]:
        """Every statement's rows: the first connection's share run here (and handed on while the
        others still run theirs), then the shares no other connection took, then the others'."""
        info = conn.connection.info
        mine = self._take(0, info.get(self.SHARE) if self.done else None)
        if self.done:
            info[self.SHARE] = mine
        self.statements.set_result(statements)
        yield from self._execute(conn, statements[mine :: self.parts])
        deadline = time.monotonic() + self.PATIENCE
        for decided in self.decided:
            decided.wait(max(0.0, deadline - time.monotonic()))
        while (share := self._take(0, None)) is not None:
            yield from self._execute(conn, statements[share :: self.parts])
        for n, done in enumerate(self.done, 1):
            if n in self.taken.values():
                yield from done.result()

    def __enter__(self) -> _Spread:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.statements.done():
            self.statements.set_result(None)  # a status that failed before its statements: nothing to run
        if self.pool is not None:
            self.pool.shutdown(wait=False)  # one still waiting for a connection finds nothing left to run
