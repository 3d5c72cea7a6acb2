"""fleet upgrade --master: the same per-target work as Spark tasks, the migrations shipped with the
job, the journal written by the driver. local[2] on SQLite tenant files, and a standalone cluster
(a master and two workers started from the spark extra) on PostgreSQL, one of whose workers is
killed mid-run: Spark runs its tasks again and every database ends at the head, each revision
run once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .support.fleets import journal_rows, pg_databases, pg_url, run_fleet, stamps
from .test_fleet_crash import each_revision_once, migration_lock, start, wait_for
from .test_fleet_postgresql import PASSWORD, example, revisions, write_fleet  # noqa: F401 - example: the fixture
from .test_fleet_sqlite import TENANTS, initial_of, retiring, stages, url  # noqa: F401 - retiring: the fixture

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_local_spark_brings_tenant_files_to_the_head_with_the_local_runners_report(example):
    revs = revisions(example)
    (example / "tenants").mkdir()
    names = ["acme", "globex", "initech", "umbrella"]
    (example / "fleet.yaml").write_text(
        f"url_template: sqlite:///{example}/tenants/{{name}}.db\nnames: [{', '.join(names)}]\n"
        "stages:\n  - name: canary\n    targets: [acme]\n  - name: rest\n    parallel: 2\n"
    )
    assert run_fleet(example, "upgrade", "--only", "globex", "--to", revs[1]).returncode == 0  # mixed revisions
    result = run_fleet(example, "upgrade", "--master", "local[2]", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert [(s["name"], s["status"], s["targets"]) for s in report["stages"]] == [("canary", "complete", 1), ("rest", "complete", 3)]
    assert {t["name"]: (t["from"], t["outcome"]) for t in report["targets"]} == {
        "acme": (None, "upgraded"),
        "globex": (revs[1], "upgraded"),
        "initech": (None, "upgraded"),
        "umbrella": (None, "upgraded"),
    }
    assert all(stamps(f"sqlite:///{example}/tenants/{n}.db") == [revs[-1]] for n in names)
    rows = [r for r in journal_rows(example / "fleet.journal.sqlite") if r["run"] == 2]
    assert sorted((r["target"], r["outcome"]) for r in rows) == [(n, "upgraded") for n in sorted(names)]
    assert all(r["worker"] and r["worker"] != os.getpid() for r in rows)  # the executors' Python workers ran them
    again = run_fleet(example, "upgrade", "--master", "local[2]")
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert again.stdout.splitlines()[:2] == [
        f"stage canary: complete, 1 target(s): 1 at revision ({again.stdout.splitlines()[0].rsplit('(', 1)[1]}",
        f"stage rest: complete, 3 target(s): 3 at revision ({again.stdout.splitlines()[1].rsplit('(', 1)[1]}",
    ]


def test_a_failure_stops_the_stage_between_waves_as_the_local_runner_stops_it(retiring):
    """A stage runs in waves of its parallel: after the wave with t03's refused drop, no target of the
    stage starts and no later stage; the report is the local runner's (test_fleet_sqlite), word for word."""
    fleet = retiring.root / "fleet.yaml"
    fleet.write_text(fleet.read_text() + stages("stop"))
    initial, head = initial_of(retiring), retiring.head()
    result = run_fleet(retiring.root, "upgrade", "--master", "local[2]")
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    at = {name: stamps(url(name, retiring)) for name in TENANTS}
    assert at == {"t01": [head], "t02": [head], **dict.fromkeys(["t03", "t04", "t05", "t06"], [initial])}
    out = result.stdout.splitlines()
    assert out[0] == f"stage first: stopped, 4 target(s): 2 upgraded, 1 failed, 1 not attempted ({out[0].rsplit('(', 1)[1]}"
    assert out[1] == "  stopped: 1 target(s) failed (the stage tolerates 0); first: t03"
    assert out[2].startswith(f"  failed t03 (first, at {initial}): refusing to drop queue")
    assert out[2].endswith(": sqltransport-schema fleet upgrade --master 'local[2]' --only t03 -x discard=Sales.host-b")
    assert out[3:] == [
        "  not attempted: t04",
        "stage second: not started, 2 target(s): 2 not attempted",
        "resume: sqltransport-schema fleet upgrade --master 'local[2]'",
    ]
    rows = [r for r in journal_rows(retiring.root / "fleet.journal.sqlite") if r["run"] == 2]
    assert {r["target"]: r["outcome"] for r in rows} == {"t01": "upgraded", "t02": "upgraded", "t03": "failed"}

    # two at a time: the wave of t03 holds t04 too, which runs; the stage stops after it
    wider = run_fleet(retiring.root, "upgrade", "--master", "local[2]", "--parallel", "2", "--format", "json")
    assert wider.returncode == 1, wider.stdout + wider.stderr[-3000:]
    report = json.loads(wider.stdout)
    assert {t["name"]: t["outcome"] for t in report["targets"]} == {
        "t01": "at_revision", "t02": "at_revision", "t03": "failed", "t04": "upgraded",
        "t05": "not_attempted", "t06": "not_attempted",
    }  # fmt: skip
    assert report["resume"] == "sqltransport-schema fleet upgrade --parallel 2 --master 'local[2]'"
    rows = [r for r in journal_rows(retiring.root / "fleet.journal.sqlite") if r["run"] == 3]
    workers = {r["target"]: r["worker"] for r in rows}
    assert workers["t03"] != workers["t04"]  # one wave, its partitions at once: two Python workers (one job each would reuse one)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class(*args: str, log: Path) -> subprocess.Popen:
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        [str(home / "bin" / "spark-class"), *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _wait_port(port: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on {port}")


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def test_a_standalone_cluster_with_a_worker_killed(example, tmp_path):
    revs = revisions(example)
    port = _free_port()
    master = _spark_class(
        "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port()),
        log=tmp_path / "master.log",
    )  # fmt: skip
    workers = []
    try:
        _wait_port(port)
        for index in range(2):
            workers.append(
                _spark_class(
                    "org.apache.spark.deploy.worker.Worker",
                    f"spark://127.0.0.1:{port}",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(_free_port()),
                    log=tmp_path / f"worker{index}.log",
                )  # fmt: skip
            )
        time.sleep(5)  # the workers register with the master
        with pg_databases(4, record=True) as names:
            write_fleet(example, names, "stages:\n  - name: all\n    parallel: 2\n")
            holders = [migration_lock(name) for name in names]  # every task waits: both executors are mid-run
            try:
                runner = start(example, "--master", f"spark://127.0.0.1:{port}", "--conf", "spark.executor.memory=512m")
                wait_for(lambda rows: sum(r["outcome"] == "running" for r in rows) >= 2, example / "fleet.journal.sqlite", timeout=300)
                time.sleep(10)  # the tasks reached their databases
                _stop(workers[0])  # a worker lost, with its executor and the tasks it ran
            finally:
                for holder in holders:
                    holder.close()
            out, err = runner.communicate(timeout=600)
            assert runner.returncode == 0, out + err[-3000:]
            assert f"every target reached {revs[-1]} (4 target(s))" in out
            each_revision_once(names, revs)
            assert all(stamps(pg_url(n)) == [revs[-1]] for n in names)
    finally:
        for process in [*workers, master]:
            _stop(process)
