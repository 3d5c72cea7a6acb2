"""`sqltransport-schema outbox cleanup --older-than DURATION` and runtime.outbox.cleanup on real SQLite,
PostgreSQL and MariaDB: the rows of every outbox table dispatched before the cutoff are deleted in
batches (a progress line each), dispatched newer rows and rows not dispatched stay; user mistakes
are one error line and exit 2."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from sqltransport_schema import cli
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.outbox import OutboxTable, cleanup

from .support.commands import run

TOPOLOGY = """\
transport_version: "9.1"
engines: [sqlite, mysql]
endpoints:
  - name: Sales.Api
    outbox: true
  - name: Billing
    table_prefix: Bill_
    outbox: true
"""
NOW = datetime.now(timezone.utc)
OLD = NOW - timedelta(days=2)
# message -> when it was dispatched (None: not yet)
SALES_ROWS = {"m-1": OLD, "m-2": OLD - timedelta(hours=1), "m-3": OLD, "m-4": NOW, "m-5": None}
BILLING_ROWS = {"b-1": OLD, "b-2": None}


@pytest.fixture
def outboxes(project, saga_db):
    """Both outbox tables deployed and filled with SALES_ROWS and BILLING_ROWS; (url, engine, tables)."""
    # two outboxes in one PostgreSQL schema are refused (their index names would clash): Billing's in its own
    on_postgresql = TOPOLOGY.replace("[sqlite, mysql]", "[postgresql]") + "    schema: billing\n"
    topology = on_postgresql if saga_db.startswith("postgresql") else TOPOLOGY
    url = project.deploy(saga_db, topology, "outboxes")
    engine = make_engine(url)
    names = ("Sales_Api_OutboxData", "Bill_OutboxData")
    schemas = {"Bill_OutboxData": "billing"} if saga_db.startswith("postgresql") else {}
    tables = {name: OutboxTable.from_database(engine, name, schemas.get(name), config_file=str(project.ini)) for name in names}
    with engine.begin() as conn:
        for name, rows in (("Sales_Api_OutboxData", SALES_ROWS), ("Bill_OutboxData", BILLING_ROWS)):
            for message_id, dispatched_at in rows.items():
                tables[name].store(conn, message_id, [])
                if dispatched_at is not None:
                    tables[name].set_dispatched(conn, message_id, dispatched_at)
    yield url, engine, tables
    engine.dispose()


def _left(engine, table: OutboxTable, ids) -> list[str]:
    with engine.connect() as conn:
        return [message_id for message_id in ids if table.get(conn, message_id) is not None]


def test_cleanup_deletes_old_dispatched_rows_in_batches(project, outboxes):
    url, engine, tables = outboxes
    seen = []
    report = cleanup(engine, timedelta(days=1), batch_size=2, config_file=str(project.ini), progress=lambda *p: seen.append(p))
    sales, billing = (tables[n].display for n in ("Sales_Api_OutboxData", "Bill_OutboxData"))
    assert report.deleted == {sales: 3, billing: 1}
    assert report.batches == {sales: 2, billing: 1}  # 2, then 1 (short: done); 1
    assert seen == [(sales, 2, 1), (sales, 3, 2), (billing, 1, 1)]
    assert _left(engine, tables["Sales_Api_OutboxData"], SALES_ROWS) == ["m-4", "m-5"]  # newer, and not dispatched
    assert _left(engine, tables["Bill_OutboxData"], BILLING_ROWS) == ["b-2"]
    assert cleanup(engine, timedelta(0), config_file=str(project.ini)).total == 1  # m-4; m-5 is never deleted
    assert _left(engine, tables["Sales_Api_OutboxData"], SALES_ROWS) == ["m-5"]


def test_the_command_cleans_up_with_a_progress_line_per_batch(project, outboxes, capsys):
    url, engine, tables = outboxes
    argv = ["outbox", "cleanup", "--older-than", "1d", "--url", url, "--batch-size", "2", "-c", str(project.ini)]
    assert cli.main([*argv, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    payload = json.loads(out)
    assert (payload["status"], payload["deleted"], payload["batch_size"]) == ("cleaned", 4, 2)
    assert [(t["deleted"], t["batches"]) for t in payload["tables"]] == [(3, 2), (1, 1)]
    assert len(err.splitlines()) == 3 and all(line.startswith("outbox cleanup: ") for line in err.splitlines())
    assert cli.main([*argv[:-2], "-c", str(project.ini)]) == 0  # text: nothing left that old
    assert capsys.readouterr().out.startswith("deleted 0 outbox row(s) dispatched before ")
    assert _left(engine, tables["Sales_Api_OutboxData"], SALES_ROWS) == ["m-4", "m-5"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--older-than", "7 weeks"], "argument --older-than: '7 weeks' is not an age: give a number and its unit, e.g. 90m, 12h or 7d"),
        (["--older-than", "1d", "--batch-size", "0"], "the batch size must be at least 1, not 0"),
    ],
)
def test_user_mistakes_are_one_error_line(project, sqlite_url, extra, message):
    project.deploy(sqlite_url, TOPOLOGY)
    result = run(project.root, "outbox", "cleanup", "--url", sqlite_url, *extra)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {message}") and len(result.stderr.splitlines()) == 1


def test_a_topology_without_an_outbox_table_is_refused(project, sqlite_url, capsys):
    project.deploy(sqlite_url, 'transport_version: "9.1"\nendpoints:\n  - name: Sales\n')
    capsys.readouterr()  # what compile wrote
    assert cli.main(["outbox", "cleanup", "--older-than", "1d", "--url", sqlite_url, "-c", str(project.ini)]) == 2
    assert capsys.readouterr().err == "error: the deployed topology has no outbox table (`outbox: true` on an endpoint declares one)\n"
