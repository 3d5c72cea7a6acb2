"""The Prometheus side of `status`: a StatusReport as metric families, and the exporter that serves
them over HTTP.

`exposition(report)` is what `status --format prometheus` prints; `StatusCollector` is what
`status --serve` registers: a prometheus-client collector holding one connection to the database
and a snapshot of the last report, read again only once `min_interval` has passed since the last
read, however often it is scraped (concurrent scrapes wait for the one read in flight). A read that
fails (the server restarting, the connection's backend killed) is reported as `sqltransport_up 0`
with no table figures, and the connection is opened anew at the next read; a kept connection found
dead is replaced at once, in the same read. `listen` serves `/metrics` and `/healthz`; between two
reads every scrape gets the same bytes, rendered (and gzipped) once per read.

prometheus-client is optional (the `exporter` extra); `client()` imports it or says what to install.
See docs/operations.md, "status --serve".
"""

from __future__ import annotations

import gzip
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .. import errors
from ..util import parse_duration
from .status import DEFAULT_ERROR_QUEUE, status

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from .status import StatusReport
    from .transport import Transport

EXTRA = "exporter"  # pip install 'sqltransport-schema[exporter]'
DEFAULT_MIN_INTERVAL = "5s"

# Every family is a gauge; the table families are labelled TABLE_LABELS, the others as listed.
TABLE_LABELS = ("kind", "address", "schema", "catalog", "table")
METRICS = (
    ("sqltransport_table_depth", "Messages (rows) in the table; the engine's estimate under --estimate."),
    ("sqltransport_table_missing", "1 if the table of the deployed blueprint is missing from the database."),
    ("sqltransport_table_readable", "1 if the login may read the table (0: no figures of it; grants --monitor)."),
    ("sqltransport_queue_oldest_message_age_seconds", "Age of the message at the head of the queue, from its NServiceBus.TimeSent."),
    ("sqltransport_queue_expired_messages", "Expired messages not yet purged."),
    ("sqltransport_delayed_due_messages", "Delayed messages due now."),
    ("sqltransport_delayed_next_due_timestamp_seconds", "When the earliest delayed message falls due (Unix time)."),
    ("sqltransport_error_messages", "Messages of the error queue by their NServiceBus.FailedQ."),
    ("sqltransport_topic_subscribers", "Subscribers of each topic."),
    ("sqltransport_orphaned_subscription", "1 for each subscription whose address names no table (a publish of its topic fails)."),
)
OTHER_LABELS = {
    "sqltransport_error_messages": ("address", "failed_queue"),
    "sqltransport_topic_subscribers": ("address", "topic"),
    "sqltransport_orphaned_subscription": ("address", "endpoint", "topic"),
}
# The exporter's own families (status --serve only): whether its last read worked, and what reading costs.
UP = "sqltransport_up"
READS = "sqltransport_status_reads"  # a counter: exposed as sqltransport_status_reads_total
FAILURES = "sqltransport_status_read_failures"  # a counter: sqltransport_status_read_failures_total
EXPORTER_METRICS = (
    (UP, "1 if the exporter's last read of the database worked; 0 if it failed (no table figures are then served)."),
    (READS, "Reads of the database (one status report each, failed ones included) since the exporter started."),
    (FAILURES, "Reads of the database that failed since the exporter started."),
    ("sqltransport_status_read_duration_seconds", "How long the last read of the database took."),
    ("sqltransport_status_taken_timestamp_seconds", "When the table figures served were read (Unix time)."),
)
COUNTERS = (READS, FAILURES)


def client() -> Any:
    """The prometheus_client module, or Unavailable naming the extra to install."""
    try:
        import prometheus_client
        import prometheus_client.core  # noqa: F401  (the metric families)
        import prometheus_client.exposition  # noqa: F401  (content negotiation)
    except ImportError as missing:
        raise errors.Unavailable(
            f"the Prometheus format needs prometheus-client ({missing}); pip install 'sqltransport-schema[{EXTRA}]'"
        ) from None
    return prometheus_client


