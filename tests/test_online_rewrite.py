"""Online rewrites (docs/live-migrations.md, "Online rewrites"), on real PostgreSQL: a queue's Seq
widened while a sender and a receiver keep running, the migration killed at several points and run
again: every message is received or still queued exactly once, each keeps its Seq (its place in
FIFO order), and `check` finds the database in sync with the topology."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid

import psycopg
import pytest

from sqltransport_schema import cli
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport
from sqltransport_schema.schema import Kind, TableName, TableSpec
from sqltransport_schema.versions import profile

from .support.commands import alembic, failed_line
from .support.databases import connect
from .support.locks import PG, Sender, hold, libpq, seq_type, start_alembic

BACKLOG = 20_000
SHADOW = "Sales__online"


class Receiver(Sender):
    """Receives from a queue with the transport's own receive statement, recording every id."""

    statement = "receive"
    pause = 0.005

    def __init__(self, url: str, table: str) -> None:
        super().__init__(url, table)
        self.received: list[str] = []

    def step(self, conn: psycopg.Connection) -> None:
        row = conn.execute(self.sql).fetchone()
        if row is not None:
            self.received.append(str(row[0]))


class RecordingSender(Sender):
    """A sender that also records the ids it sent."""

    pause = 0.01

    def __init__(self, url: str, table: str) -> None:
        super().__init__(url, table)
        self.sent: list[str] = []

    def step(self, conn: psycopg.Connection) -> None:
        message_id = uuid.uuid4()
        values = {"Id": message_id, "TimeToBeReceivedMs": None, "Headers": "{}", "Body": b"x"}
        conn.execute(self.sql, tuple(values[name] for name in self.order))
        self.sent.append(str(message_id))


def fill(url: str, table: str, count: int) -> dict[str, int]:
    """`count` messages in the queue (as the transport's send leaves them); their Seq by id."""
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        with conn.cursor().copy(f'COPY "public"."{table}" (Id, Headers, Body) FROM STDIN') as copy:
            for _ in range(count):
                copy.write_row((uuid.uuid4(), '{"NServiceBus.MessageId": "x"}', b"body"))
        return {str(i): s for i, s in conn.execute(f'SELECT Id, Seq FROM "public"."{table}"')}


def rows(url: str, table: str) -> list[tuple[str, int]]:
    with psycopg.connect(libpq(url)) as conn:
        return [(str(i), s) for i, s in conn.execute(f'SELECT Id, Seq FROM "public"."{table}" ORDER BY Seq')]


def leftovers(url: str) -> list[str]:
    """Objects an online rewrite adds beside a queue until its swap (none once it is done)."""
    with psycopg.connect(libpq(url)) as conn:
        found = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE '%\\_\\_online%' "
            "UNION ALL SELECT proname FROM pg_proc WHERE proname LIKE '%\\_\\_online%' "
            "UNION ALL SELECT tgname FROM pg_trigger WHERE tgname LIKE 'sqltransport_online%'"
        )
        return sorted(r[0] for r in found)


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def scalar(url: str, sql: str):
    with psycopg.connect(libpq(url)) as conn:
        return conn.execute(sql).fetchone()[0]


def assert_exactly_once(url: str, before: dict[str, int], sender: RecordingSender, receiver: Receiver) -> None:
    """Every message sent is received or queued, once; the queued ones keep the Seq they had."""
    queued = rows(url, "Sales")
    queued_ids = [i for i, _ in queued]
    assert len(set(queued_ids)) == len(queued_ids)
    assert len(set(receiver.received)) == len(receiver.received), "a message was received twice"
    assert not set(queued_ids) & set(receiver.received), "a received message is still queued"
    assert set(queued_ids) | set(receiver.received) == set(before) | set(sender.sent), "a message was lost or invented"
    for message_id, seq in queued:
        if message_id in before:
            assert before[message_id] == seq, "a message moved in FIFO order"
    sent_order = {m: i for i, m in enumerate(sender.sent)}
    during = [sent_order[m] for m, _ in queued if m in sent_order]
    assert during == sorted(during), "messages sent during the rewrite are out of order"


def in_sync(project, url: str) -> int:
    return cli.main(["check", "--url", url, "-c", str(project.ini)])


def run_threads(url: str) -> tuple[RecordingSender, Receiver]:
    sender, receiver = RecordingSender(url, "Sales"), Receiver(url, "Sales")
    sender.start()
    receiver.start()
    return sender, receiver


