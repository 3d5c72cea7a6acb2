"""An exporter's serving loop (status --serve, fleet status --serve): the collector's /metrics and
/healthz on HOST:PORT until SIGTERM or Ctrl-C."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from .output import EXIT_OK

if TYPE_CHECKING:
    from ..runtime.exporter import SnapshotCollector

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what stops an exporter (Ctrl-C sends SIGINT)


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
