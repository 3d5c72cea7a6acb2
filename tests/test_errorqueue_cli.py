"""The error queue's archive from the command line (`archive`, `restore`, `purge`): the model the
console calls (errorqueue.ErrorQueue), run in-process through cli.main on real SQLite and PostgreSQL:
what each moves, what it refuses before anything moves, what the action log says."""

from __future__ import annotations

import json
import time

import pytest

from sqltransport_schema import cli
from sqltransport_schema.errorqueue import ErrorQueue, Selection

from .support.console import console_bus, fail
from .support.runtime import deployed


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def bus(project, db_url, monkeypatch):
    """The console's topology (the error queue with its archive, the action log) deployed; 5 Sales
    failures and 2 Billing ones in the error queue."""
    gen = console_bus(project, db_url, monkeypatch)
    transport = next(gen)
    fail(transport, "Sales", 5, TimeoutError("database timeout"))
    fail(transport, "Billing", 2, KeyError("customer"), start=10)
    yield transport, db_url
    next(gen, None)


def _counts(transport) -> tuple[int, int]:
    """(messages in the error queue, messages archived)."""
    queue = ErrorQueue(transport)
    return queue.count(), queue.archived_count()


def test_archive_restore_and_purge_move_what_they_are_asked_and_log_it(bus, capsys):
    transport, url = bus
    sales = transport.queue("Sales").address
    code, out, _ = run_cli(capsys, "archive", "--url", url, "--failed-queue", sales, "--dry-run")
    assert (code, out.strip()) == (0, "would archive 5 message(s)") and _counts(transport) == (7, 0)

    # a bare name, as retry takes it: the queue where the blueprint puts it, whatever the FailedQ's spelling
    code, out, _ = run_cli(capsys, "archive", "--url", url, "--failed-queue", "Sales", "--why", "fixed upstream", "--format", "json")
    report = json.loads(out)
    assert code == 0 and (report["moved"], report["not_found"], report["chosen"]) == (5, 0, 5)
    assert _counts(transport) == (2, 5)
    queue = ErrorQueue(transport)
    archived, _ = queue.archived_page()
    assert {a.why for a in archived} == {"fixed upstream"} and all(a.by.endswith("(command line)") for a in archived)
    [logged] = queue.log.history()
    assert logged["action"] == "archive (done)" and logged["messages"] == 5 and logged["who"].endswith("(command line)")
    assert all(a.id in logged["target"] for a in archived)  # each message's history finds it
    assert queue.log.about(archived[0].id)[0]["action"] == "archive (done)"

    absent = "6c9b3c36-2a0e-4a49-9e43-8d1f0c1a2b3c"
    code, out, _ = run_cli(capsys, "restore", "--url", url, "--message-id", archived[0].id, archived[1].id.upper(), absent)
    assert code == 1  # an Id asked is not archived: the command's finding
    assert out.splitlines() == ["restored 2 message(s) into error in 1 batch(es)", f"not archived: message {absent}"]
    assert _counts(transport) == (4, 3)
    assert run_cli(capsys, "restore", "--url", url, "--all")[0] == 0 and _counts(transport) == (7, 0)

    assert run_cli(capsys, "archive", "--url", url, "--all", "--batch-size", "3")[1].startswith("archived 7 message(s)")
    code, out, err = run_cli(capsys, "purge", "--url", url, "--older-than", "1h")
    assert (code, out) == (2, "") and err.startswith("error: purge deletes") and len(err.splitlines()) == 1
    assert _counts(transport) == (0, 7)  # nothing deleted without --yes
    assert run_cli(capsys, "purge", "--url", url, "--older-than", "1h", "--yes")[1].startswith("purged 0 ")
    time.sleep(0.05)
    code, out, _ = run_cli(capsys, "purge", "--url", url, "--older-than", "1ms", "--yes", "--batch-size", "5", "--format", "json")
    assert code == 0 and (json.loads(out)["moved"], json.loads(out)["batches"]) == (7, 2) and _counts(transport) == (0, 0)
    actions = [(a["action"], a["messages"]) for a in queue.log.history()]
    assert actions[:3] == [("purge (done)", 7), ("archive (done)", 7), ("restore (done)", 3)]


def test_mistakes_are_one_error_line_before_anything_moves(bus, capsys):
    transport, url = bus
    code, out, err = run_cli(capsys, "archive", "--url", url, "--message-id", "1; DROP TABLE error")
    assert (code, out) == (2, "") and err.startswith("error: ids: ") and "GUID" in err and len(err.splitlines()) == 1
    code, _, err = run_cli(capsys, "archive", "--url", url, "--all", "--batch-size", "0")
    assert code == 2 and err.startswith("error: batch size must be at least 1")
    with pytest.raises(SystemExit) as parsed:  # argparse's own error: one line, exit 2
        cli.main(["purge", "--url", url, "--older-than", "soon", "--yes"])
    err = capsys.readouterr().err
    assert parsed.value.code == 2 and err.startswith("error: argument --older-than: 'soon' is not an age") and len(err.splitlines()) == 1
    assert _counts(transport) == (7, 0)


def test_an_error_queue_without_an_archive_is_refused_with_what_to_declare(project, sqlite_url, monkeypatch, capsys):
    transport = deployed(project, sqlite_url, monkeypatch)
    capsys.readouterr()
    try:
        for argv in (["archive", "--all"], ["restore", "--all"], ["purge", "--older-than", "1d", "--yes"]):
            code, out, err = run_cli(capsys, *argv, "--url", sqlite_url)
            assert (code, out) == (2, "") and err.startswith("error: the error queue error has no archive table"), argv
            assert len(err.splitlines()) == 1
    finally:
        transport.engine.dispose()


def test_retry_takes_the_same_selection_as_the_console(bus, capsys):
    """The command line's retry and a filter's retry (the console's) are one model's: a group's
    messages back to their queue, the rest left."""
    transport, url = bus
    queue = ErrorQueue(transport)
    [group] = [g for g in queue.groups("exception") if g.key["exception_type"] == "KeyError"]
    report = queue.retry(Selection.of({"group": group.id, "by": "exception"}))
    assert (report.moved, queue.count()) == (2, 5)
    code, out, _ = run_cli(capsys, "retry", "--url", url, "--failed-queue", transport.queue("Sales").address, "--dry-run")
    assert code == 0 and out.startswith("would move 5 message(s)") and queue.count() == 5