def stop(*threads) -> None:
    for thread in threads:
        thread.stop.set()
        thread.join(10)
        assert thread.error is None, thread.error


def test_an_online_rewrite_keeps_senders_and_receivers_going(widening, pg_url):
    before = fill(pg_url, "Sales", BACKLOG)
    sender, receiver = run_threads(pg_url)
    time.sleep(0.3)
    result = alembic(widening, "-x", f"url={pg_url}", "-x", "online=Sales", "-x", "online_batch=2000", "upgrade", "head")
    time.sleep(0.3)
    stop(sender, receiver)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert 'online rewrite of "public"."Sales" (change Seq of queue "public"."Sales" from serial to bigserial)' in err
    assert 'online rewrite of "public"."Sales": swapped (attempt 1)' in err
    assert 'online rewrite of "public"."error"' not in err  # -x online=Sales: error is rewritten in place
    assert seq_type(pg_url, "Sales") == seq_type(pg_url, "error") == "bigint"
    assert leftovers(pg_url) == []
    assert_exactly_once(pg_url, before, sender, receiver)
    assert len(sender.sent) > 10 and len(receiver.received) > 10
    assert max(sender.latencies) < 1.0 and max(receiver.latencies) < 1.0
    # the new table is the transport's: its names, its sequence going on after the last Seq
    with psycopg.connect(libpq(pg_url)) as conn:
        indexes = sorted(r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'Sales'"))
        sequence = conn.execute("SELECT pg_get_serial_sequence('\"public\".\"Sales\"', 'seq')").fetchone()[0]
        top = conn.execute('SELECT max(Seq) FROM "public"."Sales"').fetchone()[0]
        conn.execute('INSERT INTO "public"."Sales" (Id, Headers) VALUES (gen_random_uuid(), \'{}\')')
        assert conn.execute('SELECT max(Seq) FROM "public"."Sales"').fetchone()[0] > top
    assert indexes == ["Sales_pkey", "Sales_seq_key"]
    assert sequence == 'public."Sales_seq_seq"'
    assert in_sync(widening, pg_url) == 0


def hold_copy_at(url: str, seq: int) -> psycopg.Connection:
    """A session that makes the copy wait at one message: the new table made beside Sales (as a run
    stopped after its build leaves it) and that message's row inserted there, uncommitted. The
    copy's batch holding the message waits for this insert (its key), and no receiver does (the
    copy locks nothing of the live table; the trigger's delete passes over an uncommitted row)."""
    shadow = PG.online.create_shadow(TableSpec(Kind.QUEUE, TableName("Sales", "public"), seq_type="bigserial"), profile("9.1"), False)
    conn = psycopg.connect(libpq(url) + " application_name=copy-holder")
    with conn.transaction():
        for statement in shadow:
            conn.execute(statement)
    columns = "Id, Expires, Headers, Body, Seq"
    conn.execute(f'INSERT INTO "public"."{SHADOW}" ({columns}) SELECT {columns} FROM "public"."Sales" WHERE Seq = %s', (seq,))
    return conn


# The swap's lock waiting in this test's database (pg_locks is the server's: other tests wait for theirs)
SWAP_WAITING = (
    "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def copy_waiting(url: str, holder: psycopg.Connection) -> bool:
    blocked = f"SELECT count(*) FROM pg_stat_activity WHERE {holder.info.backend_pid} = ANY(pg_blocking_pids(pid))"
    return scalar(url, blocked) > 0


@pytest.mark.parametrize("point", ["after_build", "mid_copy", "at_swap"])
def test_a_killed_online_rewrite_reruns_to_completion(widening, pg_url, point):
    before = fill(pg_url, "Sales", BACKLOG)
    seqs = sorted(before.values())
    sender, receiver = run_threads(pg_url)
    x = ["online=true", "online_batch=500"]
    if point == "after_build":  # the copy's first batch waits for the newest message of the backlog
        holder = hold_copy_at(pg_url, seqs[-1])
    elif point == "mid_copy":  # the copy waits halfway down the backlog
        holder = hold_copy_at(pg_url, seqs[len(seqs) // 2])
    else:  # the swap waits for a reader of the queue (30 s), and is killed waiting
        holder = hold(pg_url, "Sales")
        x.append("lock_timeout=30s")
    migration = start_alembic(widening, pg_url, *x)
    try:
        wait_for(lambda: scalar(pg_url, "SELECT count(*) FROM pg_trigger WHERE tgname = 'sqltransport_online_mirror'") == 1, "the mirror")
        if point == "at_swap":
            wait_for(
                lambda: scalar(pg_url, SWAP_WAITING) > 0,
                "the swap waiting for its lock",
            )
        else:  # the copy's batch waiting at the held row (not a count of the new table, which the mirror's sends fill too)
            wait_for(lambda: copy_waiting(pg_url, holder), "the copy to wait at the held row")
        assert migration.poll() is None  # still blocked where the test holds it
        received_before = set(receiver.received)
        copied = scalar(pg_url, f'SELECT count(*) FROM "public"."{SHADOW}" WHERE Seq <= {seqs[-1]}')
        received_after = set(receiver.received)
    finally:
        migration.kill()
        migration.wait(10)
        holder.close()
    # How far the killed run had got, in backlog rows the new table holds. A received message leaves
    # both tables: the rows the copy has passed (above the held row; the whole backlog at the swap)
    # less those received by then.
    if point == "after_build":
        passed = set()
    elif point == "mid_copy":
        passed = {m for m, seq in before.items() if seq > seqs[len(seqs) // 2]}
    else:
        passed = set(before)
    slack = 499 if point == "mid_copy" else 0  # the waiting batch (500 rows, uncommitted) holds the held row and up to 499 above it
    low, high = len(passed - received_after) - slack, len(passed - received_before)
    assert low <= copied <= high, (copied, low, high)
    assert SHADOW in leftovers(pg_url)  # killed before its swap: the new table is still beside the live one
    time.sleep(0.3)  # the mirror keeps the new table current while no migration runs
    rerun = alembic(widening, "-x", f"url={pg_url}", "-x", "online=true", "upgrade", "head")
    time.sleep(0.3)
    stop(sender, receiver)
    assert rerun.returncode == 0, rerun.stderr
    assert 'online rewrite of "public"."Sales": swapped' in rerun.stderr
    assert seq_type(pg_url, "Sales") == "bigint"
    assert leftovers(pg_url) == []
    assert_exactly_once(pg_url, before, sender, receiver)
    assert in_sync(widening, pg_url) == 0


def test_the_revision_chooses_online_per_operation(widening, pg_url):
    revision = widening.revisions()[-1]
    text = revision.read_text()
    lines = [line.replace(")", ", online=True)") if 'change_queue_seq_type("Sales"' in line else line for line in text.splitlines()]
    revision.write_text("\n".join(lines) + "\n")  # upgrade and downgrade of Sales, as a user edits a revision
    fill(pg_url, "Sales", 100)
    result = alembic(widening, "-x", f"url={pg_url}", "upgrade", "head")
    assert result.returncode == 0, result.stderr
    assert 'online rewrite of "public"."Sales"' in result.stderr
    assert 'online rewrite of "public"."error"' not in result.stderr
    assert seq_type(pg_url, "Sales") == "bigint" and leftovers(pg_url) == []
    assert in_sync(widening, pg_url) == 0
    # its downgrade, also marked, narrows it online too
    down = alembic(widening, "-x", f"url={pg_url}", "downgrade", "-1")
    assert down.returncode == 0, down.stderr
    assert 'online rewrite of "public"."Sales"' in down.stderr and seq_type(pg_url, "Sales") == "integer"
    assert len(rows(pg_url, "Sales")) == 100


def test_a_script_says_it_rewrites_in_place(widening):
    result = alembic(widening, "-x", "url=postgresql://", "-x", "online=true", "upgrade", "head", "--sql")
    assert result.returncode == 0, result.stderr
    assert "-- online rewrite asked for: a script rewrites in place" in result.stdout
    assert "ALTER TABLE \"public\".\"Sales\" ALTER COLUMN Seq TYPE bigint" in result.stdout


def test_sqlite_rewrites_in_place_and_says_so(project, tmp_path):
    from .support.locks import TOPOLOGY

    url = f"sqlite:///{tmp_path / 'bus.db'}"
    project.write_topology(TOPOLOGY.replace("endpoints:", "endpoints:").replace("- name: Sales", "- name: Sales\n    body_string: false"))
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={url}", "upgrade", "head").returncode == 0
    project.write_topology(TOPOLOGY.replace("- name: Sales", "- name: Sales\n    body_string: true"))
    assert project.compile("body string") == 0
    result = alembic(project, "-x", f"url={url}", "-x", "online=true", "upgrade", "head")
    assert result.returncode == 0, result.stderr
    assert "online rewrites run on PostgreSQL only: add body string column of" in result.stderr


PUMP_CONCURRENCY, PUMP_BATCH = 2, 50
COPY_BATCH = 500  # online_batch of the pump test: what a copy that held the head would hold back


def test_a_pump_drains_the_backlog_in_order_through_an_online_rewrite(widening, pg_url, caplog):
    """The issue's run, smaller: a backlog, a MessagePump (concurrency 2, batch 50) and a sender
    through an online rewrite of Sales. The copy is held halfway down the backlog while the pump
    drains up to and past it: a copy that locked the rows of its batch would make the pump pass
    over them (FOR UPDATE SKIP LOCKED) and handle them a thousand places late. Every message is
    handled once, none a copy batch from its FIFO place (FIFO as without a rewrite), and the pump
    goes across the swap (its prepared receive no longer fits the table) without a failed receive."""
    caplog.set_level(logging.DEBUG, logger="sqltransport_schema.pump")
    before = fill(pg_url, "Sales", 3000)
    seqs = sorted(before.values())
    holder = hold_copy_at(pg_url, seqs[1500])
    migration = start_alembic(widening, pg_url, "online=Sales", f"online_batch={COPY_BATCH}")
    engine = connect(pg_url)
    handled: list[tuple[str, int]] = []
    transport = Transport(engine, "9.1")
    pump = MessagePump(
        transport,
        transport.queue("Sales"),
        lambda message, context: handled.append((message.id, message.order)),
        concurrency=PUMP_CONCURRENCY,
        batch_size=PUMP_BATCH,
        peek_delay=0.1,
    )
    sender = RecordingSender(pg_url, "Sales")
    try:
        wait_for(lambda: copy_waiting(pg_url, holder), "the copy to wait halfway down the backlog")
        pump.start()
        sender.start()
        wait_for(lambda: len(handled) >= 2200, "the pump to drain past the held batch")
        holder.close()  # the copy goes on
        out, err = migration.communicate(timeout=120)
        time.sleep(0.5)  # the pump and the sender go on in the new table
        stop(sender)
        wait_for(lambda: scalar(pg_url, 'SELECT count(*) FROM "public"."Sales"') == 0, "the pump to drain the queue")
    finally:
        if migration.poll() is None:
            migration.kill()
        pump.stop(10)
        holder.close()
        engine.dispose()
    assert migration.returncode == 0, err
    assert 'online rewrite of "public"."Sales": swapped' in err and seq_type(pg_url, "Sales") == "bigint"
    # the held batch was copied after the pump had taken its messages: the settle removed those copies,
    # so the swap found both tables alike (no repair under its lock)
    settled = re.search(r"copy settled \(waited [\d.]+ s for \d+ writer\(s\); (\d+) copies of messages received meanwhile removed in", err)
    assert settled is not None and int(settled[1]) > 0, err
    assert "repairing before the swap" not in err
    ids = [message_id for message_id, _ in handled]
    assert len(ids) == len(set(ids)), "a message was handled twice"
    assert set(ids) == set(before) | set(sender.sent), "a message was lost or invented"
    assert len(sender.sent) > 10
    # FIFO as without a rewrite. Two pumps' batches interleave as the machine schedules them (a stalled
    # one lets the other take batch after batch: 100 places on a loaded machine), so the bound is what the
    # copy would do: a batch it held, passed over by SKIP LOCKED, is handled a whole copy batch late.
    places = {seq: place for place, seq in enumerate(sorted(seq for _, seq in handled))}
    late = max(abs(place - places[seq]) for place, (_, seq) in enumerate(handled))
    assert late < COPY_BATCH, f"a message was handled {late} places from its FIFO place"
    pump_log = [r for r in caplog.records if r.name == "sqltransport_schema.pump"]
    assert [r.getMessage() for r in pump_log if r.levelno >= logging.WARNING] == []  # no failed receive, no pause
    assert any("prepared again" in r.getMessage() for r in pump_log)  # the swap did invalidate the prepared receive
    assert leftovers(pg_url) == [] and in_sync(widening, pg_url) == 0


def test_the_copy_settles_after_a_receive_it_raced(widening, pg_url):
    """A receive that took the head of the queue while the copy ran, and whose transaction is still
    open when the copy ends: its trigger found no copy to delete, and the copy then copied the
    message (still there for the copy until that receive commits). The copy waits for that session
    (saying who it is), then deletes the copy: the swap finds both tables alike and the message is
    gone from the new table."""
    before = fill(pg_url, "Sales", 2000)
    seqs = sorted(before.values())
    holder = hold_copy_at(pg_url, seqs[1000])
    migration = start_alembic(widening, pg_url, "online=Sales", "online_batch=300", "lock_timeout=1s")
    receive = psycopg.connect(libpq(pg_url) + " application_name=slow-receiver")
    try:
        wait_for(lambda: copy_waiting(pg_url, holder), "the copy to wait halfway down the backlog")
        taken = receive.execute('DELETE FROM "public"."Sales" WHERE Seq = %s RETURNING Id', (seqs[0],)).fetchone()[0]
        holder.close()  # the copy goes on, copies the head (its receive is not committed) and waits for that receive
        wait_for(lambda: scalar(pg_url, f'SELECT count(*) FROM "public"."{SHADOW}" WHERE Seq = {seqs[0]}') == 1, "the head copied")
        time.sleep(1.5)  # past one lock_timeout: the copy says who it waits for
        assert migration.poll() is None  # still waiting for the receive
        receive.commit()
        out, err = migration.communicate(timeout=120)
    finally:
        if migration.poll() is None:
            migration.kill()
        holder.close()
        receive.close()
    assert migration.returncode == 0, err
    assert "waited" in err and "for the sessions that wrote to it during the copy to end: held by pid" in err and "slow-receiver" in err
    settled = re.search(r"copy settled \(waited [\d.]+ s for \d+ writer\(s\); (\d+) copies", err)
    assert settled is not None and int(settled[1]) >= 1, err
    assert "repairing before the swap" not in err and 'online rewrite of "public"."Sales": swapped' in err
    left = rows(pg_url, "Sales")
    assert str(taken) not in {m for m, _ in left} and len(left) == len(before) - 1


def test_bad_online_options_fail_in_one_line(widening, pg_url):
    result = alembic(widening, "-x", f"url={pg_url}", "-x", "online_batch=lots", "upgrade", "head")
    assert failed_line(result) == (
        "FAILED: -x online_batch=lots: give the rows per copy transaction as a whole number, e.g. online_batch=10000"
    )


def test_compile_offers_the_online_path_where_there_is_one(project, capsys):
    import json

    from .support.locks import TOPOLOGY

    project.write_topology(TOPOLOGY.replace("queues:", "    body_string: false\nqueues:"))
    assert project.compile("initial") == 0
    capsys.readouterr()
    project.write_topology(TOPOLOGY.replace("queues:", "    body_string: true\nqueues:") + "postgresql:\n  seq_type: bigserial\n")
    assert project.compile("both", "--format", "json") == 0
    locks = json.loads(capsys.readouterr().out)["locks"]
    online = {(e["engine"], e["operation"].split(" of ")[0], e["online"]) for e in locks if e["table"].endswith('"Sales"')}
    assert ("postgresql", "change Seq", "possible") in online and ("postgresql", "add body string column", "possible") in online
    assert all(flag is None for engine, _, flag in online if engine != "postgresql")  # in place elsewhere
    # the delayed table's BodyString is rewritten in place by the upgrade: no online hint for it
    delayed = [e for e in locks if e["table"].endswith('"Sales.Delayed"') and e["lock"] == "rewrite"]
    assert delayed and all(e["online"] is None for e in delayed)
    project.write_topology(TOPOLOGY.replace("queues:", "    body_string: false\nqueues:"))
    assert project.compile("back") == 0
    capsys.readouterr()
    project.write_topology(TOPOLOGY.replace("queues:", "    body_string: true\nqueues:"))
    assert project.compile("again") == 0
    hinted = [line for line in capsys.readouterr().err.splitlines() if "can instead be rewritten online" in line]
    assert hinted and all('"Sales.Delayed"' not in line for line in hinted), hinted
    assert any('"public"."Sales":' in line for line in hinted)


def test_body_string_added_online_to_a_queue_and_in_place_to_its_delayed_table(project, pg_url):
    from .support.locks import TOPOLOGY

    project.write_topology(TOPOLOGY.replace("queues:", "    body_string: false\nqueues:"))
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={pg_url}", "upgrade", "head").returncode == 0
    before = fill(pg_url, "Sales", 5000)
    project.write_topology(TOPOLOGY.replace("queues:", "    body_string: true\nqueues:"))
    assert project.compile("body string") == 0
    sender, receiver = run_threads(pg_url)
    result = alembic(project, "-x", f"url={pg_url}", "-x", "online=true", "upgrade", "head")
    stop(sender, receiver)
    assert result.returncode == 0, result.stderr
    assert 'online rewrite of "public"."Sales": swapped' in result.stderr
    assert '"public"."Sales.Delayed" is not a queue table this release rewrites online' in result.stderr
    assert_exactly_once(pg_url, before, sender, receiver)
    with psycopg.connect(libpq(pg_url)) as conn:
        texts = {r[0] for r in conn.execute('SELECT BodyString FROM "public"."Sales"')}
        column = "SELECT count(*) FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'bodystring'"
        assert conn.execute(column, ('"public"."Sales.Delayed"',)).fetchone()[0] == 1
    assert texts <= {"body", "x"} and "body" in texts  # the generated column, computed for copied and mirrored rows
    assert leftovers(pg_url) == [] and in_sync(project, pg_url) == 0


def test_the_topology_asks_compile_for_online_rewrites(project, pg_url, capsys):
    from .support.locks import TOPOLOGY

    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={pg_url}", "upgrade", "head").returncode == 0
    fill(pg_url, "Sales", 1000)
    project.write_topology(TOPOLOGY + "postgresql:\n  seq_type: bigserial\n  online_rewrites: true\n")
    capsys.readouterr()
    assert project.compile("online") == 0
    out = capsys.readouterr().err  # compile's report is status lines: stderr
    assert "from serial to bigserial (exclusive lock for the whole rewrite" in out
    assert out.count("; the revision runs it online: a short exclusive lock for the swap") == 2  # Sales and error
    text = project.revisions()[-1].read_text()
    assert 'op.change_queue_seq_type("Sales", from_type="serial", to_type="bigserial", online=True)' in text
    assert 'op.change_queue_seq_type("Sales", from_type="bigserial", to_type="serial", online=True)' in text  # its downgrade too
    result = alembic(project, "-x", f"url={pg_url}", "upgrade", "head")
    assert result.returncode == 0, result.stderr
    assert 'online rewrite of "public"."Sales": swapped' in result.stderr and 'online rewrite of "public"."error": swapped' in result.stderr
    assert seq_type(pg_url, "Sales") == "bigint" and len(rows(pg_url, "Sales")) == 1000


def test_two_migrations_of_one_database_take_turns(widening, pg_url):
    before = fill(pg_url, "Sales", BACKLOG)
    seqs = sorted(before.values())
    sender, receiver = run_threads(pg_url)
    holder = hold_copy_at(pg_url, seqs[len(seqs) // 2])  # the first run's copy waits halfway down
    first = start_alembic(widening, pg_url, "online=Sales", "online_batch=500")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(first.stderr), daemon=True).start()
    wait_for(lambda: scalar(pg_url, "SELECT count(*) FROM pg_trigger WHERE tgname = 'sqltransport_online_mirror'") == 1, "the mirror")
    second = start_alembic(widening, pg_url, "online=Sales", "lock_timeout=500ms")
    second_lines: list[str] = []
    threading.Thread(target=lambda: second_lines.extend(second.stderr), daemon=True).start()
    wait = "waited 500ms for a lock (waiting for another migration of this database to finish); rolled back, retrying in"
    wait_for(lambda: any(wait in line for line in second_lines), "the second run to wait for the first")
    assert scalar(pg_url, f'SELECT count(*) FROM "public"."{SHADOW}" WHERE Seq <= {seqs[-1]}') < BACKLOG  # still copying
    holder.close()
    assert first.wait(120) == 0 and second.wait(120) == 0, "".join(lines + second_lines)
    stop(sender, receiver)
    time.sleep(0.2)
    assert sum('online rewrite of "public"."Sales": swapped' in line for line in lines + second_lines) == 1  # once
    ran = re.compile(r"^upgrade \S+ -> \S+, ")  # a revision's line (the tool's lines are printed as they are)
    assert sum(bool(ran.search(line)) for line in lines) == 1  # the revision ran once, in the first run
    assert not any(ran.search(line) for line in second_lines)  # the second found the database at head
    assert seq_type(pg_url, "Sales") == "bigint" and leftovers(pg_url) == []
    assert_exactly_once(pg_url, before, sender, receiver)
