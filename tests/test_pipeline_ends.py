"""How a move ends: `pipeline move` and `pipeline run` alike when messages arrive in the source during
the move (exit 1, the messages counted, what to do); a rerun's report of the keys each partition's
ledger row expected and those it found; the progress line of a resumed move (this run's rows only)."""

from __future__ import annotations

import io
import json
import threading
import uuid
from contextlib import contextmanager

import pytest

from sqltransport_schema import cli
from sqltransport_schema.engines.pipeline import LedgerRow
from sqltransport_schema.pipeline import move as pipeline_move
from sqltransport_schema.pipeline.connect import Endpoint, dbapi_connect
from sqltransport_schema.schema import TableName

from .support.pipeline import create_table, fill_queue, queue_contents, queue_spec
from .test_pipeline_plan import AFTER, BEFORE

HOST_B, SALES = TableName("Sales.host-b", "public"), TableName("Sales", "public")
COUNT = 30_000  # two partitions of the default size: the move takes long enough for sends to land during it


@contextmanager
def sending(url: str, table: TableName):
    """A sender on `table` (a message every few milliseconds, each committed) while the block runs."""
    stop, sent = threading.Event(), []

    def send() -> None:
        conn = dbapi_connect(url)
        conn.autocommit = True
        try:
            while not stop.wait(0.003):
                message_id = uuid.uuid4()
                conn.execute(f'INSERT INTO "public"."{table.table}" (Id, Headers, Body) VALUES (%s, %s, NULL)', (message_id, "{}"))
                sent.append(str(message_id))
        finally:
            conn.close()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(30)


@pytest.mark.parametrize("command", ["move", "run"])
def test_move_and_run_end_alike_when_messages_arrive_during_the_move(project, pg_url, capsys, command):
    if command == "run":
        project.deploy(pg_url, BEFORE, "before")
        project.write_topology(AFTER)
        assert project.compile("after") == 0
        argv = ["pipeline", "run", "-c", str(project.ini), "--url", pg_url, "--map", "Billing=Invoicing", "--no-spark"]
    else:
        create_table(pg_url, queue_spec(HOST_B.table, "public"))
        create_table(pg_url, queue_spec(SALES.table, "public"))
        argv = ["pipeline", "move", "--from-url", pg_url, "--from-table", "Sales.host-b@[public]", "--to-table", "Sales@[public]"]
        argv.append("--no-spark")
    fill_queue(pg_url, HOST_B, COUNT, seed=61)
    capsys.readouterr()
    with sending(pg_url, HOST_B) as sent:
        assert cli.main(argv) == 1
    out = capsys.readouterr().out
    left = len(queue_contents(pg_url, HOST_B))
    assert left > 0
    line = next(line for line in out.splitlines() if "during the move and are still there" in line)
    assert f"sqltransport-schema pipeline {command} " in line and "second pass" in line and "switched over" in line
    assert "Now: alembic" not in out  # the guarded drop would refuse
    if command == "run":
        assert "upgrade head after the last pass" in out
    assert cli.main([*argv, "--format", "json"]) == 0  # the second pass, nothing sent meanwhile
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "done"
    assert queue_contents(pg_url, HOST_B) == []
    assert len(queue_contents(pg_url, SALES)) == COUNT + len(sent)  # every message sent during the first pass, moved once


def test_a_rerun_reports_the_keys_each_ledger_row_expected_and_found(tmp_path, capsys):
    """A partition whose destination committed and whose claim was not dropped yet, its claim changed
    meanwhile (10 rows gone): the rerun drops the claim, says what it expected and found, and exits 1;
    the progress line of the resumed move counts only this run's rows."""
    source_url, dest_url = f"sqlite:///{tmp_path / 'source.db'}", f"sqlite:///{tmp_path / 'dest.db'}"
    source, dest = Endpoint(source_url, TableName("Sales")), Endpoint(dest_url, TableName("Sales"))
    for url in (source_url, dest_url):
        create_table(url, queue_spec("Sales"))
    fill_queue(source_url, TableName("Sales"), 300, seed=62)
    task, resumed = pipeline_move.prepare(source, dest, rows_per_partition=100)
    assert not resumed and len(task.ranges) == 3
    # partition 1 as a run killed after its destination commit leaves it: claimed, in the ledger, claim not dropped
    src = dbapi_connect(source_url)
    sql = source.dialect.pipeline
    claim = pipeline_move.claim_table(task, 1)
    sql.begin(src, write=True)
    assert sql.claim(src, source.target, claim, *task.ranges[1], task.src_high) == 100
    keys = sql.claim_keys(src, claim)
    src.execute(f'DELETE FROM "{claim.name.table}" WHERE RowVersion IN (SELECT RowVersion FROM "{claim.name.table}" LIMIT 10)')
    sql.commit(src)
    src.close()
    dst = dbapi_connect(dest_url)
    dest.dialect.pipeline.begin(dst, write=True)
    dest.dialect.pipeline.insert_ledger(dst, LedgerRow(task.move_id, 1, *task.ranges[1], 100, "x", pipeline_move.pack_keys(keys)))
    dest.dialect.pipeline.commit(dst)
    dst.close()

    stream = io.StringIO()
    with pipeline_move.Progress(dest, task.move_id, 3, "move", stream=stream) as progress:
        assert progress.baseline == 100
        assert progress.line(2, 250, 1.0) == "[move] 2/3 partitions, 250 rows (100 of them before this run), 150 rows/s\n"

    argv = ["pipeline", "move", "--from-url", source_url, "--from-table", "Sales", "--to-url", dest_url, "--no-spark"]
    assert cli.main([*argv, "--rows-per-partition", "100"]) == 1
    out = capsys.readouterr().out
    assert "partition 1 (committed by an earlier run): the ledger expected 100 key(s), found 90 (claim dropped); they differ" in out
    assert queue_contents(source_url, TableName("Sales")) == []
    assert len(queue_contents(dest_url, TableName("Sales"))) == 200  # partitions 0 and 2 now; 1's rows were never written here
    assert cli.main([*argv, "--format", "json"]) == 0  # a finished move is not resumed: nothing left, nothing to report
    assert json.loads(capsys.readouterr().out)["settled"] == []


def test_a_row_a_receiver_holds_stays_the_receivers_and_the_move_does_not_wait(pg_url, pg_url2):
    """A receiver's batch in flight holds a row of the first partition: the one-pass claim gives up on it
    after its short lock wait, the partition is claimed passing over the held row, and the move ends
    with that row left in the source (reported), every other one moved once."""
    for url in (pg_url, pg_url2):
        create_table(url, queue_spec(SALES.table, "public"))
    fill_queue(pg_url, SALES, 1_000, seed=63)
    before = queue_contents(pg_url, SALES)
    receiver = dbapi_connect(pg_url)
    held = receiver.execute(  # one row (FOR UPDATE beside OFFSET would lock the rows skipped too)
        'SELECT Id FROM "public"."Sales" WHERE Seq = (SELECT Seq FROM "public"."Sales" ORDER BY Seq OFFSET 10 LIMIT 1) FOR UPDATE'
    ).fetchone()[0]
    try:
        result = pipeline_move.move(Endpoint(pg_url, SALES), Endpoint(pg_url2, SALES), progress=False, rows_per_partition=400)
    finally:
        receiver.rollback()  # the receiver's transaction rolls back: the message is the source's again
        receiver.close()
    assert result.remaining_in_source == 1 and result.rows == 999
    assert [row[0] for row in queue_contents(pg_url, SALES)] == [str(held)]
    assert queue_contents(pg_url2, SALES) == [row for row in before if row[0] != str(held)]  # in order, once
