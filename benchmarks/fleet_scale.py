"""fleet upgrade and fleet status over many databases, side by side in one run with their references.

Set-up (not measured): N PostgreSQL databases on the local server, and the repository's example
project (four revisions) in a folder of its own, with a fleet.yaml naming the databases.

Measured, each as a user runs it (a subprocess: interpreter start-up and imports included):

- fresh:   `fleet upgrade --parallel 4` of the example topology to D empty databases, next to the
           loop: `alembic -x url=... upgrade head` per database in a shell loop (run on a sample of
           the databases, --loop-sample; its per-database time is multiplied out to D);
- no-op:   `fleet upgrade --parallel 4` of N databases all at the head, next to the loop (on a
           sample as above) and the bound: one connection and one read of alembic_version per
           database, in one process, one database after the other (psycopg 3);
- status:  `fleet status` and `fleet status --check` of the N databases;
- SQLite:  fresh deploy and no-op of F SQLite tenant files (`fleet upgrade --parallel 4`).

Targets (issue 41): no-op <= 3 s for 500 (within 2x of the bound) and >= 100x the loop; status of
500 <= 3 s; status --check of 500 <= 20 s; fresh deploy to 200 >= 4x the loop.

    .venv/bin/python benchmarks/fleet_scale.py [--databases 500] [--fresh 200] [--loop-sample 10] [--sqlite-files 10000]

--fresh 0, --loop-sample 0 and --sqlite-files 0 skip those parts (the no-op and status figures alone).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _databases import PG_ADMIN, admin  # noqa: E402  (beside this script)

BIN = Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ENV.pop("SQLTRANSPORT_URL", None)
# A user's install has its bytecode (pip compiles it): without it (a venv installed with --no-compile, and
# PYTHONDONTWRITEBYTECODE set) every command compiles SQLAlchemy and Alembic from source first, 1 to 5 s of
# CPU per run. The set-up runs, not measured, write it here, as a first run would.
NO_BYTECODE = ENV.pop("PYTHONDONTWRITEBYTECODE", None) is not None


def project(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(REPO / "alembic.ini", folder / "alembic.ini")
    shutil.copy(REPO / "topology.yaml", folder / "topology.yaml")
    shutil.copytree(REPO / "migrations", folder / "migrations", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def url(name: str) -> str:
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name


def fleet_file(root: Path, template: str, names: list[str], name: str = "fleet.yaml") -> Path:
    path = root / name
    path.write_text(f"url_template: {template}\nnames: [{', '.join(names)}]\n")
    return path


def timed(*command: str, cwd: Path, expect: int = 0) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if result.returncode != expect:
        raise SystemExit(f"{' '.join(command[:6])}... exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return seconds


def fleet(*args: str, cwd: Path, expect: int = 0) -> float:
    return timed(sys.executable, "-m", "sqltransport_schema.cli", "fleet", *args, cwd=cwd, expect=expect)


def shell_loop(urls: list[str], cwd: Path) -> float:
    """`for url in ...; do alembic -x url=$url upgrade head; done`, as users write it."""
    script = "set -e\nfor url in " + " ".join(f"'{u}'" for u in urls) + f'; do "{BIN / "alembic"}" -x "url=$url" upgrade head; done\n'
    return timed("bash", "-c", script, cwd=cwd)


def bound(urls: list[str]) -> float:
    """One connection and one read of alembic_version per database, one after the other."""
    import psycopg

    started = time.perf_counter()
    for each in urls:
        with psycopg.connect(each) as connection:
            connection.execute("SELECT version_num FROM alembic_version").fetchall()
    return time.perf_counter() - started


def row(what: str, seconds: float, reference: str = "", ratio: str = "") -> None:
    print(f"| {what} | {seconds:.2f} | {reference} | {ratio} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", type=int, default=500)
    parser.add_argument("--fresh", type=int, default=200, help="databases of the fresh deploy (0: skip it)")
    parser.add_argument("--loop-sample", type=int, default=10, help="databases the shell loop runs on (0: skip the loop)")
    parser.add_argument("--sqlite-files", type=int, default=10000, help="SQLite tenant files (0: skip them)")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument(
        "--sqlite-noop-only",
        action="store_true",
        help="only the SQLite no-op and status: the files are copies of one deployed file (set-up, not measured); no PostgreSQL",
    )
    args = parser.parse_args()
    if args.sqlite_noop_only:
        args.databases = 0
    load = os.getloadavg()
    shown = f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    print(f"# fleet_scale: {args.databases} PostgreSQL databases, {args.sqlite_files} SQLite files; load {shown}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores\n")
    if NO_BYTECODE:
        print("# PYTHONDONTWRITEBYTECODE unset for the commands: the set-up runs write the bytecode a user's install has\n")
    work = Path(tempfile.mkdtemp(prefix="fleet_scale_"))
    root = project(work / "project")
    prefix = f"sqlts_fleetbench_{uuid.uuid4().hex[:6]}"
    names = [f"t{i:05d}" for i in range(args.databases)]
    parallel = ["--parallel", str(args.parallel)]
    try:
        if args.sqlite_noop_only:
            print("| measured | seconds | reference (seconds) | ratio |\n|---|---:|---|---:|")
            files = work / "tenants"
            files.mkdir()
            tenants = [f"s{i:05d}" for i in range(args.sqlite_files)]
            fleet_file(root, f"sqlite:///{files}/{{name}}.db", tenants[:1], "one.yaml")
            fleet("upgrade", "--fleet", "one.yaml", cwd=root)
            for name in tenants[1:]:
                shutil.copy(files / f"{tenants[0]}.db", files / f"{name}.db")
            fleet_file(root, f"sqlite:///{files}/{{name}}.db", tenants, "sqlite.yaml")
            sq = ("--fleet", "sqlite.yaml", *parallel)
            row(f"SQLite no-op of {len(tenants)} files", fleet("upgrade", *sq, cwd=root))
            row(f"SQLite fleet status of {len(tenants)} files", fleet("status", *sq, cwd=root))
            return
        with admin() as connection:
            for name in names:
                connection.execute(f'CREATE DATABASE "{prefix}_{name}"')
        template = url(f"{prefix}_{{name}}")
        urls = [url(f"{prefix}_{n}") for n in names]
        sample = args.loop_sample
        print("| measured | seconds | reference (seconds) | ratio |\n|---|---:|---|---:|")
        # set-up: one dry run, which imports (and compiles, NO_BYTECODE) what every command below imports
        fleet_file(root, template, names[-1:], "warm.yaml")
        subprocess.run(
            [sys.executable, "-m", "sqltransport_schema.cli", "fleet", "upgrade", "--fleet", "warm.yaml", "--dry-run"],
            cwd=root,
            env=ENV,
            capture_output=True,
            check=False,
        )

        # fresh deploy: the fleet to D databases; the loop on a sample of the others
        fresh = names[: args.fresh]
        if fresh:
            fleet_file(root, template, fresh, "fresh.yaml")
            deployed = fleet("upgrade", "--fleet", "fresh.yaml", *parallel, cwd=root)
            if sample:
                looped = shell_loop(urls[args.fresh : args.fresh + sample], root) / sample * len(fresh)
                row(
                    f"fresh deploy to {len(fresh)}: fleet upgrade --parallel {args.parallel}",
                    deployed,
                    f"loop {looped:.1f} (x{len(fresh)}/{sample})",
                    f"{looped / deployed:.1f}x",
                )
            else:
                row(f"fresh deploy to {len(fresh)}: fleet upgrade --parallel {args.parallel}", deployed)

        fleet_file(root, template, names)
        fleet("upgrade", *parallel, cwd=root)  # set-up: the rest to the head
        noop = fleet("upgrade", *parallel, cwd=root)
        reads = bound(urls)
        row(
            f"no-op of {len(names)}: fleet upgrade --parallel {args.parallel}", noop, f"bound {reads:.2f}", f"{noop / reads:.2f}x the bound"
        )
        if sample:
            looped = shell_loop(urls[:sample], root) / sample * len(names)
            row(f"no-op of {len(names)}: the loop", looped, f"(x{len(names)}/{sample})", f"{looped / noop:.0f}x slower than fleet")
        status = fleet("status", *parallel, cwd=root)
        row(f"fleet status of {len(names)}", status, f"bound {reads:.2f}", f"{status / reads:.2f}x the bound")
        checked = fleet("status", "--check", *parallel, cwd=root)
        row(f"fleet status --check of {len(names)}", checked)

        if args.sqlite_files:
            files = work / "tenants"
            files.mkdir()
            tenants = [f"s{i:05d}" for i in range(args.sqlite_files)]
            fleet_file(root, f"sqlite:///{files}/{{name}}.db", tenants, "sqlite.yaml")
            sq = ("--fleet", "sqlite.yaml", *parallel)
            row(f"SQLite fresh deploy of {len(tenants)} files", fleet("upgrade", *sq, cwd=root))
            row(f"SQLite no-op of {len(tenants)} files", fleet("upgrade", *sq, cwd=root))
            row(f"SQLite fleet status of {len(tenants)} files", fleet("status", *sq, cwd=root))
    finally:
        with admin() as connection:
            for name in names:
                connection.execute(f'DROP DATABASE IF EXISTS "{prefix}_{name}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"\n# load after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()
