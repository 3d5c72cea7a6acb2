"""Crash safety of pipeline move: the job process group (driver, JVM, Python workers) is killed with
SIGKILL at different points of the protocol, then the move is run again: every message is in the
destination exactly once and gone from the source, in FIFO order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from sqltransport_schema.pipeline import move as pipeline_move
from sqltransport_schema.pipeline.connect import Endpoint, dbapi_connect
from sqltransport_schema.schema import TableName

from .support.pipeline import checksum, create_table, fill_queue, queue_contents, queue_spec

COUNT = 20_000
PER_PARTITION = 2_000


def _kill_job_at(point: str, source_url: str, source: TableName, dest_url: str, dest: TableName, marker) -> None:
    env = dict(os.environ)
    env[pipeline_move.FAILPOINT_ENV] = point
    env[pipeline_move.FAILPOINT_FILE_ENV] = str(marker)
    command = [
        sys.executable,
        "-m",
        "sqltransport_schema.cli",
        "pipeline",
        "move",
        "--from-url",
        source_url,
        "--from-table",
        _address(source),
        "--to-url",
        dest_url,
        "--to-table",
        _address(dest),
        "--rows-per-partition",
        str(PER_PARTITION),
        "--master",
        "local[2]",
        "--format",
        "json",
    ]
    job = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            if job.poll() is not None:
                out, err = job.communicate()
                pytest.fail(f"the job ended before reaching {point}: {out.decode()} {err.decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the job never reached {point}")
            time.sleep(0.1)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the whole job: driver, JVM and its Python workers
        job.wait()


def _committed_partitions(dest_url: str) -> set[int]:
    """Partitions the destination's ledger records as committed (the move's ledger lives there)."""
    from sqltransport_schema.engines.pipeline import LEDGER

    conn = dbapi_connect(dest_url)
    try:
        cur = conn.cursor()
        cur.execute(f'SELECT part FROM "{LEDGER}"')
        return {row[0] for row in cur.fetchall()}
    finally:
        conn.close()


def _claimed(url: str) -> int:
    """Rows held in the move's claim tables of the source database (pipeline/move.py's protocol)."""
    conn = dbapi_connect(url)
    try:
        cur = conn.cursor()
        cur.execute("SELECT schemaname, tablename FROM pg_tables WHERE starts_with(tablename, %s)", (pipeline_move.CLAIM_PREFIX,))
        return sum(len(queue_contents(url, TableName(table, schema))) for schema, table in cur.fetchall())
    finally:
        conn.close()


def _address(name: TableName) -> str:
    return name.table + (f"@[{name.schema}]" if name.schema else "")


@pytest.mark.slow
@pytest.mark.parametrize(
    "point, destination",
    [
        ("after-reserve", "postgresql"),
        ("before-dest-commit:1", "postgresql"),
        ("after-dest-commit:2", "sqlite"),
        ("after-release:3", "sqlite"),
    ],
)
def test_killed_move_reruns_to_exactly_once(spark, tmp_path, pg_url, sqlite_url, point, destination):
    source = TableName("Sales", "public")
    create_table(pg_url, queue_spec("Sales", "public"))
    fill_queue(pg_url, source, COUNT, seed=11)
    before = queue_contents(pg_url, source)
    if destination == "postgresql":
        dest_url, dest = pg_url, TableName("Sales.moved", "public")
    else:
        dest_url, dest = sqlite_url, TableName("Sales")
    create_table(dest_url, queue_spec(dest.table, dest.schema))

    _kill_job_at(point, pg_url, source, dest_url, dest, tmp_path / f"reached-{uuid.uuid4().hex}")
    # nothing lost at the moment of the crash: each message in the source, a claim (a partition taken from the
    # source and not yet released, parallel tasks' too) or the destination
    found = len(queue_contents(pg_url, source)) + len(queue_contents(dest_url, dest)) + _claimed(pg_url)
    assert found >= COUNT
    committed = _committed_partitions(dest_url)  # other tasks run in parallel: as many as finished
    if point.startswith("before-dest-commit"):
        assert int(point.split(":")[1]) not in committed  # killed before its commit: not in the ledger

    result = pipeline_move.move(
        Endpoint(pg_url, source), Endpoint(dest_url, dest), spark=spark, progress=False, rows_per_partition=PER_PARTITION
    )
    after = queue_contents(dest_url, dest)
    assert queue_contents(pg_url, source) == []
    assert checksum(after) == checksum(before)  # exactly once: same count, same content
    assert [r[0] for r in after] == [r[0] for r in before]  # FIFO kept
    assert result.rows == COUNT
    if point != "after-reserve":
        # the rerun continues the same move and skips exactly the partitions committed before the kill
        assert result.resumed and result.skipped_partitions == len(committed)
