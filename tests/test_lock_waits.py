"""Bounded lock waits (docs/live-migrations.md): on real PostgreSQL, a migration blocked by a
session holding a queue gives up each wait after lock_timeout, rolls back (releasing every other
queue it had locked, so their senders go on) and retries until the holder lets go; with
lock_retry_for spent it ends in one FAILED line and leaves the database as it was."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg

from sqltransport_schema import engines
from sqltransport_schema.migrate.locks import LockPolicy, format_duration, parse_duration
from sqltransport_schema.schema import TableName
from sqltransport_schema.versions import profile

from .support.commands import alembic, failed_line
from .support.locks import PG, TOPOLOGY, Sender, hold, libpq, seq_type, start_alembic


def test_a_blocked_migration_retries_without_holding_senders_and_completes(widening, pg_url):
    holder = hold(pg_url, "error")
    holder_pid = holder.info.backend_pid
    sender = Sender(pg_url, "Sales")  # Sales: the queue the run altered before it waited on error
    blocked = Sender(pg_url, "error")  # error: the queue the holder keeps
    sender.start()
    blocked.start()
    started = time.monotonic()
    migration = start_alembic(widening, pg_url, "lock_timeout=500ms", "lock_retry_for=1m")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(migration.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while sum("waited 500ms" in line for line in lines) < 3 and time.monotonic() < deadline:  # three attempts blocked
        time.sleep(0.05)
    assert migration.poll() is None, "".join(lines)  # still waiting for the holder
    during, during_blocked = list(sender.latencies), list(blocked.latencies)
    holder.commit()  # the reader lets go
    holder.close()
    migration.wait(timeout=120)
    reader.join(10)
    err = "".join(lines)
    elapsed = time.monotonic() - started
    for thread in (sender, blocked):
        thread.stop.set()
        thread.join(10)
        assert thread.error is None, thread.error
    assert migration.returncode == 0, err

    # each attempt waited 0.5 s, then rolled back and released Sales: sends never waited longer
    assert len(during) >= 30, during
    assert max(during) < 0.5 + 0.5, sorted(during)[-5:]
    assert sorted(during)[len(during) // 2] < 0.1  # most sends did not wait at all
    # senders of the held queue itself wait behind an attempt's ALTER at most one lock_timeout
    assert len(during_blocked) >= 20 and max(during_blocked) < 0.5 + 0.5, sorted(during_blocked)[-5:]
    waits = [line for line in err.splitlines() if "waited 500ms for a lock on" in line]
    assert len(waits) >= 3, err
    assert 'a lock on "public"."error" (change Seq of queue "public"."error" from serial to bigserial): held by pid ' in waits[0]
    assert f"pid {holder_pid} (queue-reader, idle in transaction, query started " in waits[0], waits[0]
    assert waits[0].count("pid ") == 1, waits[0]  # the reader alone: not the sends that came and went meanwhile
    assert 'SELECT count(*) FROM "public"."error"' in waits[0] and "retrying in" in waits[0]
    assert "upgrade done on attempt" in err
    assert seq_type(pg_url, "Sales") == seq_type(pg_url, "error") == "bigint"
    assert elapsed < 30


def test_lock_retry_for_spent_fails_in_one_line_and_changes_nothing(widening, pg_url):
    holder = hold(pg_url, "error")
    try:
        result = alembic(widening, "-x", f"url={pg_url}", "-x", "lock_timeout=300ms", "-x", "lock_retry_for=2s", "upgrade", "head")
        line = failed_line(result)
    finally:
        holder.close()
    assert line.startswith('FAILED: gave up waiting for a lock on "public"."error" after ')
    assert (
        "(queue-reader, idle in transaction" in line
        and "Nothing was changed (the upgrade rolled back). Run it again once the holder is done" in line
    )
    assert line.endswith(f"alembic -x url={pg_url} -x lock_timeout=300ms -x lock_retry_for=10m upgrade head")
    # the whole run rolled back: Sales, altered before the wait, is still serial; the stamp unchanged
    assert seq_type(pg_url, "Sales") == seq_type(pg_url, "error") == "integer"
    rerun = alembic(widening, "-x", f"url={pg_url}", "upgrade", "head")
    assert rerun.returncode == 0, rerun.stderr
    assert seq_type(pg_url, "Sales") == "bigint"


def test_a_duration_needs_its_unit(widening, pg_url):
    line = failed_line(alembic(widening, "-x", f"url={pg_url}", "-x", "lock_timeout=5", "upgrade", "head"))
    assert line == "FAILED: -x lock_timeout=5: give a duration with its unit, e.g. lock_timeout=500ms, 5s, 10m or 1h (0: none)"


def test_durations():
    assert [parse_duration(t, "x") for t in ("2s", "500ms", "10m", "10min", "1h", "0", "1.5s")] == [
        2000, 500, 600_000, 600_000, 3_600_000, 0, 1500,
    ]  # fmt: skip
    assert [format_duration(ms) for ms in (2000, 500, 600_000, 3_600_000, 1500)] == ["2s", "500ms", "10m", "1h", "1500ms"]
    assert LockPolicy.from_x({}) == LockPolicy(2000, 600_000)
    assert [PG.lock_timeout_setting(ms) for ms in (2000, 500, 600_000)] == ["2s", "500ms", "10min"]


# --------------------------------------------------------------------------- offline scripts
def test_the_offline_postgresql_script_sets_the_lock_timeout(widening, capsys):
    from sqltransport_schema import cli

    offline = widening.offline("postgresql://")
    assert offline.startswith("BEGIN;\n\nSET lock_timeout = '2s';\n\n")
    assert cli.main(["script", "--engine", "postgresql", "-c", str(widening.ini), "--lock-timeout", "5s"]) == 0
    text = capsys.readouterr().out
    assert "\nBEGIN;\n\nSET lock_timeout = '5s';\n\n" in text
    assert "-- Each statement that locks a table waits at most 5s for its lock. Run it with psql -v ON_ERROR_STOP=1 -f FILE" in text
    assert '--   rewrite "public"."Sales": change Seq of queue "public"."Sales" from serial to bigserial (exclusive lock' in text
    assert "Seq integer -> bigint rewrites every row" in text


def test_each_file_of_a_split_script_sets_it(widening, tmp_path):
    from sqltransport_schema import cli

    folder = tmp_path / "split"
    assert cli.main(["script", "--engine", "postgresql", "-c", str(widening.ini), "--split", str(folder)]) == 0
    files = sorted(folder.iterdir())
    assert len(files) >= 3
    for path in files:
        text = path.read_text()
        assert "SET lock_timeout = '2s';" in text, path
        assert '--   rewrite "public"."Sales"' in text  # every file's header says what the whole script locks


def test_script_url_counts_the_rows_of_each_table_it_rewrites(widening, pg_url, capsys):
    from sqltransport_schema import cli

    sender = Sender(pg_url, "Sales")
    with psycopg.connect(libpq(pg_url), autocommit=True) as conn:
        for _ in range(7):
            conn.execute(sender.sql, (uuid.uuid4(), None, "{}", b"x"))
    first = widening.revisions()[0].name.split("_")[1]
    args = ["script", "--engine", "postgresql", "-c", str(widening.ini), "--from", first, "--url", pg_url]
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "-- Tables it changes in place (rows as counted in the database):" in text
    assert "rewrites every row and rebuilds the table's indexes; 7 rows)" in text
    assert "from serial to bigserial (exclusive lock for the whole rewrite: Seq integer -> bigint" in text
    assert cli.main([*args[:-1], "sqlite:///" + str(widening.root / "x.db")]) == 2
    assert capsys.readouterr().err.strip() == "error: --url is a sqlite database; the script is for postgresql"


def test_compile_names_the_rewrites(project, capsys):
    import json

    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    capsys.readouterr()
    project.write_topology(TOPOLOGY + "postgresql:\n  seq_type: bigserial\n")
    assert project.compile("bigserial") == 0
    out = capsys.readouterr().err  # what compile wrote: status lines, on stderr
    assert "Tables it changes in place (each statement waits at most -x lock_timeout, 2s by default, for its lock):" in out
    assert '  postgresql: rewrite "public"."Sales": change Seq of queue "public"."Sales" from serial to bigserial' in out
    project.write_topology(TOPOLOGY.replace("queues:", "    body_string: true\nqueues:") + "postgresql:\n  seq_type: bigserial\n")
    assert project.compile("body string", "--format", "json") == 0
    locks = json.loads(capsys.readouterr().out)["locks"]
    by_engine = {(e["engine"], e["table"]): e for e in locks}
    assert by_engine[("postgresql", '"public"."Sales"')]["lock"] == "rewrite"
    assert "STORED generated column" in by_engine[("postgresql", '"public"."Sales"')]["reason"]
    assert by_engine[("mssql", "[dbo].[Sales]")]["lock"] == "short"  # a computed column, metadata only
    assert ("sqlite", '"Sales"') in by_engine


MSSQL_TOPOLOGY = """\
transport_version: "{version}"
engines: [mssql]
endpoints:
  - name: Sales
    body_string: {body}