def report_families(report: StatusReport) -> list:
    """The report's metric families, in METRICS order, each only if it has samples."""
    core = client().core
    families = {name: core.GaugeMetricFamily(name, text, labels=OTHER_LABELS.get(name, TABLE_LABELS)) for name, text in METRICS}

    def add(name: str, labels: Iterable[str | None], value: float) -> None:
        families[name].add_metric([label or "" for label in labels], value)

    for t in report.tables:
        where = (t.kind, t.address, t.schema, t.catalog, t.name)
        add("sqltransport_table_missing", where, int(t.missing))
        if not t.missing:
            add("sqltransport_table_readable", where, int(t.readable))
        for name, value in (
            ("sqltransport_table_depth", t.depth),
            ("sqltransport_queue_oldest_message_age_seconds", t.oldest_age_seconds),
            ("sqltransport_queue_expired_messages", t.expired if t.kind == "queue" else None),
            ("sqltransport_delayed_due_messages", t.due),
            ("sqltransport_delayed_next_due_timestamp_seconds", None if t.next_due is None else t.next_due.timestamp()),
        ):
            if value is not None:
                add(name, where, value)
        for failed in t.failed_queues or ():
            add("sqltransport_error_messages", (t.address, failed["failed_queue"]), failed["messages"])
        for topic in t.topics or ():
            add("sqltransport_topic_subscribers", (t.address, topic["topic"]), topic["subscribers"])
    for orphan in report.orphaned:
        add("sqltransport_orphaned_subscription", (orphan.address, orphan.endpoint, orphan.topic), 1)
    return [family for family in families.values() if family.samples]


