"""What a minute of Prometheus scrapes of `status --serve` costs a 1,000-queue PostgreSQL database,
and how long a scrape takes next to a direct status read.

A fresh database gets N queues (plus error, audit and the subscription table) through `alembic
upgrade head`, M messages each (status_scale.py's set-up). Then, side by side in one run:

- scrape:  `sqltransport-schema status --serve 127.0.0.1:0 --min-interval I` in a subprocess, as a
           user runs it, scraped over HTTP every --interval seconds for --seconds: each scrape's
           latency (the whole /metrics body), apart for the scrapes that made the exporter read the
           database (its sqltransport_status_reads_total rose) and those answered from the snapshot.
- reads:   what those scrapes cost the database, counted twice: the exporter's own
           sqltransport_status_reads_total, and on the server's side the scans of the transport's
           tables PostgreSQL counted (pg_stat_user_tables seq_scan + idx_scan, read once the
           exporter has stopped and its session's statistics are flushed) divided by the scans of
           one status read (the direct reads below, counted the same way). Not pg_stat_database's
           transactions: autovacuum's visits to the database count there too. Bound: seconds /
           min-interval + 1 (reads at every scrape with --min-interval 0).
- direct:  status() in-process on a kept connection (what one exporter read is), and a one-off
           `sqltransport-schema status --format prometheus` (a new process and connection each: what a
           textfile collector run from cron pays at every scrape).

    .venv/bin/python benchmarks/exporter_scrape.py [--queues 1000] [--messages 10] [--seconds 60] [--interval 1] [--min-interval 5s]
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _databases import drop_database  # noqa: E402  (beside this script)
from status_scale import filled_bus  # noqa: E402

from sqltransport_schema.runtime.exporter import parse_min_interval  # noqa: E402
from sqltransport_schema.runtime.status import status  # noqa: E402
from sqltransport_schema.runtime.transport import Transport  # noqa: E402

TOOL = str(Path(sys.executable).parent / "sqltransport-schema")
SCANS = "SELECT sum(seq_scan + coalesce(idx_scan, 0))::bigint FROM pg_stat_user_tables"


def scans(driver_url: str) -> int:
    """The scans of the database's tables PostgreSQL counted (this session scans none)."""
    import psycopg

    time.sleep(1.5)  # a session's statistics reach the views when it ends (or idles), within a second
    with psycopg.connect(driver_url, autocommit=True) as conn:
        return conn.execute(SCANS).fetchone()[0]