queues:
  - name: error
"""


def test_sql_server_scripts_bound_the_batches_that_lock_existing_tables_and_parse(project, capsys):
    from sqltransport_schema import cli

    from .support.tsql import assert_parses

    project.write_topology(MSSQL_TOPOLOGY.format(version="4.0", body="false"))
    assert project.compile("initial") == 0
    project.write_topology(MSSQL_TOPOLOGY.format(version="9.1", body="true"))
    assert project.compile("upgrade") == 0
    first = project.revisions()[0].name.split("_")[1]
    capsys.readouterr()
    assert cli.main(["script", "--engine", "mssql", "-c", str(project.ini), "--from", first, "--lock-timeout", "3s"]) == 0
    text = capsys.readouterr().out
    assert "-- Each statement that locks a table waits at most 3s for its lock. Run it with sqlcmd -b -x -f 65001 -i FILE" in text
    assert "rewrite [dbo].[Sales]: change queue [dbo].[Sales] from transport 4.0 to 9.1" in text
    assert "Index_RowVersion clustered -> nonclustered rebuilds the table" in text
    batches = [b.strip() for b in text.split("\nGO\n") if b.strip()]
    bounded = [b for b in batches if "SET LOCK_TIMEOUT 3000;" in b]
    assert len(bounded) >= 4  # the version change of each queue, and BodyString on Sales and its delayed table
    for batch in bounded:
        body = batch[batch.index("SET LOCK_TIMEOUT") :]
        assert_parses(body, body.splitlines()[1][:60])
    creates = [b for b in batches if "CREATE TABLE" in b and "alembic_version" not in b]
    assert creates and not any("LOCK_TIMEOUT" in b for b in creates)  # new tables: the installer's applock waits as it does


def test_sqlite_waits_for_the_write_lock_as_long_as_lock_timeout(project, sqlite_url):
    import sqlite3

    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={sqlite_url}", "upgrade", "head").returncode == 0
    project.write_topology(TOPOLOGY.replace("queues:", "  - name: Billing\nqueues:"))
    assert project.compile("billing") == 0
    writer = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # a pump's write transaction, kept open
    try:
        started = time.monotonic()
        result = alembic(project, "-x", f"url={sqlite_url}", "-x", "lock_timeout=200ms", "-x", "lock_retry_for=1s", "upgrade", "head")
        elapsed = time.monotonic() - started
        line = failed_line(result)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert line.startswith("FAILED: gave up waiting for a lock after ") and "(each waiting 200ms; " in line, line
    assert "attempt 1 waited 200ms for a lock" in result.stderr
    assert elapsed < 20
    assert alembic(project, "-x", f"url={sqlite_url}", "upgrade", "head").returncode == 0


def test_what_each_engine_rewrites():
    from sqltransport_schema.migrate.saga_ops import AddSagaCorrelationOp, DropSagaTableOp
    from sqltransport_schema.schema import Correlation, Kind, TableSpec

    mssql = engines.get("mssql")
    assert mssql.version_change_rewrite(profile("1.2"), profile("9.1")) == (
        "Headers varchar(max) -> nvarchar(max) rewrites every row; Index_RowVersion clustered -> nonclustered rebuilds the table; "
        "building Index_Expires makes writers wait for the whole build"
    )
    assert mssql.version_change_rewrite(profile("9.1"), profile("7.0")) is None
    assert mssql.body_string_rewrite(profile("9.1")) is None  # a computed column: metadata only
    assert PG.seq_type_rewrite("bigserial", "serial") == "Seq bigint -> integer rewrites every row and rebuilds the table's indexes"
    assert engines.get("sqlite").body_string_rewrite(profile("9.1")) is None  # a virtual column
    saga = TableSpec(Kind.SAGA, TableName("Sales_OrderSaga"), saga_prefix="Sales_")
    add = AddSagaCorrelationOp(saga, Correlation("OrderId", "guid"))
    assert add.locked_table() == TableName("Sales_OrderSaga")
    assert "holds writers off for the whole build" in add.rewrite(PG)
    assert add.rewrite(engines.get("mysql")) is None  # InnoDB builds it online
    assert DropSagaTableOp(saga).rewrite(PG) is None and DropSagaTableOp(saga).locked_table() == TableName("Sales_OrderSaga")


def test_a_fleet_s_lock_waits_name_their_target(widening, pg_url):
    """In a fleet each lock-wait line of a worker starts with the target that waits."""
    from .support.fleets import run_fleet

    (widening.root / "fleet.yaml").write_text(f"targets:\n  - name: tenant-7\n    url: {pg_url}\n")
    holder = hold(pg_url, "error")
    try:
        result = run_fleet(widening.root, "upgrade", "-x", "lock_timeout=200ms", "-x", "lock_retry_for=1s")
    finally:
        holder.close()
    assert result.returncode == 1, result.stdout + result.stderr
    waits = [line for line in result.stderr.splitlines() if "waited 200ms for a lock" in line]
    assert waits and all(line.startswith("tenant-7: attempt ") for line in waits), result.stderr