class _Families:
    """A collector of families made already (one report, printed once)."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self) -> Iterator:
        return iter(self.families)


def exposition(report: StatusReport) -> str:
    """The report in the Prometheus text exposition format (0.0.4), through prometheus-client."""
    prometheus_client = client()
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(_Families(report_families(report)))
    return prometheus_client.generate_latest(registry).decode("utf-8")


def parse_min_interval(text: str) -> float:
    """--min-interval as seconds: `5s`, `500ms`, `1m`; 0 reads at every scrape."""
    return parse_duration(text, "--min-interval", zero=True, meaning_of_zero="read at every scrape")


def parse_listen(text: str, option: str = "--serve") -> tuple[str, int]:
    """--serve (or the console's --bind) HOST:PORT (`127.0.0.1:9716`, `[::1]:9716`, `:9716` for every interface; port 0: any free one)."""
    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not port.isdigit() or int(port) > 65535 or "[" in host or "]" in host:
        raise errors.UsageError(f"{option} {text}: give HOST:PORT, e.g. 127.0.0.1:9716, [::1]:9716 or :9716 (every interface)")
    return host or "0.0.0.0", int(port)


class SnapshotCollector:
    """An exporter's collector: the families of its last read, read again only once `min_interval`
    seconds have passed since the last read began, however often it is scraped; its own families
    (UP, READS, ...) at every scrape. A subclass says what a read is (`read`): status's report of one
    database (StatusCollector), a fleet's revisions (fleet status --serve). `log` gets a line when
    reads start failing and when they work again."""

    COMMAND = "status --serve"  # what its log lines and /healthz call it
    READS_WHAT = "the database"

    def __init__(
        self, min_interval: float, *, log: Callable[[str], object] = sys.stderr.write, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_interval, self.log, self.clock = min_interval, log, clock
        self.lock = threading.Lock()
        self.read_at: float | None = None  # clock() when the last read began
        self.families: list = []  # of the last read that worked; [] after a failed one
        self.up = False
        self.problem: str | None = None  # the last read's failure, one line
        self.reads = self.failures = 0
        self.duration = 0.0
        self.taken_at: float | None = None  # Unix time of the figures served
        self.generation = 0  # reads so far: what the rendered bytes were made from
        self.rendering = threading.Lock()
        self.rendered: dict[tuple, bytes] = {}  # (generation, content type, gzip) -> the /metrics body

    def read(self) -> tuple[list, float]:
        """One read: (its metric families, when its figures were taken as Unix time)."""
        raise NotImplementedError

    def close(self) -> None:
        """Let go of what reads keep open."""

    def collect(self) -> Iterator:
        """The prometheus-client collector interface: read if due, then every family."""
        self.refresh()
        return self._families()

    def _families(self) -> Iterator:
        """Every family of the last read, and the exporter's own, without reading."""
        core = client().core
        with self.lock:
            yield from self.families
            values = {
                UP: int(self.up),
                READS: self.reads,
                FAILURES: self.failures,
                "sqltransport_status_read_duration_seconds": self.duration,
                "sqltransport_status_taken_timestamp_seconds": self.taken_at,
            }
        for name, text in EXPORTER_METRICS:
            if values[name] is not None:
                kind = core.CounterMetricFamily if name in COUNTERS else core.GaugeMetricFamily
                yield kind(name, text, value=values[name])

    def refresh(self) -> None:
        """Read the database if `min_interval` has passed since the last read began (else nothing)."""
        with self.lock:
            now = self.clock()
            if self.read_at is not None and now - self.read_at < self.min_interval:
                return
            self.read_at, self.reads = now, self.reads + 1
            started = time.perf_counter()
            try:
                self.families, self.taken_at = self.read()
            except Exception as exc:  # noqa: BLE001 - any failure is a scrape's `up 0`, never the exporter's end
                self._failed(exc)
            else:
                if not self.up and self.problem is not None:
                    self.log(f"{self.COMMAND}: reading {self.READS_WHAT} again\n")
                self.up, self.problem = True, None
            finally:
                self.duration = time.perf_counter() - started
                self.generation += 1

    def exposition(self, accept: str | None, accept_encoding: str | None) -> tuple[str, bool, bytes]:
        """/metrics: (content type, gzipped, body) in the format `accept` asks for (prometheus-client's
        choice: the text format, or OpenMetrics), read first if due; made once per read and format."""
        exposition = client().exposition
        self.refresh()
        encoder, content_type = exposition.choose_encoder(accept)
        compress = exposition.gzip_accepted(accept_encoding)
        with self.rendering:
            key = (self.generation, content_type, compress)
            if key not in self.rendered:
                registry = client().CollectorRegistry(auto_describe=False)
                registry.register(_Snapshot(self))
                body = encoder(registry)
                self.rendered = {k: v for k, v in self.rendered.items() if k[0] == key[0]}
                self.rendered[key] = gzip.compress(body) if compress else body
            return content_type, compress, self.rendered[key]

    def _failed(self, exc: Exception) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        from ..db import failure

        problem = failure(exc) if isinstance(exc, SQLAlchemyError) else f"{type(exc).__name__}: {exc}".splitlines()[0]
        if problem != self.problem:
            self.log(f"{self.COMMAND}: reading {self.READS_WHAT} failed: {problem}\n")
        self.up, self.problem, self.families, self.taken_at = False, problem, [], None
        self.failures += 1

    def health(self) -> str:
        """/healthz's text: the exporter serves; whether its last read worked."""
        with self.lock:
            if self.read_at is None:
                return f"ok: serving; {self.READS_WHAT} is read at the first scrape\n"
            return (
                f"ok: serving; last read of {self.READS_WHAT} worked\n" if self.up else f"ok: serving; last read failed: {self.problem}\n"
            )


class StatusCollector(SnapshotCollector):
    """status --serve's collector: the last report's families, read through one kept connection."""

    def __init__(
        self,
        transport: Transport,
        min_interval: float,
        *,
        estimate: bool = False,
        error_queue: str = DEFAULT_ERROR_QUEUE,
        log: Callable[[str], object] = sys.stderr.write,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(min_interval, log=log, clock=clock)
        self.transport, self.estimate, self.error_queue = transport, estimate, error_queue
        self.connection: Connection | None = None

    def read(self) -> tuple[list, float]:
        report = self._read()
        return report_families(report), report.taken_at.timestamp()

    def _read(self) -> StatusReport:
        """One status report on the kept connection (opened if there is none). A kept one that fails
        (most likely dead: the server restarted, its backend was killed) is replaced and the report
        read again, once. A read the login is refused (a table it may not read) is read again as a
        one-off status reads it (each table probed on its own), which reports those tables unreadable
        and leaves them out of the later reads on the kept connection (as status --watch does). A read
        that ran out its read timeout (a held lock) is not read again: the connection was alive, and a
        scrape waits the timeout once."""
        from ..db import read_timeout_of

        bound = read_timeout_of(self.transport.engine)
        while True:
            started = time.monotonic()
            fresh = self.connection is None
            connection = self.connection = self.transport.engine.connect() if self.connection is None else self.connection
            try:
                with connection.begin():
                    return status(self.transport, estimate=self.estimate, error_queue=self.error_queue, connection=connection)
            except Exception as exc:
                self.close()
                if self.transport.dialect.permission_denied(exc):
                    return self._probed()
                if fresh or (bound is not None and time.monotonic() - started >= bound * 0.9):
                    raise
            except BaseException:
                self.close()
                raise

    def _probed(self) -> StatusReport:
        """status() on connections of its own (it probes the tables when refused), then only the one
        kept connection again: the others it opened are closed."""
        try:
            return status(self.transport, estimate=self.estimate, error_queue=self.error_queue)
        finally:
            self.transport.engine.dispose()

    def close(self) -> None:
        """Let go of the kept connection (a dead one is discarded, not returned to the pool)."""
        connection, self.connection = self.connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a connection whose server went away
                connection.invalidate()


class _Snapshot:
    """A collector's families as they are, for rendering them (no read)."""

    def __init__(self, collector: SnapshotCollector) -> None:
        self.collector = collector

    def collect(self) -> Iterator:
        return self.collector._families()


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in flight does not hold up the stop


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        """Scrapes are not logged (one every few seconds, forever)."""


def application(collector: SnapshotCollector) -> Callable:
    """The WSGI application: GET /metrics (the content negotiation and gzip of prometheus-client),
    /healthz, and a 404 for anything else."""

    def serve(environ: dict, start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        headers = [("Content-Type", "text/plain; charset=utf-8")]
        if path == "/metrics" and environ.get("REQUEST_METHOD") == "GET":
            content_type, compressed, data = collector.exposition(environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING"))
            code, headers = "200 OK", [("Content-Type", content_type), *([("Content-Encoding", "gzip")] if compressed else [])]
        elif path == "/metrics":
            code, data = "405 Method Not Allowed", b"/metrics answers GET\n"
            headers.append(("Allow", "GET"))
        elif path == "/healthz":
            code, data = "200 OK", collector.health().encode("utf-8")
        else:
            code, data = "404 Not Found", b"not found: the exporter serves /metrics and /healthz\n"
        start_response(code, [*headers, ("Content-Length", str(len(data)))])
        return [data]

    return serve


def listen(host: str, port: int, collector: SnapshotCollector) -> WSGIServer:
    """A server bound to host:port (not serving yet: `serve_forever` in a thread); Unavailable when
    the address cannot be bound (in use, not this machine's)."""
    client()
    server_class = _Server6 if ":" in host else _Server
    try:
        return make_server(host, port, application(collector), server_class=server_class, handler_class=_Quiet)
    except OSError as exc:
        raise errors.Unavailable(f"--serve {host}:{port}: cannot listen there ({exc.strerror or exc})") from None