def quiet(driver_url: str) -> None:
    """VACUUM the whole database, system catalogs included (1,000 CREATE TABLEs filled them), so that
    autovacuum has nothing to do there during the measurement."""
    import psycopg

    with psycopg.connect(driver_url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def start_exporter(url: str, min_interval: str) -> tuple[subprocess.Popen, str]:
    command = [TOOL, "status", "--url", url, "--serve", "127.0.0.1:0", "--min-interval", min_interval]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    first = process.stderr.readline()
    assert "serving http://" in first, first + process.stderr.read()
    return process, first.split("serving ", 1)[1].split("/metrics", 1)[0]


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err


def scrape(base: str) -> tuple[float, int, bytes]:
    """One scrape: its seconds, the exporter's reads so far, the body."""
    started = time.perf_counter()
    with urllib.request.urlopen(base + "/metrics", timeout=30) as response:
        body = response.read()
    seconds = time.perf_counter() - started
    reads = next(line for line in body.splitlines() if line.startswith(b"sqltransport_status_reads_total "))
    return seconds, int(float(reads.split()[1])), body


def scrapes(base: str, seconds: float, interval: float) -> tuple[list[float], list[float], int, bytes]:
    """Scrape every `interval` for `seconds`: the latencies of the scrapes that read and of those that
    did not, the exporter's reads, the last body."""
    reading, cached, reads = [], [], 0
    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while next_at < end:
        time.sleep(max(0.0, next_at - time.monotonic()))
        took, now_reads, body = scrape(base)
        (reading if now_reads > reads else cached).append(took)
        reads, next_at = now_reads, next_at + interval
    return reading, cached, reads, body


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def direct(transport: Transport, runs: int) -> list[float]:
    """status() on a kept connection, in a transaction, as the exporter reads."""
    kept = []
    with transport.engine.connect() as conn:
        for _ in range(runs):
            started = time.perf_counter()
            with conn.begin():
                status(transport, connection=conn)
            kept.append(time.perf_counter() - started)
    return kept


def one_off(url: str) -> list[float]:
    """A one-off `status --format prometheus`: a new process and connection each."""
    found = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([TOOL, "status", "--url", url, "--format", "prometheus"], capture_output=True, check=True)
        found.append(time.perf_counter() - started)
    return found


def report(args: argparse.Namespace, figures: dict) -> None:
    reading, cached = figures["reading"], figures["cached"]
    interval = parse_min_interval(args.min_interval)
    bound = math.floor(args.seconds / interval) + 1 if interval else len(reading) + len(cached)
    counted = figures["scans"] / figures["scans_per_read"]
    print(
        f"status --serve over {args.queues} queues ({figures['tables']} tables, {figures['messages']} messages) on PostgreSQL, "
        f"scraped every {args.interval:g}s for {args.seconds:g}s, --min-interval {args.min_interval}"
    )
    print(f"{'measure':<44}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'p50 ratio':>11}   (ratio: this p50 / cached-scrape p50)")
    base = statistics.median(cached)
    for name, values in (
        ("scrape answered from the snapshot", cached),
        ("scrape that read the database", reading),
        ("direct: status() on a kept connection", figures["kept"]),
        ("direct: one-off status --format prometheus", figures["one_off"]),
    ):
        p50, p95 = statistics.median(values), percentile(values, 0.95)
        print(f"{name:<44}{len(values):>5}{p50 * 1000:>10.1f}{p95 * 1000:>10.1f}{p50 / base:>10.1f}x")
    every = reading + cached
    print(f"{'every scrape':<44}{len(every):>5}{statistics.median(every) * 1000:>10.1f}{percentile(every, 0.95) * 1000:>10.1f}")
    print(
        f"database reads: {len(every)} scrapes; {figures['reads']} exporter reads (sqltransport_status_reads_total); "
        f"{figures['scans']} table scans counted by PostgreSQL / {figures['scans_per_read']:g} a status read = {counted:.1f} reads; "
        f"bound {bound}: {'met' if max(figures['reads'], counted) <= bound else 'MISSED'}"
    )
    print(f"/metrics body: {figures['body']} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=10, help="messages per queue")
    parser.add_argument("--seconds", type=float, default=60, help="how long Prometheus scrapes")
    parser.add_argument("--interval", type=float, default=1, help="seconds between scrapes")
    parser.add_argument("--min-interval", default="5s", help="the exporter's --min-interval")
    parser.add_argument("--runs", type=int, default=10, help="direct status() reads on a kept connection")
    args = parser.parse_args()

    database, driver_url, transport, total = filled_bus(args.queues, args.messages, "sqlts_bench_exporter")
    try:
        figures = {"tables": len(transport.blueprint.tables), "messages": total}
        transport.engine.dispose()
        quiet(driver_url)
        before = scans(driver_url)
        process, base = start_exporter(driver_url, args.min_interval)
        try:
            figures["reading"], figures["cached"], figures["reads"], body = scrapes(base, args.seconds, args.interval)
        finally:
            stop(process)
        figures["scans"], figures["body"] = scans(driver_url) - before, len(body)
        before = scans(driver_url)
        figures["kept"] = direct(transport, args.runs)
        transport.engine.dispose()
        figures["scans_per_read"] = (scans(driver_url) - before) / args.runs
        figures["one_off"] = one_off(driver_url)
        report(args, figures)
    finally:
        drop_database(database)


if __name__ == "__main__":
    main()
