"""A move between two PostgreSQL databases, SIGKILLed at each of its steps (pipeline/move.py FAILPOINTS)
while a sender keeps sending to the source queue, then run again a few seconds later, with a
MessagePump (batch 50, concurrency 4) handling the source queue from the kill on: every message id is
exactly once across the source queue, the destination queue, the handler's results and the error queue.
(Under the protocol before claims, the kill after the destination's commit left the partition's rows
unlocked in the source, and this pump handled them a second time.) Runs without Spark (`--no-spark`:
a partition's steps are the same in a Spark task; tests/test_pipeline_crash.py kills a Spark job);
tests/test_pipeline_ends.py holds a row as a receiver's batch does during a move."""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from sqltransport_schema.db import make_engine
from sqltransport_schema.pipeline import move as pipeline_move
from sqltransport_schema.pipeline.connect import Endpoint, dbapi_connect
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport
from sqltransport_schema.schema import TableName

from .support.pipeline import create_table, queue_spec

COUNT = 12_000
PER_PARTITION = 1_000  # 12 partitions; the failpoints of a partition stop at the fifth, while the pump works at the head
SALES, ERROR = TableName("Sales", "public"), TableName("error", "public")


class LiveSource:
    """The source queue's endpoint while the move runs: a MessagePump whose handler records each id in
    `handled` (in the receive's transaction; every 40th message, every 10th sent late, fails to the
    error queue) and a sender."""

    def __init__(self, url: str):
        self.engine = make_engine(url)
        self.transport = Transport(self.engine, "9.1")
        self.queue = self.transport.queue("Sales")
        with self.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE handled (id uuid PRIMARY KEY)")  # a second handling of an id fails
        self.sent: list[str] = []
        self._stop = threading.Event()
        self.pump = MessagePump(
            self.transport,
            self.queue,
            self._handle,
            batch_size=50,
            concurrency=4,
            peek_delay=0.1,
            immediate_retries=0,
            delayed_retries=0,
            error_queue="error",
        )
        self._sender = threading.Thread(target=self._send, daemon=True)

    def fill(self, count: int) -> None:
        with self.engine.begin() as conn:
            self.sent += self.queue.send_many(conn, [(b"m", {"n": str(n), "fail": str(n % 40 == 0)}) for n in range(count)])

    @staticmethod
    def _handle(message, context) -> None:
        if message.headers.get("fail") == "True":
            raise RuntimeError("this message fails: to the error queue")
        time.sleep(0.02)  # slow enough (about 200 messages a second) that the queue outlives the job's start
        context.connection.exec_driver_sql("INSERT INTO handled (id) VALUES (%(id)s)", {"id": message.id})

    def _send(self) -> None:
        n = 0
        while not self._stop.wait(0.01):
            with self.engine.begin() as conn:
                self.sent.append(self.queue.send(conn, b"late", {"n": f"late-{n}", "fail": str(n % 10 == 0)}))
            n += 1

    def start_sending(self) -> None:
        self._sender.start()

    def start_receiving(self) -> None:
        self.pump.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sender.is_alive():
            self._sender.join(30)
        self.pump.stop(60)
        self.engine.dispose()
        assert self.pump.failure is None, self.pump.failure


def _ids(url: str, sql: str) -> list[str]:
    conn = dbapi_connect(url)
    try:
        return [str(row[0]) for row in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def _kill_at(point: str, source_url: str, dest_url: str, marker) -> None:
    env = {**os.environ, pipeline_move.FAILPOINT_ENV: point, pipeline_move.FAILPOINT_FILE_ENV: str(marker)}
    command = [sys.executable, "-m", "sqltransport_schema.cli", "pipeline", "move", "--no-spark", "--format", "json"]
    command += ["--from-url", source_url, "--from-table", "Sales@[public]", "--to-url", dest_url, "--to-table", "Sales@[public]"]
    command += ["--rows-per-partition", str(PER_PARTITION)]
    job = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if job.poll() is not None:
                out, err = job.communicate()
                pytest.fail(f"the job ended before reaching {point}: {out.decode()} {err.decode()[-2000:]}")
            assert time.monotonic() < deadline, f"the job never reached {point}"
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


POINTS = [p if p in ("after-reserve", "before-finish") else f"{p}:4" for p in pipeline_move.FAILPOINTS]


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_a_move_killed_at_any_step_with_live_traffic_leaves_every_message_once(pg_url, pg_url2, tmp_path, caplog, point):
    caplog.set_level(logging.CRITICAL, logger="sqltransport_schema.pump")  # the failing messages' lines
    for url, name in ((pg_url, SALES), (pg_url, ERROR), (pg_url2, SALES)):
        create_table(url, queue_spec(name.table, name.schema))
    live = LiveSource(pg_url)
    live.fill(COUNT)
    live.start_sending()
    try:
        _kill_at(point, pg_url, pg_url2, tmp_path / f"reached-{uuid.uuid4().hex}")
        # the endpoint's pump runs from the kill on (before, it would take the head of the queue the
        # job is moving, and the job would have less to be killed in), through the rerun, which comes
        # later: a few of the pump's batches first
        live.start_receiving()
        time.sleep(3)
        result = pipeline_move.move(Endpoint(pg_url, SALES), Endpoint(pg_url2, SALES), progress=False, rows_per_partition=PER_PARTITION)
    finally:
        live.stop()
    assert result.mismatched == []
    if point.startswith(("after-dest-commit", "before-release-commit")):
        assert [(s["part"], s["expected"] == s["found"]) for s in result.settled] == [(4, True)]  # its claim, dropped now
    places = {
        "source": _ids(pg_url, 'SELECT Id FROM "public"."Sales"'),
        "destination": _ids(pg_url2, 'SELECT Id FROM "public"."Sales"'),
        "handled": _ids(pg_url, "SELECT id FROM handled"),
        "error": _ids(pg_url, 'SELECT Id FROM "public"."error"'),
    }
    seen = collections.Counter(i for ids in places.values() for i in ids)
    twice = {i: [p for p, ids in places.items() if i in ids] for i, n in seen.items() if n > 1}
    assert twice == {}, f"{len(twice)} id(s) more than once, e.g. {list(twice.items())[:3]}"
    assert set(seen) == set(live.sent)  # none lost, none made up
    assert places["destination"] and places["handled"], {p: len(ids) for p, ids in places.items()}  # both sides took part
    claims = _ids(pg_url, f"SELECT tablename FROM pg_tables WHERE tablename LIKE '{pipeline_move.CLAIM_PREFIX}%'")
    assert claims == []  # every claim dropped
