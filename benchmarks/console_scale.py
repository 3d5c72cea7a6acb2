"""The console over an error queue of 200,000 messages on PostgreSQL, next to the same queries
written by hand.

A fresh database gets the topology (Sales, Billing, error, audit) through `alembic upgrade head`;
the error queue is filled with N failed messages (set-up, not measured): 5 exceptions x 2 failed
queues, each message its own NServiceBus.TimeOfFailure, headers as NServiceBus writes them (a stack
trace included, ~1.4 kB). Then, best and median of --runs, alternating with the reference:

- groups:   the groups page's query (ErrorQueue.groups, by exception) and the page over HTTP
            (`GET /failed` of a `sqltransport-schema console` subprocess); the reference, a DBA's
            `GROUP BY Headers::jsonb ->> ...` (which fails on a message whose headers are not JSON:
            the console's reading cuts each header out by pattern instead, and never fails).
- page:     50 messages after the key of the 199,950th (keyset: the last page opens as the first),
            in-process and `GET /failed/messages?after=...`; the reference `WHERE Seq > @k ORDER BY
            Seq LIMIT 50`.
- message:  one message (ErrorQueue.message, `GET /failed/messages/{key}`); the reference
            `WHERE Seq = @k`.
- retry:    (unless --no-retry) a group of a quarter of the messages (one exception of one failed
            queue: 50,000 of 200,000, spread through the queue) retried by
            the console (ErrorQueue.retry of the ids its Selection names, as Actions.retry runs it), its longest batch (the longest time the
            error queue's rows of one batch are held locked) and its total.

The groups query is also read on the server: EXPLAIN ANALYZE's execution time (best of --runs),
and the CPU its backend spent (from /proc: PostgreSQL on this machine), which a loaded machine
stretches less than the wall clock.

Targets (issue 43): groups page under 2 s, a page under 0.2 s, a message under 0.2 s; a retry never
holds the error queue for more than one batch.

    .venv/bin/python benchmarks/console_scale.py [--messages 200000] [--runs 5] [--no-retry]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _databases import PG_ADMIN, create_database, drop_database  # noqa: E402  (beside this script)
from compile_scale import new_project  # noqa: E402

from sqltransport_schema import cli, wire  # noqa: E402
from sqltransport_schema.db import make_engine  # noqa: E402
from sqltransport_schema.errorqueue import GROUPINGS, ErrorQueue, Selection  # noqa: E402
from sqltransport_schema.runtime.transport import Transport  # noqa: E402

TOPOLOGY = (
    'transport_version: "9.1"\nengines: [postgresql]\n'
    "endpoints:\n  - name: Sales\n  - name: Billing\nqueues:\n  - name: error\n  - name: audit\n"
)
EXCEPTIONS = [
    (TimeoutError, "database timeout"),
    (KeyError, "customer"),
    (ValueError, "amount must be positive"),
    (PermissionError, "access denied to ledger"),
    (ConnectionError, "payment gateway unreachable"),
]
STACK = "".join(f'  at Shop.Handlers.Step{i}.Handle(Message m) in /src/Shop/Handlers/Step{i}.cs:line {i * 7}\n' for i in range(12))
# N rows in one statement: the i-th row's headers one of the 10 templates, its TimeOfFailure i seconds after the base;
# every fourth row is template 5 (Billing's TimeoutError, the group retried: a quarter of the queue, 50,000 of
# 200,000, spread through it), the other rows cycle through the rest (template 5's turn going to template 0)
FILL = (
    "INSERT INTO {table} (Id, Expires, Headers, Body) "
    "SELECT gen_random_uuid(), NULL, "
    "replace((%s::text[])[1 + CASE WHEN i %% 4 = 0 THEN 5 WHEN i %% 10 = 5 THEN 0 ELSE i %% 10 END], '@TOF@', "
    "to_char(timestamp '2026-11-01' + i * interval '1 second', 'YYYY-MM-DD HH24:MI:SS:US \"Z\"')), %s "
    "FROM generate_series(0, %s - 1) AS i"
)
HAND_GROUPS = (
    "SELECT Headers::jsonb ->> 'NServiceBus.ExceptionInfo.ExceptionType', Headers::jsonb ->> 'NServiceBus.ExceptionInfo.Message', "
    "count(*), min(Headers::jsonb ->> 'NServiceBus.TimeOfFailure'), max(Headers::jsonb ->> 'NServiceBus.TimeOfFailure') "
    "FROM {table} GROUP BY 1, 2 ORDER BY 3 DESC"
)
HAND_PAGE = "SELECT Seq, Id, Headers FROM {table} WHERE Seq > %s ORDER BY Seq LIMIT 50"
HAND_MESSAGE = "SELECT Seq, Id, Headers, Body FROM {table} WHERE Seq = %s"


def templates(transport: Transport) -> list[str]:
    out = []
    for q in ("Sales", "Billing"):
        for kind, text in EXCEPTIONS:
            try:
                raise kind(text)
            except Exception as exc:
                h = wire.error_headers(
                    wire.standard_headers(message_id="m", enclosed_types=["Shop.OrderPlaced"], reply_to="Sales"),
                    exc,
                    transport.queue(q).address,
                )
            h[wire.EXCEPTION_STACKTRACE] = STACK
            h[wire.TIME_OF_FAILURE] = "@TOF@"
            h[wire.PROCESSING_ENDPOINT] = q
            out.append(wire.encode_headers(h))
    return out


def deploy(url: str) -> None:
    root = new_project("console_scale")
    (root / "topology.yaml").write_text(TOPOLOGY)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["compile", "-m", "bench", "-c", str(root / "alembic.ini")]) == 0
        from alembic import command
        from alembic.config import Config

        cfg = Config(str(root / "alembic.ini"), cmd_opts=argparse.Namespace(x=[f"url={url}"]), stdout=io.StringIO())
        cfg.attributes["configure_logging"] = False
        command.upgrade(cfg, "head")
    os.chdir(root)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=120) as response:
        assert response.status == 200
        response.read()


def row(name: str, ours: list[float], theirs: list[float], target: float | None) -> str:
    best, ref = min(ours), min(theirs)
    verdict = "" if target is None else ("met" if best < target else "MISSED")
    return f"{name:<22} {best:9.4f} {statistics.median(ours):9.4f} {ref:9.4f} {best / ref:7.2f}  {verdict}"


def server(conn, transport: Transport, table: str, runs: int) -> None:
    """The groups query and the reference on the server: EXPLAIN ANALYZE's time, the backend's CPU."""
    ours = transport.dialect.live_bus.failed_groups(transport.name("error"), transport.profile, GROUPINGS["exception"], ()).sql
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]

    def cpu() -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the server is elsewhere
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    for name, sql in (("groups (server)", ours), ("by hand (server)", HAND_GROUPS.format(table=table))):
        times, spent = [], []
        for _ in range(runs):
            before = cpu()
            plan = [line for (line,) in conn.execute("EXPLAIN (ANALYZE, TIMING OFF) " + sql).fetchall()]
            after = cpu()
            times.append(float(next(line for line in plan if line.startswith("Execution Time")).split()[2]) / 1000)
            if before is not None and after is not None:
                spent.append(after - before)
        workers = next((line.strip() for line in plan if "Workers Launched" in line), "no parallel workers")
        backend = f"{min(spent):.2f} s CPU in the backend" if spent else "backend CPU not readable here"
        print(f"{name:<22} EXPLAIN ANALYZE best {min(times):.3f} s; {backend} ({workers})")
    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-retry", action="store_true")
    args = parser.parse_args()
    import psycopg

    database = create_database("sqlts_bench_console")
    driver_url = PG_ADMIN.rsplit("/", 1)[0] + "/" + database
    url = driver_url.replace("postgresql://", "postgresql+psycopg://")
    process = None
    try:
        deploy(url)
        transport = Transport.from_database(make_engine(url, pool_size=2), "alembic.ini")
        queue = ErrorQueue(transport)
        table = transport.dialect.qualified(transport.name("error"), transport.profile)
        started = time.perf_counter()
        with psycopg.connect(driver_url, autocommit=True) as conn:
            conn.execute(FILL.format(table=table), (templates(transport), b'{"order": 1}', args.messages))
            conn.execute(f"ANALYZE {table}")
            keys = [k for (k,) in conn.execute(f"SELECT Seq FROM {table} ORDER BY Seq").fetchall()]
        print(f"filled the error queue with {len(keys)} messages in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        late, last = keys[-51], keys[-1]
        process = subprocess.Popen(
            [sys.executable, "-m", "sqltransport_schema.cli", "console", "--url", url, "--bind", "127.0.0.1:0", "--read-only"],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        line = process.stderr.readline()
        base = "http://127.0.0.1:" + line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0]
        cases = {
            "groups (in-process)": (lambda: queue.groups("exception"), HAND_GROUPS, (), 2.0),
            "groups page (HTTP)": (lambda: get(base + "/failed"), HAND_GROUPS, (), 2.0),
            "page 4000 (in-process)": (lambda: queue.page(after=late), HAND_PAGE, (late,), 0.2),
            "page 4000 (HTTP)": (lambda: get(f"{base}/failed/messages?after={late}"), HAND_PAGE, (late,), 0.2),
            "message (in-process)": (lambda: queue.message(last), HAND_MESSAGE, (last,), 0.2),
            "message (HTTP)": (lambda: get(f"{base}/failed/messages/{last}"), HAND_MESSAGE, (last,), 0.2),
        }
        print(f"{args.messages} messages in the error queue; seconds, best of {args.runs} (median); the reference by hand through psycopg")
        print(f"{'case':<22} {'console':>9} {'median':>9} {'by hand':>9} {'ratio':>7}  target")
        with psycopg.connect(driver_url, autocommit=True) as conn:
            for name, (ours, hand, params, target) in cases.items():
                mine, theirs = [], []
                for _ in range(args.runs):
                    mine.append(timed(ours))
                    theirs.append(timed(lambda hand=hand, params=params: conn.execute(hand.format(table=table), params).fetchall()))
                print(row(name, mine, theirs, target))
            server(conn, transport, table, args.runs)
        if not args.no_retry:
            billing = transport.queue("Billing").address
            group = Selection(failed_queue=billing, group=(("exception_type", "TimeoutError"),))
            ids = queue.ids(group)
            batches: list[float] = []
            mark = [time.perf_counter()]

            def tick(report) -> None:
                now = time.perf_counter()
                batches.append(now - mark[0])
                mark[0] = now

            retrying = ErrorQueue(transport, batch_size=500)
            start = time.perf_counter()
            report = retrying.retry(Selection(ids=tuple(ids)), progress=tick)
            total = time.perf_counter() - start
            print(
                f"retry of a group of {len(ids)} (one exception, one failed queue) in batches of {retrying.batch_size}: "
                f"{report.moved} moved in {report.batches} batches, {total:.1f} s; longest batch (rows locked) "
                f"{max(batches) * 1000:.0f} ms, median {statistics.median(batches) * 1000:.0f} ms"
            )
        transport.engine.dispose()
    finally:
        if process is not None:
            process.terminate()
            process.communicate(timeout=30)
        drop_database(database)
    return 0


if __name__ == "__main__":
    sys.exit(main())
