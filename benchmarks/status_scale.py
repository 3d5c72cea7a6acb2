"""How long `status` takes over 1,000 queues on PostgreSQL, next to one count(*) per table.

A fresh database gets N queues (plus error, audit and the subscription table) through `alembic
upgrade head`, each queue M messages. Measured in-process (the transport made once, as a service
or `status --watch` holds it), twice:

- first call: one call on a new connection (what a one-shot `sqltransport-schema status` does; the
  server loads every table's catalog entries and plans every statement), `--first-runs` times in
  turn with the reference, each on new connections; the best and the median;
- repeated:   then alternating with the reference, best of the runs, on the kept connections (what
  `status --watch` and a service do; status has psycopg prepare its statements at their first
  run, and they have no parameters, so the server keeps one plan of each; the reference's 1,003
  statements are more than psycopg keeps count of (100), so it plans each every time).

Each of:

- exact:     runtime.status.status(transport): depth, expired count and the head's TimeSent of
             every queue, in UNION ALL statements of `operations.batch` tables each, shared out
             between `operations.connections` connections, plus the table list, the error queue's
             counts by FailedQ and the subscribers.
- estimate:  status(transport, estimate=True): depths from pg_stat_user_tables/pg_class, the heads of
             the queues not estimated empty read (here every queue holds messages: all of them).
- per-table: the reference, what a script without this tool does: one `SELECT count(*)` per table
             through psycopg 3 on one open connection (depth only; no ages, no expired count).

Targets: per-table / exact >= 3; estimate under 0.5 s.

    .venv/bin/python benchmarks/status_scale.py [--queues 1000] [--messages 100] [--runs 10] [--first-runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _databases import PG_ADMIN, create_database, drop_database  # noqa: E402  (beside this script)
from compile_scale import new_project  # noqa: E402

from sqltransport_schema import cli, wire  # noqa: E402
from sqltransport_schema.db import make_engine  # noqa: E402
from sqltransport_schema.runtime.status import status  # noqa: E402
from sqltransport_schema.runtime.transport import Transport  # noqa: E402
from sqltransport_schema.schema import Kind  # noqa: E402

# Set-up only (not measured): M rows per queue in one statement each.
FILL = "INSERT INTO {table} (Id, Expires, Headers, Body) SELECT gen_random_uuid(), NULL, %s, %s FROM generate_series(1, %s)"
REFERENCE_COUNT = "SELECT count(*) FROM {table}"


def topology_text(queues: int) -> str:
    lines = ['transport_version: "9.1"', "engines: [postgresql]", "queues:", "  - name: error", "  - name: audit"]
    lines += [f"  - name: Queue{i:05d}" for i in range(queues)]
    return "\n".join(lines) + "\n"


def deploy(queues: int, url: str) -> None:
    root = new_project(f"status_{queues}")
    (root / "topology.yaml").write_text(topology_text(queues))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["compile", "-m", "bench", "-c", str(root / "alembic.ini")]) == 0
        from alembic import command
        from alembic.config import Config

        cfg = Config(str(root / "alembic.ini"), cmd_opts=argparse.Namespace(x=[f"url={url}"]), stdout=io.StringIO())
        cfg.attributes["configure_logging"] = False
        command.upgrade(cfg, "head")


def fill(transport: Transport, driver_url: str, messages: int) -> int:
    import psycopg

    headers = wire.encode_headers(wire.standard_headers(message_id="0", enclosed_types="Bench.Message", reply_to=None))
    total = 0
    with psycopg.connect(driver_url) as conn:
        for spec in transport.blueprint.tables:
            if spec.kind is Kind.QUEUE:
                conn.execute(FILL.format(table=transport.dialect.qualified(spec.name)), (headers, b"body", messages))
                total += messages
        conn.execute("ANALYZE")
    return total


def filled_bus(queues: int, messages: int, prefix: str) -> tuple[str, str, Transport, int]:
    """A fresh database of `queues` queues holding `messages` each: its name, its psycopg URL, the
    transport on it and the messages sent (the caller drops the database)."""
    database = create_database(prefix)
    driver_url = PG_ADMIN.rsplit("/", 1)[0] + "/" + database
    url = driver_url.replace("postgresql://", "postgresql+psycopg://")
    try:
        deploy(queues, url)
        transport = Transport.from_database(make_engine(url), verify=False)
        return database, driver_url, transport, fill(transport, driver_url, messages)
    except BaseException:
        drop_database(database)
        raise


def per_table(transport: Transport, conn) -> dict:
    """The reference: one count(*) round trip per table of the blueprint."""
    out = {}
    for spec in transport.blueprint.tables:
        out[spec.name.table] = conn.execute(REFERENCE_COUNT.format(table=transport.dialect.qualified(spec.name))).fetchone()[0]
    return out


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=100, help="messages per queue")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--first-runs", type=int, default=3, help="first calls (new connections) of each")
    args = parser.parse_args()

    import psycopg

    database, driver_url, transport, total = filled_bus(args.queues, args.messages, "sqlts_bench_status")
    try:
        firsts: dict[str, list[float]] = {"exact": [], "estimate": [], "per-table": []}
        for _ in range(args.first_runs):
            for name, estimating in (("exact", False), ("estimate", True)):
                transport.engine.dispose()  # new connections: nothing loaded, nothing prepared
                firsts[name].append(timed(lambda estimating=estimating: status(transport, estimate=estimating))[0])
            transport.engine.dispose()
            with psycopg.connect(driver_url, autocommit=True) as conn:
                firsts["per-table"].append(timed(lambda: per_table(transport, conn))[0])
        first = {name: min(times) for name, times in firsts.items()}
        median = {name: statistics.median(times) for name, times in firsts.items()}
        exact, estimate, reference = [], [], []
        with psycopg.connect(driver_url, autocommit=True) as conn:
            for _ in range(args.runs):
                seconds, report = timed(lambda: status(transport))
                exact.append(seconds)
                seconds, estimated = timed(lambda: status(transport, estimate=True))
                estimate.append(seconds)
                seconds, counts = timed(lambda: per_table(transport, conn))
                reference.append(seconds)
        ours = {t.name: t.depth for t in report.tables}
        assert ours == counts, "status and the per-table counts disagree"
        assert sum(t.depth for t in report.tables if t.kind == "queue") == total
        assert all(t.depth is not None for t in estimated.tables)
        tables = len(transport.blueprint.tables)
        best = {"exact": min(exact), "estimate": min(estimate), "per-table": min(reference)}
        print(f"status over {args.queues} queues ({tables} tables, {total} messages) on PostgreSQL")
        print(
            f"{'measure':<12}{'first call s':>14}{'ratio':>8}{'median s':>12}{'ratio':>8}{'repeated s':>14}{'ratio':>8}"
            f"   (first call: best and median of {args.first_runs}; repeated: best of {args.runs}; ratio: per-table / this)"
        )
        for name in best:
            print(
                f"{name:<12}{first[name]:>14.4f}{first['per-table'] / first[name]:>7.1f}x"
                f"{median[name]:>12.4f}{median['per-table'] / median[name]:>7.1f}x"
                f"{best[name]:>14.4f}{best['per-table'] / best[name]:>7.1f}x"
            )
        for label, figures in (
            (f"first call (best of {args.first_runs})", first),
            (f"first call (median of {args.first_runs})", median),
            (f"repeated (best of {args.runs})", best),
        ):
            print(
                f"targets, {label}: exact >= 3x per-table: {'met' if figures['per-table'] / figures['exact'] >= 3 else 'MISSED'}; "
                f"estimate < 0.5 s: {'met' if figures['estimate'] < 0.5 else 'MISSED'}"
            )
        transport.engine.dispose()
    finally:
        drop_database(database)


if __name__ == "__main__":
    main()
