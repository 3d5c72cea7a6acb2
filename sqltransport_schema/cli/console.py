"""console: the operator console in a browser (sqltransport_schema/console/), served by uvicorn."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .. import errors
from ..defaults import DEFAULT_KEEP_JOBS, DEFAULT_RETRY_BATCH
from .live_bus import _transport
from .options import add_command, add_options, load_config, older_than, read_timeout
from .output import EXIT_OK


def _retention(args: argparse.Namespace, console: Any) -> float | None:
    """--archive-retention in seconds (None: not given), refused where there is no archive or action log."""
    if args.archive_retention is None:
        return None
    if console.queue.archived.table is None or console.actions.log_table is None:
        raise errors.UsageError(
            "--archive-retention: the deployed topology declares no archive of the error queue or no action log"
            " (`archive:` on its entry, top-level `action_log:`; docs/console.md)"
        )
    retention = args.archive_retention.total_seconds()
    if retention <= 0:
        raise errors.UsageError("--archive-retention: give an age above 0 (e.g. 30d)")
    return retention


def _listening(host: str, port: int) -> Any:
    """The console's socket, bound and listening (connections wait in the backlog until uvicorn accepts them)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise errors.UsageError(f"--bind {host}:{port}: {exc.strerror}; choose another port") from None
    sock.listen(128)
    return sock


def cmd_console(args: argparse.Namespace) -> int:
    """the operator console in a browser: status, failed messages grouped, retried, the action log
    Serve the console on --bind (127.0.0.1:8765 by default) until SIGTERM or Ctrl-C: the overview
    (status's figures, the migration state, the topology drawn), the error queue grouped by exception,
    failed queue, message type or endpoint, each message's headers and body, retries back to each
    message's NServiceBus.FailedQ (not with --read-only), an action log in the database, and the same
    as JSON under /api. A bind other than loopback needs a token (SQLTRANSPORT_CONSOLE_TOKEN, or named
    operators from --tokens-file or SQLTRANSPORT_CONSOLE_TOKENS); a Host header other than 127.0.0.1,
    localhost, the bind address and each --allowed-host is refused (the console extra; docs/console.md).
    Each connection, statement and lock wait is bounded by --read-timeout (10 s by default): a page whose
    read runs out answers 503 with the seconds waited, and the other pages are served.
    """
    import signal
    import threading

    from ..console import require
    from ..console.security import DEFAULT_BIND, Access
    from ..db import answered_within
    from ..runtime.exporter import parse_listen

    host, port = parse_listen(args.bind or DEFAULT_BIND, "--bind")
    if args.keep_jobs < 1:
        raise errors.UsageError(f"--keep-jobs {args.keep_jobs}: give 1 or more (the action log keeps every action)")
    access = Access.from_environment(host, args.read_only, tokens_file=args.tokens_file, allowed_hosts=args.allowed_host or ())
    uvicorn = require()
    from ..console.app import Console, ConsoleSettings, make_app

    config = load_config(args.config) if Path(args.config).is_file() else None
    bound = read_timeout(args)
    with answered_within(bound):  # the deployed blueprint and the login's rights, read before serving
        transport = _transport(args, readers=False, bounded=True)
    try:
        if args.batch_size < 1:
            raise errors.UsageError(f"--batch-size {args.batch_size}: give 1 or more")
        if args.sample_interval < 1:
            raise errors.UsageError(f"--sample-interval {args.sample_interval:g}: give 1 second or more")
        with answered_within(bound):
            console = Console(
                transport,
                access,
                config,
                args.error_queue,
                draw=_draw,
                settings=ConsoleSettings(args.batch_size, args.sample_interval, args.keep_jobs),
            )
        retention = _retention(args, console)
        sock = _listening(host, port)
        server = uvicorn.Server(uvicorn.Config(make_app(console), log_level="warning", access_log=False, lifespan="off"))
        stop = threading.Event()
        sampler = threading.Thread(target=console.sampler, args=(args.sample_interval, stop), name="console-sampler", daemon=True)
        sampler.start()
        if retention is not None:
            purger = threading.Thread(target=console.retention, args=(retention, stop), name="console-retention", daemon=True)
            purger.start()
        shown = f"[{host}]" if ":" in host else host
        database = console.database
        mode = "read-only" if console.read_only else "operator actions allowed"
        sys.stderr.write(f"console: serving http://{shown}:{sock.getsockname()[1]}/ for {database} ({mode}); SIGTERM or Ctrl-C stops\n")
        sys.stderr.flush()
        previous = signal.getsignal(signal.SIGTERM)
        try:
            server.run(sockets=[sock])  # uvicorn handles SIGTERM and SIGINT itself: a clean stop
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop.set()
            sock.close()
    finally:
        transport.engine.dispose()
    sys.stderr.write("console: stopped\n")
    return EXIT_OK


def _draw(report: object) -> bytes:
    """graph's drawing of a live database: status's report with its notes, as SVG."""
    from .. import pictures
    from ..pictures.sources import from_status
    from .live_bus import status_notes

    return pictures.render(from_status(report, status_notes(report)), "svg")  # type: ignore[arg-type]


def add_console(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "console", cmd_console, "sqltransport-schema console --url postgresql://postgres@127.0.0.1/app --read-only")
    add_options(p, "url")
    p.add_argument("--bind", metavar="HOST:PORT", help="where to listen (default: 127.0.0.1:8765; port 0: any free one)")
    p.add_argument("--read-only", action="store_true", help="views only: no retry, whatever the token")
    p.add_argument(
        "--tokens-file",
        metavar="PATH",
        help="named operators, one a line: NAME ROLE TOKEN (ROLE operator or read-only); the action log says who"
        " (else SQLTRANSPORT_CONSOLE_TOKENS, else SQLTRANSPORT_CONSOLE_TOKEN and SQLTRANSPORT_CONSOLE_READ_TOKEN)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST",
        help="a name the Host header may give besides 127.0.0.1, localhost and the bind address (repeatable;"
        " any other Host is refused: DNS rebinding)",
    )
    p.add_argument(
        "--sample-interval",
        type=float,
        default=60,
        metavar="SECONDS",
        help="seconds between the overview's depth samples, kept for the last hour (default: %(default)s)",
    )
    p.add_argument(
        "--archive-retention",
        type=older_than,
        metavar="DURATION",
        help="purge the archived messages older than this (30d, 12h, 90m) at start and then periodically (a tenth of it,"
        " at most hourly), each purge that deletes any in the action log (default: kept until purged by hand)",
    )
    p.add_argument(
        "--keep-jobs",
        type=int,
        default=DEFAULT_KEEP_JOBS,
        metavar="N",
        help="finished jobs (retry, archive, restore, purge) kept in memory for their pages, the oldest ended dropped first;"
        " running ones are always kept, the action log keeps every action (default: %(default)s)",
    )
    add_options(
        p,
        "batch_size",
        batch_size={"default": DEFAULT_RETRY_BATCH, "note": "a message each, of a retry, archive, restore or purge"},
    )
    add_options(p, "error_queue", "config", "read_timeout")


PARSERS = {"console": add_console}
