"""How compile and `alembic upgrade head` scale with the number of endpoints.

Part 1: compile time for 10, 100, 1,000 and 10,000 endpoints, each with 2 instance
queues and a delayed table (4 tables an endpoint), from an empty history (first
compile) and then one endpoint added (incremental: the head's snapshot is read back).
Time is measured in-process (load + validate + diff + render + write); the command
line's wall time, interpreter start-up and imports included, is reported beside it.

Part 2: `alembic upgrade head` on PostgreSQL for 1,000 endpoints next to the same
DDL executed directly through psycopg in one transaction, each on a fresh database,
alternating, best of the runs; the ratio is alembic / direct.

    .venv/bin/python benchmarks/compile_scale.py [--sizes 10,100,1000,10000] [--upgrade-endpoints 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "benchmarks" / ".work"
sys.path.insert(0, str(REPO))

from _databases import PG_ADMIN, create_database, drop_database  # noqa: E402  (beside this script)

from sqltransport_schema import engines, schema, topology  # noqa: E402
from sqltransport_schema.migrate import toimpl  # noqa: E402
from sqltransport_schema.migrate.compile import compile_topology, plan  # noqa: E402
from sqltransport_schema.migrate.execution import lock_budget  # noqa: E402
from sqltransport_schema.migrate.ops import CreateQueueOp  # noqa: E402
from sqltransport_schema.schema import Kind, TableName, TableSpec  # noqa: E402

DONT_WRITE_BYTECODE = sys.dont_write_bytecode


def topology_text(endpoints: int, extra: int = 0) -> str:
    lines = ['transport_version: "9.1"', "endpoints:"]
    for i in range(endpoints + extra):
        lines.append(f"  - name: Endpoint{i:05d}\n    instances: [host-a, host-b]")
    lines.append("queues:\n  - name: error\n  - name: audit")
    return "\n".join(lines) + "\n"


def new_project(name: str) -> Path:
    root = WORK / name
    shutil.rmtree(root, ignore_errors=True)
    (root / "migrations" / "versions").mkdir(parents=True)
    shutil.copy(REPO / "alembic.ini", root)
    for file in ("env.py", "script.py.mako"):
        shutil.copy(REPO / "migrations" / file, root / "migrations")
    return root


def config(root: Path, url: str | None = None) -> Config:
    cfg = Config(str(root / "alembic.ini"), cmd_opts=argparse.Namespace(quiet=True, x=[f"url={url}"] if url else None))
    cfg.attributes["configure_logging"] = False
    return cfg


def timed_compile(root: Path, cpu: list[float] | None = None) -> float:
    """Wall seconds of one compile; its CPU seconds (this process's) appended to `cpu`, if given:
    on a machine other work shares, the CPU time is what the compile itself costs."""
    started, started_cpu = time.perf_counter(), time.process_time()
    topo = topology.load(root / "topology.yaml")
    _, written = compile_topology(config(root), topo, "bench")
    assert written is not None
    if cpu is not None:
        cpu.append(time.process_time() - started_cpu)
    return time.perf_counter() - started


def compile_row(endpoints: int, runs: int) -> dict:
    firsts, increments, colds, clis, first_cpu, increment_cpu = [], [], [], [], [], []
    for _ in range(runs):
        root = new_project(f"compile_{endpoints}")
        (root / "topology.yaml").write_text(topology_text(endpoints))
        firsts.append(timed_compile(root, first_cpu))
        (root / "topology.yaml").write_text(topology_text(endpoints, extra=1))
        # Incremental compile reads the head revision back through Alembic, which imports it:
        # measured with Python's bytecode cache (the usual case) and without it.
        sys.dont_write_bytecode = True
        colds.append(timed_compile(root))
        (root / "topology.yaml").write_text(topology_text(endpoints, extra=2))
        sys.dont_write_bytecode = False
        ScriptDirectory.from_config(config(root)).get_current_head()  # writes __pycache__
        increments.append(timed_compile(root, increment_cpu))
        sys.dont_write_bytecode = DONT_WRITE_BYTECODE
        (root / "topology.yaml").write_text(topology_text(endpoints, extra=3))
        started = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).parent / "sqltransport-schema"), "compile", "-m", "cli", "-c", str(root / "alembic.ini")],
            check=True,
            capture_output=True,
        )
        clis.append(time.perf_counter() - started)
    first = min(firsts)
    return {
        "endpoints": endpoints,
        "tables": endpoints * 4 + 2,
        "first": first,
        "first_cpu": min(first_cpu),
        "incremental_cpu": min(increment_cpu),
        "us_per_endpoint": first / endpoints * 1e6,
        "incremental": min(increments),
        "incremental_cold": min(colds),
        "cli": min(clis),
    }


# --------------------------------------------------------------------------- upgrade
def direct_batches(topo, lock_budget: int | None, previous=None) -> list[list[str]]:
    """Exactly the statements the compiled revision runs on PostgreSQL (from the topology `previous`,
    if given), split where it commits: before an operation whose locks would pass the budget."""
    engine = engines.get("postgresql")
    ops = plan(schema.blueprint(previous) if previous is not None else None, schema.blueprint(topo)).upgrade
    transactions: list[list[str]] = [[]]
    locks = 0
    for op in ops:
        cost = op.locks()
        if lock_budget is not None and locks and locks + cost > lock_budget:
            transactions.append([])
            locks = 0
        transactions[-1].extend(toimpl.statements(op, engine))
        locks += cost
    return transactions


def server_lock_budget() -> int:
    """The locks a migration transaction may hold on this server before it commits part-way."""
    import sqlalchemy as sa

    engine = sa.create_engine(PG_ADMIN.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as connection:
        budget = lock_budget(engines.get("postgresql").lock_table_capacity(connection))
    engine.dispose()
    return budget


def run_direct(url: str, transactions: list[list[str]]) -> float:
    """Seconds to run the statements through psycopg, one transaction per list."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        for statements in transactions:
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
    return time.perf_counter() - started


def time_direct(transactions: list[list[str]]) -> float:
    name = create_database()
    try:
        return run_direct(f"postgresql://postgres@127.0.0.1:5432/{name}", transactions)
    finally:
        drop_database(name)


def time_alembic(root: Path, start: str | None = None) -> float:
    """Seconds of `alembic upgrade head` on a fresh database (first upgraded to `start`, not timed)."""
    name = create_database()
    try:
        cfg = config(root, f"postgresql://postgres@127.0.0.1:5432/{name}")
        cfg.stdout = io.StringIO()
        if start is not None:
            command.upgrade(cfg, start)
        started = time.perf_counter()
        command.upgrade(cfg, "head")
        return time.perf_counter() - started
    finally:
        drop_database(name)


def upgrade_rows(endpoints: int, runs: int) -> dict:
    root = new_project(f"upgrade_{endpoints}")
    (root / "topology.yaml").write_text(topology_text(endpoints))
    timed_compile(root)
    topo = topology.load(root / "topology.yaml")
    statements = direct_batches(topo, server_lock_budget())
    time_alembic(root)  # warm-up: bytecode cache of the revision, server caches
    alembic_times, direct_times = [], []
    for _ in range(runs):
        alembic_times.append(time_alembic(root))
        direct_times.append(time_direct(statements))
    return {
        "endpoints": endpoints,
        "statements": sum(len(t) for t in statements),
        "transactions": len(statements),
        "alembic": min(alembic_times),
        "alembic_median": statistics.median(alembic_times),
        "direct": min(direct_times),
        "direct_median": statistics.median(direct_times),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--upgrade-endpoints", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    print("compile (in-process: load + validate + diff + render + write; best of runs)")
    print("first: from an empty history; +1 endpoint: a compile on top of it (head read back with / without bytecode cache)")
    print("CPU: this process's CPU time (min of runs), what the compile costs whatever else the machine runs")
    print(
        f"{'endpoints':>9} {'tables':>7} {'first s':>8} {'first CPU s':>11} {'us/endpoint':>11} {'+1 cached s':>11} "
        f"{'+1 CPU s':>8} {'+1 uncached s':>13} {'CLI wall s':>10}"
    )
    rows = []
    for size in sizes:
        row = compile_row(size, args.runs if size < 10000 else max(1, args.runs - 1))
        rows.append(row)
        print(
            f"{row['endpoints']:>9} {row['tables']:>7} {row['first']:>8.3f} {row['first_cpu']:>11.3f} {row['us_per_endpoint']:>11.1f} "
            f"{row['incremental']:>11.3f} {row['incremental_cpu']:>8.3f} {row['incremental_cold']:>13.3f} {row['cli']:>10.3f}",
            flush=True,
        )
    largest = rows[-1]
    if largest["endpoints"] >= 10000:
        for what, key, limit in (("first compile", "first", 2.0), ("+1 endpoint (cached)", "incremental", 1.5)):
            wall, cpu = largest[key], largest[key + "_cpu"]
            print(
                f"target: 10,000 endpoints, {what} under {limit:g} s -> wall {'met' if wall < limit else 'MISSED'} "
                f"({wall:.3f} s), CPU {'met' if cpu < limit else 'MISSED'} ({cpu:.3f} s)"
            )
    if len(rows) > 1:
        growth = rows[-1]["us_per_endpoint"] / rows[-2]["us_per_endpoint"]
        print(f"linearity: time per endpoint at {rows[-1]['endpoints']} / at {rows[-2]['endpoints']} = {growth:.2f}")

    print()
    budget = server_lock_budget()
    limit = budget // CreateQueueOp(TableSpec(Kind.QUEUE, TableName("q")), "9.1").locks()
    print(f"alembic upgrade head on PostgreSQL vs the same DDL through psycopg (best of {args.runs}).")
    print(f"A migration transaction on this server holds about {budget} locks, about {limit} queue creations")
    print("(max_locks_per_transaction); beyond that both sides commit at the same points, as the migration does.")
    print(f"{'endpoints':>9} {'statements':>10} {'transactions':>12} {'alembic s':>9} {'direct s':>8} {'ratio':>6}")
    ratios = []
    for size in sorted({max(1, limit // 5), args.upgrade_endpoints}):
        row = upgrade_rows(size, args.runs)
        ratio = row["alembic"] / row["direct"]
        ratios.append((size, ratio))
        print(
            f"{row['endpoints']:>9} {row['statements']:>10} {row['transactions']:>12} {row['alembic']:>9.3f} "
            f"{row['direct']:>8.3f} {ratio:>6.2f}   (medians {row['alembic_median']:.3f} / {row['direct_median']:.3f})",
            flush=True,
        )
    size, ratio = ratios[-1]
    print(f"target: {size} endpoints within 1.5x of direct DDL -> {'met' if ratio <= 1.5 else 'MISSED'} ({ratio:.2f}x)")
    shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
