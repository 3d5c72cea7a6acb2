"""An exporter's options and serving loop (status --serve, fleet status --serve): the collector's
/metrics and /healthz on HOST:PORT until SIGTERM or Ctrl-C."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from .. import errors
from .output import EXIT_OK

if TYPE_CHECKING:
    import argparse

    from ..runtime.exporter import SnapshotCollector

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what stops an exporter (Ctrl-C sends SIGINT)


def serve_options(args: argparse.Namespace) -> tuple[str, int, float] | None:
    """--serve's (host, port, --min-interval in seconds), None without --serve; checked before
    anything is read (and prometheus-client is there)."""
    from ..runtime.exporter import DEFAULT_MIN_INTERVAL, client, parse_listen, parse_min_interval

    if args.serve is None:
        if args.min_interval is not None:
            raise errors.UsageError("--min-interval goes with --serve HOST:PORT")
        return None
    if args.format != "text":
        raise errors.UsageError(f"--serve answers in the Prometheus format itself; leave out --format {args.format}")
    host, port = parse_listen(args.serve)
    interval = parse_min_interval(args.min_interval or DEFAULT_MIN_INTERVAL)
    client()
    return host, port, interval


def serve_collector(collector: SnapshotCollector, host: str, port: int, what: str) -> int:
    """An exporter's /metrics and /healthz (status --serve, fleet status --serve) until SIGTERM or
    Ctrl-C (exit 0 either way); `what` names what it reads."""
    from ..runtime.exporter import listen

    server = listen(host, port, collector)
    # SIGINT is handled here too, not left to KeyboardInterrupt: started as a shell's background job the
    # process inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler (Ctrl-C or
    # `kill -INT` did nothing). The handler only records the signal: it takes no lock (an Event's set()
    # could wait on the lock its own thread holds) and raises nothing in the middle of other code.
    stopping: list[int] = []
    previous = {number: signal.signal(number, lambda number, _frame: stopping.append(number)) for number in STOP_SIGNALS}
    worker = threading.Thread(target=server.serve_forever, name="status-serve", daemon=True)
    worker.start()
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(
        f"{collector.COMMAND}: serving http://{shown}:{server.server_port}/metrics and /healthz for {what}, "
        f"reading {collector.READS_WHAT} at most every {collector.min_interval:g}s; SIGTERM or Ctrl-C stops\n"
    )
    sys.stderr.flush()
    try:
        while not stopping:
            time.sleep(0.2)  # a signal's handler runs during the sleep; the loop sees it within 0.2 s
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        server.shutdown()
        server.server_close()
        worker.join(5)
        collector.close()
    sys.stderr.write(f"{collector.COMMAND}: stopped\n")
    return EXIT_OK
