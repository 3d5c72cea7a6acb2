"""Commands that operate a live bus: status (what waits in every table), retry (failed messages back
to their queues), outbox cleanup (dispatched outbox rows deleted). The work is in runtime/status.py
and runtime/outbox.py; this parses, prints and repeats (--watch)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .. import errors
from ..defaults import DEFAULT_CLEANUP_BATCH, DEFAULT_RETRY_BATCH
from ..urls import CONFIGURED, DEFAULT, ENVIRONMENT, EXPLICIT, URL_VARIABLE, chosen_url, display_url
from . import github
from .options import add_command, add_options, add_selection, formats, load_config, read_timeout
from .output import EXIT_CHANGES, EXIT_OK, emit

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ..errorqueue import RetryReport
    from ..runtime.status import Flow, StatusReport, TableStatus
    from ..runtime.transport import Transport

PROGRESS_INTERVAL = 1.0  # seconds between progress lines of a long retry
CLEAR = "\x1b[H\x1b[2J"  # cursor home, then clear the screen: status --watch redraws in place on a terminal


def _transport(args: argparse.Namespace, readers: bool, bounded: bool = False) -> Transport:
    """The deployed transport of the database `_engine` reaches."""
    from ..runtime.transport import Transport

    return Transport.from_database(_engine(args, readers, bounded), args.config, verify=False)


def _engine(args: argparse.Namespace, readers: bool, bounded: bool = False) -> Engine:
    """The database of --url (else SQLTRANSPORT_URL, else alembic.ini's sqlalchemy.url, else
    ./sqltransport.db); a SQLite file that does not exist is refused, never created empty. A reader's
    connection, statements and lock waits are bounded by --read-timeout (a writer's too, `bounded`:
    the console's)."""
    from ..db import make_engine

    config = load_config(args.config) if Path(args.config).is_file() else None
    url, origin = chosen_url(args.url, config)
    named_by, bound = _named_by(origin, args.config, config is not None), read_timeout(args) if readers or bounded else None
    return make_engine(url, sqlite_writers=not readers, must_exist=True, named_by=named_by, fix=_give_url(), read_timeout=bound)


def _named_by(origin: str, config: str, config_found: bool) -> str:
    """Where the URL of a database that is not there came from, as a `_transport` error says it."""
    no_config = f"no sqlalchemy.url in {config}" if config_found else f"no {config} here"
    return {
        EXPLICIT: "given by --url",
        ENVIRONMENT: f"named by {URL_VARIABLE}",
        CONFIGURED: f"sqlalchemy.url in {config}",
        DEFAULT: f"the default: no --url, no {URL_VARIABLE}, {no_config}",
    }[origin]


def _give_url() -> str:
    return f"pass the database's URL with --url URL (or set {URL_VARIABLE}), or run from the project folder"


# -------------------------------------------------------------------------------------------- status
def cmd_status(args: argparse.Namespace) -> int:
    """depth, oldest message, expired, due and failed messages of every table of the deployed topology

    Print what waits in every table of the blueprint the database is stamped with: each queue's
    depth, the age of its oldest message and its expired messages, the due messages of each delayed
    table, the error queue's messages by the queue they failed in, the subscribers of each topic.
    Exit 1 when a table of the blueprint is missing from the database, or when the login may not
    read one (a partial report: the others are reported in full). --watch repeats it
    (docs/operations.md). On SQL Server it needs 2016 or later (JSON_VALUE and ISJSON read the
    failed messages' headers; docs/sql-server-versions.md), and says so on an older server. --fleet [FILE]: each target's saga and
    outbox tables instead, target after target (docs/tenants.md); exit 1 when a target could not be read.
    A warning on stderr says when topology.yaml holds changes not compiled yet (and what to run).
    """
    from ..db import answered_within
    from ..runtime.status import status

    if args.fleet is not None:
        return _status_fleet(args)
    if args.watch is not None and args.watch <= 0:
        raise errors.UsageError(f"--watch takes a positive number of seconds, not {args.watch}")
    if args.watch_count is not None and (args.watch is None or args.watch_count <= 0):
        raise errors.UsageError("--watch-count takes a positive number of reports, with --watch SECONDS")
    listen = _serve_options(args)
    with answered_within(read_timeout(args)):
        transport = _transport(args, readers=True)
    _warn_uncompiled(args)
    try:
        if listen is not None:
            return serve(args, transport, *listen)
        if args.watch is not None:
            watch(args, transport, sys.stdout)
            return EXIT_OK
        with answered_within(read_timeout(args)):
            report = status(transport, estimate=args.estimate, error_queue=args.error_queue)
        _print_status(args, report, sys.stdout)
        return EXIT_CHANGES if report.missing or report.unreadable else EXIT_OK
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        transport.engine.dispose()


def _warn_uncompiled(args: argparse.Namespace) -> None:
    """A warning on stderr when topology.yaml differs from the migrations' head (with an alembic.ini to read
    them from): the report is the deployed blueprint's, which does not have those changes."""
    from ..migrate.compile import uncompiled

    if Path(args.config).is_file():
        notice = uncompiled(load_config(args.config))
        if notice is not None:
            notice.warn()


def _status_fleet(args: argparse.Namespace) -> int:
    """status --fleet: each target's saga and outbox tables, target after target (docs/tenants.md)."""
    from ..fleet import per_target
    from .fleet import bounded_targets

    _fleet_not_url(args)
    if args.format not in ("text", "json") or args.watch is not None or args.serve is not None:
        raise errors.UsageError(
            "status --fleet prints text or --format json, once: drop --watch, --serve, --format markdown|github|prometheus"
        )

    def done(row: per_target.TargetRow) -> None:
        sys.stderr.write(f"status: {row.target.name}: {'failed' if row.error else 'read'}\n")
        sys.stderr.flush()

    chosen, bound = bounded_targets(args)
    rows = per_target.status(chosen, config_file=args.config, done=done, read_timeout=bound)
    emit(args, per_target.to_json(rows, "status"), per_target.status_lines(rows))
    return EXIT_CHANGES if any(row.error for row in rows) else EXIT_OK


def _serve_options(args: argparse.Namespace) -> tuple[str, int, float] | None:
    """--serve's (host, port, --min-interval in seconds), None without --serve (serving.serve_options),
    --watch refused beside it."""
    from .serving import serve_options

    if args.serve is not None and args.watch is not None:
        raise errors.UsageError("--serve and --watch do not go together: Prometheus scrapes --serve as often as it likes")
    return serve_options(args)


def serve(args: argparse.Namespace, transport: Transport, host: str, port: int, min_interval: float) -> int:
    """status --serve: /metrics and /healthz until SIGTERM or Ctrl-C (exit 0 either way)."""
    from ..db import given_url
    from ..runtime.exporter import StatusCollector
    from .serving import serve_collector

    collector = StatusCollector(transport, min_interval, estimate=args.estimate, error_queue=args.error_queue)
    return serve_collector(collector, host, port, display_url(given_url(transport.engine)))


def watch(args: argparse.Namespace, transport: Transport, stream: TextIO) -> None:
    """A report every --watch seconds (--watch-count of them, else until interrupted), each queue's
    messages in and out per second since the last beside it: on a terminal each report redraws the
    screen, piped each is appended."""
    from ..runtime.status import flow, status

    redraw = stream.isatty()
    previous, shown = None, 0
    while True:
        report = status(transport, estimate=args.estimate, error_queue=args.error_queue, high_water=True)
        if redraw:
            stream.write(CLEAR)
        _print_status(args, report, stream, flow(previous, report) if previous is not None else {})
        stream.flush()
        shown += 1
        if args.watch_count is not None and shown >= args.watch_count:
            return
        previous = report
        time.sleep(args.watch)


def _print_status(args: argparse.Namespace, report: StatusReport, stream: TextIO, rates: dict[str, Flow] | None = None) -> None:
    """The report in --format; `rates` (under --watch, {} at the first report) adds messages/s in
    and out to the text and JSON forms."""
    if args.format == "prometheus":
        from ..runtime.exporter import exposition

        stream.write(exposition(report))
    elif args.format == "markdown":
        stream.write(markdown(report))
    elif args.format == github.FORMAT:
        title = "sqltransport-schema status: missing table"
        found = [github.Annotation(f"{table.address} is missing from the database", title=title) for table in report.missing]
        github.report(found, status_lines(report, rates), markdown(report), stream)
    else:
        payload = report.to_json()
        if rates:
            for table in payload["tables"]:
                if table["address"] in rates and table["kind"] == "queue":
                    rate = rates[table["address"]]
                    table.update(in_per_second=round(rate.in_per_second, 3), out_per_second=round(rate.out_per_second, 3))
        emit(args, payload, status_lines(report, rates), stream)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _details(table: TableStatus) -> str:
    if table.missing:
        return "missing from the database"
    if not table.readable:
        return UNREADABLE
    parts = []
    if table.kind == "queue" and table.expired:
        parts.append(f"{table.expired} expired")
    if table.kind == "delayed":
        parts.append(f"{table.due} due")
        if table.next_due is not None:
            parts.append(f"next due {table.next_due.isoformat(timespec='seconds')}")
    if table.kind == "outbox" and table.undispatched is not None:
        parts.append(f"{table.undispatched} not dispatched, {table.dispatched} dispatched awaiting cleanup")
        if table.oldest_dispatched_age_seconds is not None:
            parts.append(f"oldest dispatched {_age(table.oldest_dispatched_age_seconds)} ago")
    for failed in table.failed_queues or ():
        parts.append(f"{failed['messages']} from {failed['failed_queue'] or '(no FailedQ)'}")
    for topic in table.topics or ():
        parts.append(f"{topic['topic']}: {topic['subscribers']}")
    return ", ".join(parts)


UNREADABLE = "not readable by this login"


def _rows(report: StatusReport, rates: dict[str, Flow] | None = None) -> list[tuple[str, ...]]:
    """A row of cells per table, as HEADINGS (RATE_HEADINGS after DEPTH when `rates` is given)."""
    rows = []
    for t in report.tables:
        depth = "-" if t.depth is None else ("~" if t.estimated else "") + str(t.depth)
        flows: tuple[str, ...] = ()
        if rates is not None:
            rate = rates.get(t.address) if t.kind == "queue" else None
            flows = ("", "") if t.kind != "queue" else ("-", "-") if rate is None else _per_second(rate)
        rows.append((t.kind, t.address, depth, *flows, _age(t.oldest_age_seconds) if t.kind == "queue" else "", _details(t)))
    return rows


def _per_second(rate: Flow) -> tuple[str, str]:
    return f"{rate.in_per_second:.1f}", f"{rate.out_per_second:.1f}"


HEADINGS = ("KIND", "ADDRESS", "DEPTH", "OLDEST", "DETAILS")
RATE_HEADINGS = ("IN/S", "OUT/S")  # status --watch: messages in and out per second since the last report
LEFT = ("KIND", "ADDRESS")  # the other columns but the last are numbers, right-aligned


def status_lines(report: StatusReport, rates: dict[str, Flow] | None = None) -> list[str]:
    headings = HEADINGS if rates is None else (*HEADINGS[:3], *RATE_HEADINGS, *HEADINGS[3:])
    rows = [headings, *_rows(report, rates)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(headings) - 1)]
    taken_at = report.taken_at.isoformat(timespec="seconds")
    lines = [f"{report.database} ({report.engine}, transport {report.transport_version}) at {taken_at}"]
    for row in rows:
        cells = [cell.ljust(w) if h in LEFT else cell.rjust(w) for h, cell, w in zip(headings, row, widths)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    if report.missing:
        lines.append(f"{len(report.missing)} table(s) of the deployed blueprint are missing from the database")
    if report.unreadable:
        lines.append(f"{len(report.unreadable)} table(s) are {UNREADABLE}: a partial report (sqltransport-schema grants --monitor)")
    if report.orphaned:
        from ..runtime.status import UNSUBSCRIBE_HINT

        lines.append(f"{len(report.orphaned)} subscription(s) name no table (publishing their topics fails); {UNSUBSCRIBE_HINT}:")
        lines += [f"  {orphan.describe()}" for orphan in report.orphaned]
    return lines


def markdown(report: StatusReport) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|") or " "

    lines = [
        f"### sqltransport-schema status: {report.engine}, {report.taken_at.isoformat(timespec='seconds')}",
        "",
        f"Database `{report.database}`, transport {report.transport_version}.",
        "",
        "| " + " | ".join(h.capitalize() for h in HEADINGS) + " |",
        "|---|---|---:|---:|---|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in _rows(report)]
    if report.orphaned:
        from ..runtime.status import UNSUBSCRIBE_HINT

        lines += ["", f"Subscriptions naming no table (publishing their topics fails); {UNSUBSCRIBE_HINT}:", ""]
        lines += ["| Address | Endpoint | Topic | Problem |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(cell(c) for c in (o.address, o.endpoint, o.topic, o.problem)) + " |" for o in report.orphaned]
    from ..pictures import mermaid_block
    from ..pictures.sources import MARKDOWN_TABLES, from_status

    return "\n".join(lines) + "\n\n" + mermaid_block(from_status(report, status_notes(report), limit=MARKDOWN_TABLES))


def status_notes(report: StatusReport) -> dict[str, str]:
    """What a picture of the report writes under each table, by address: its depth, the age of a
    queue's oldest message and the details the text form gives (topics are the picture's edges)."""
    notes = {}
    for table, (kind, address, depth, oldest, details) in zip(report.tables, _rows(report)):
        if table.missing:
            continue  # the picture marks it
        parts = [f"depth {depth}"] if depth != "-" else []
        parts += [f"oldest {oldest}"] if oldest not in ("", "-") else []
        parts += [details] if details and kind != "subscriptions" else []
        notes[address] = ", ".join(parts)
    return notes


# --------------------------------------------------------------------------------------------- retry
def cmd_retry(args: argparse.Namespace) -> int:
    """move failed messages from the error queue back to the queue each failed in (NServiceBus.FailedQ)

    Move failed messages from the error queue back to the queue each failed in (its
    NServiceBus.FailedQ header), in batches of one transaction each, so a message is never lost nor
    sent twice. Messages whose queue cannot be told or no longer exists stay in place and are
    listed; exit 1 when some stay. --to-queue ADDRESS sends every chosen message to that queue instead
    (a queue of the deployed topology, not the error queue; refused before anything moves).
    """
    from ..db import answered_within
    from ..errorqueue import ErrorQueue, Selection

    transport = _transport(args, readers=False, bounded=True)
    last = [time.monotonic()]

    def progress(report: RetryReport) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_INTERVAL:
            last[0] = now
            verb = "would move" if report.dry_run else "moved"
            sys.stderr.write(f"retry: {report.scanned} read, {verb} {report.moved}, {report.left_count} left in place\n")
            sys.stderr.flush()

    try:
        chosen = Selection.chosen(args.all, args.failed_queue, args.message_id or ())
        with answered_within(read_timeout(args)):
            queue = ErrorQueue(transport, args.error_queue, args.batch_size)
            report = queue.retry(chosen, dry_run=args.dry_run, to_queue=args.to_queue, progress=progress)
    finally:
        transport.engine.dispose()
    emit(args, report.to_json(), retry_lines(report))
    return EXIT_CHANGES if report.left or report.not_found else EXIT_OK


def retry_lines(report: RetryReport) -> list[str]:
    verb = "would move" if report.dry_run else "moved"
    lines = [f"{verb} {report.moved} message(s) from {report.error_queue} in {report.batches} batch(es)"]
    lines += [f"  {n} to {address}" for address, n in sorted(report.by_queue.items())]
    for (failed_q, why), n in sorted(report.left.items(), key=str):
        lines.append(f"left in place: {n} message(s), FailedQ {failed_q or '-'}: {why}")
    for message_id in report.not_found:
        lines.append(f"not in {report.error_queue}: message {message_id}")
    return lines


# -------------------------------------------------------------------------------------------- outbox
def cmd_outbox_cleanup(args: argparse.Namespace) -> int:
    """delete outbox rows dispatched longer ago than --older-than, in batches

    Delete the rows of every outbox table of the deployed topology that were dispatched more than
    --older-than ago (e.g. 90m, 12h, 7d), --batch-size rows per transaction until a batch comes back
    short, as SQL persistence's outbox cleanup does; rows not dispatched yet are never deleted. A
    progress line per batch on stderr, the summary on stdout (docs/outbox.md). Works on every engine
    that holds outbox tables (MySQL/MariaDB too). --fleet [FILE]: each target of the fleet file in
    turn (docs/tenants.md); exit 1 when a target failed.
    """
    from ..db import answered_within
    from ..runtime.outbox import cleanup

    if args.fleet is not None:
        return _cleanup_fleet(args)
    engine = _engine(args, readers=False, bounded=True)

    def progress(table: str, deleted: int, batches: int) -> None:
        sys.stderr.write(f"outbox cleanup: {table}: {deleted} deleted in {batches} batch(es)\n")
        sys.stderr.flush()

    try:
        with answered_within(read_timeout(args)):
            report = cleanup(engine, args.older_than, batch_size=args.batch_size, config_file=args.config, progress=progress)
    finally:
        engine.dispose()
    cutoff = report.cutoff.isoformat(timespec="seconds")
    lines = [f"deleted {report.total} outbox row(s) dispatched before {cutoff} in {sum(report.batches.values())} batch(es)"]
    lines += [f"  {n} from {table}" for table, n in report.deleted.items()]
    emit(args, report.to_json(), lines)
    return EXIT_OK


def _cleanup_fleet(args: argparse.Namespace) -> int:
    """outbox cleanup --fleet: each target's outbox tables in turn, a progress line per batch naming the target."""
    from ..fleet import per_target
    from .fleet import bounded_targets

    _fleet_not_url(args)

    def progress(target: Any, table: str, deleted: int, batches: int) -> None:
        sys.stderr.write(f"outbox cleanup: {target.name}: {table}: {deleted} deleted in {batches} batch(es)\n")
        sys.stderr.flush()

    chosen, bound = bounded_targets(args)
    rows = per_target.cleanup(
        chosen,
        args.older_than,
        batch_size=args.batch_size,
        config_file=args.config,
        progress=progress,
        parallel=max(args.parallel or 1, 1),
        read_timeout=bound,
    )
    emit(args, per_target.to_json(rows, "outbox cleanup"), per_target.cleanup_lines(rows))
    return EXIT_CHANGES if any(row.error for row in rows) else EXIT_OK


def _fleet_not_url(args: argparse.Namespace) -> None:
    if args.url is not None:
        raise errors.UsageError("--url and --fleet: the fleet file names the databases; give one or the other")


# ------------------------------------------------------------------------------------------ parsers
# --fleet [FILE] on a one-database command: each target of the fleet file in turn (the file optional)
EACH_TARGET = {"note": "each of its targets in turn (docs/tenants.md)"}


def add_status(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "status", cmd_status, "sqltransport-schema status --url postgresql://postgres@127.0.0.1/app --format prometheus")
    add_options(p, "url")
    add_options(p, "format", format=formats("status"))
    p.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        help="print again every SECONDS until interrupted, with each queue's messages/s in and out (a terminal redraws in place)",
    )
    add_options(p, "serve", "min_interval")
    p.add_argument("--watch-count", type=int, metavar="N", help="with --watch: stop after N reports (default: until interrupted)")
    p.add_argument(
        "--estimate", action="store_true", help="queue depths from the engine's statistics instead of counting (very large tables)"
    )
    add_options(p, "error_queue", "config", "read_timeout")
    add_options(p, "fleet", fleet=EACH_TARGET)


def add_retry(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "retry", cmd_retry, "sqltransport-schema retry --failed-queue Sales --dry-run")
    add_selection(p, "all", "failed_queue", "message_id", message_id={"note": "NServiceBus.MessageId, or the row's Id"})
    p.add_argument("--to-queue", metavar="ADDRESS", help="send every chosen message to this queue instead of its NServiceBus.FailedQ")
    add_options(p, "dry_run")
    add_options(p, "batch_size", batch_size={"default": DEFAULT_RETRY_BATCH, "note": "a message each"})
    add_options(p, "format", "config", "read_timeout")


def add_outbox(sub: argparse._SubParsersAction) -> None:
    """the outbox tables of a live database: cleanup of dispatched rows

    Commands on the outbox tables of the deployed topology (docs/outbox.md): `cleanup` deletes the
    rows dispatched longer ago than an age, in batches.
    """
    group = add_command(sub, "outbox", add_outbox, "sqltransport-schema outbox cleanup --older-than 7d", group=True)
    osub = group.add_subparsers(dest="outbox_command", required=True)
    p = add_command(osub, "cleanup", cmd_outbox_cleanup, "sqltransport-schema outbox cleanup --older-than 7d --batch-size 5000")
    add_options(p, "older_than", older_than={"note": "dispatched outbox rows"})
    add_options(p, "url")
    add_options(p, "batch_size", batch_size={"default": DEFAULT_CLEANUP_BATCH})
    add_options(p, "format", "config", "read_timeout")
    add_options(p, "fleet", fleet=EACH_TARGET)
    fleet = p.add_argument_group("with --fleet")
    add_options(fleet, "only", "exclude", "stage", "parallel", parallel={"shown": "default: 1"})


PARSERS = {"status": add_status, "retry": add_retry, "outbox": add_outbox}
