"""A very large in-place revision on PostgreSQL: `alembic upgrade head` next to the same DDL run directly.

The database holds 300 endpoints with 2 instances each (1,203 tables, built by the first revision,
not timed); the revision timed sets `seq_type: bigserial` and `body_string: true` on every endpoint
(2,102 table rewrites). Alembic's run commits part-way as its operations fill the server's lock
table (each operation's lock_cost, migrate/ops.py); the direct side runs exactly the revision's statements
through psycopg and commits at the same points. Each side on a fresh database, alternating, best of
the runs; the ratio is alembic / direct.

    .venv/bin/python benchmarks/inplace_scale.py [--endpoints 300] [--runs 1]
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
from pathlib import Path

from alembic import command
from alembic.script import ScriptDirectory

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _databases import create_database, drop_database  # noqa: E402  (beside this script)
from compile_scale import (  # noqa: E402
    REPO,
    WORK,
    config,
    direct_batches,
    new_project,
    run_direct,
    server_lock_budget,
    time_alembic,
    timed_compile,
)

sys.path.insert(0, str(REPO))

from sqltransport_schema import topology  # noqa: E402


def topology_text(endpoints: int, rewritten: bool) -> str:
    lines = ['transport_version: "9.1"']
    if rewritten:
        lines.append("postgresql:\n  seq_type: bigserial")
    lines.append("endpoints:")
    for i in range(endpoints):
        lines.append(f"  - name: Endpoint{i:03d}\n    instances: [host-a, host-b]" + ("\n    body_string: true" if rewritten else ""))
    lines.append("queues:\n  - name: error\n  - name: audit")
    return "\n".join(lines) + "\n"


def time_direct(root: Path, first: str, transactions: list[list[str]]) -> float:
    """Seconds of the statements run directly on a fresh database upgraded to `first` (not timed)."""
    name = create_database()
    try:
        url = f"postgresql://postgres@127.0.0.1:5432/{name}"
        cfg = config(root, url)
        cfg.stdout = io.StringIO()
        command.upgrade(cfg, first)
        return run_direct(url, transactions)
    finally:
        drop_database(name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", type=int, default=300)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()

    root = new_project(f"inplace_{args.endpoints}")
    (root / "topology.yaml").write_text(topology_text(args.endpoints, rewritten=False))
    timed_compile(root)
    first = ScriptDirectory.from_config(config(root)).get_current_head()
    previous = topology.load(root / "topology.yaml")
    (root / "topology.yaml").write_text(topology_text(args.endpoints, rewritten=True))
    timed_compile(root)
    budget = server_lock_budget()
    transactions = direct_batches(topology.load(root / "topology.yaml"), budget, previous)

    print(f"in-place revision on PostgreSQL: {args.endpoints} endpoints x 2 instances -> bigserial and BodyString on all")
    print(f"(alembic upgrade head vs the same DDL through psycopg, best of {args.runs}; lock budget {budget} per transaction)")
    print(f"{'endpoints':>9} {'statements':>10} {'transactions':>12} {'alembic s':>9} {'direct s':>8} {'ratio':>6}")
    alembic_times, direct_times = [], []
    for _ in range(args.runs):
        alembic_times.append(time_alembic(root, first))
        direct_times.append(time_direct(root, first, transactions))
    ratio = min(alembic_times) / min(direct_times)
    statements = sum(len(t) for t in transactions)
    print(
        f"{args.endpoints:>9} {statements:>10} {len(transactions):>12} {min(alembic_times):>9.3f} {min(direct_times):>8.3f} {ratio:>6.2f}"
        f"   (medians {statistics.median(alembic_times):.3f} / {statistics.median(direct_times):.3f})",
        flush=True,
    )
    print(f"target: within 1.5x of direct DDL -> {'met' if ratio <= 1.5 else 'MISSED'} ({ratio:.2f}x)")
    shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
