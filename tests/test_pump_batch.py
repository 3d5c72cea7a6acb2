"""The pump's batches (MessagePump(batch_size=N)) on real SQLite and PostgreSQL: one transaction per
batch. Optimistic batches (the default) run their handlers without savepoints and, when one fails,
roll back and run again isolated, one savepoint per handler (isolation="savepoint" always does). A
failing handler undoes its own writes and leaves its message in the queue; the others commit once.
A poison message does not make later batches run twice. A pump process killed mid-batch loses nothing."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest
from sqlalchemy import text

from sqltransport_schema import errors, wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .support.messages import headers
from .support.runtime import deployed
from .support.warm import process_context

EFFECTS = "CREATE TABLE effects (message_id varchar(64) NOT NULL, n int NOT NULL, pid int NOT NULL)"
INSERT_EFFECT = text("INSERT INTO effects (message_id, n, pid) VALUES (:id, :n, :pid)")
# the same through the handler's driver cursor (context.cursor), in the driver's paramstyle
CURSOR_EFFECT = {
    "qmark": "INSERT INTO effects (message_id, n, pid) VALUES (?, ?, ?)",
    "pyformat": "INSERT INTO effects (message_id, n, pid) VALUES (%s, %s, %s)",
}


@pytest.fixture
def transport(project, db_url, monkeypatch):
    deployed_transport = deployed(project, db_url, monkeypatch)
    yield deployed_transport
    deployed_transport.engine.dispose()


def effect(context, message, pid: int = 0) -> None:
    context.connection.execute(INSERT_EFFECT, {"id": message.id, "n": int(message.headers["n"]), "pid": pid})


def cursor_effect(context, message, pid: int = 0) -> None:
    context.cursor.execute(CURSOR_EFFECT[context.driver.paramstyle], (message.id, int(message.headers["n"]), pid))


def effects(engine) -> list[tuple[str, int, int]]:
    with engine.connect() as conn:
        return [(str(i), n, p) for i, n, p in conn.execute(text("SELECT message_id, n, pid FROM effects"))]


def drain(pump: MessagePump, limit: int = 100) -> list[int]:
    """receive_batch until the queue is empty; what each call took."""
    taken = []
    for _ in range(limit):
        got = pump.receive_batch()
        if not got:
            return taken
        taken.append(got)
    pytest.fail(f"the queue did not empty in {limit} batches")


def test_one_failing_handler_is_retried_alone_then_moved_to_the_error_queue(transport, caplog):
    sales, error, audit = transport.queue("Sales"), transport.queue("error"), transport.queue("audit")
    with transport.engine.begin() as conn:
        conn.execute(text(EFFECTS))
        ids = sales.send_many(conn, [(str(n).encode(), headers(n)) for n in range(20)])
    calls: list[int] = []

    def handler(message, context):
        n = int(message.headers["n"])
        calls.append(n)
        effect(context, message)  # a write before the failure: the savepoint undoes it
        context.send(audit.address, message.body, {"n": str(n)})
        if n == 7:
            raise ValueError("cannot process order 7")
        if n == 12:  # a failure of the handler's own SQL: the transaction goes on after the rollback
            effect(context, message)
            context.connection.execute(text("INSERT INTO nowhere VALUES (1)"))

    pump = MessagePump(transport, sales, handler, batch_size=10, immediate_retries=2, peek_delay=0.1, isolation="savepoint")
    with caplog.at_level(logging.ERROR):
        taken = drain(pump)
    pump.close()
    # first batch 0-9 (7 fails), then 7 at the head again with 10-18 (12 fails), ...
    assert calls[:10] == list(range(10))
    assert calls[10:20] == [7, *range(10, 19)]
    assert sorted(calls) == sorted([*range(20), 7, 7, 12, 12])  # 1 + 2 immediate retries each, the rest once
    assert taken[0] == 10 and sum(taken) == 20 + 2 * 2 + 2  # the two failures taken 3 times, plus once to the error queue
    rows = effects(transport.engine)
    assert sorted(n for _, n, _ in rows) == [n for n in range(20) if n not in (7, 12)]  # each once, none of the failures
    assert {message_id for message_id, _, _ in rows} == set(ids) - {ids[7], ids[12]}
    with transport.engine.begin() as conn:
        assert sorted(int(m.headers["n"]) for m in audit.receive_batch(conn, 100)) == [n for n in range(20) if n not in (7, 12)]
        moved = error.receive_batch(conn, 10)
        assert sales.receive(conn) is None
    assert [m.id for m in moved] == [ids[7], ids[12]]
    assert moved[0].headers[wire.EXCEPTION_MESSAGE] == "cannot process order 7"
    assert moved[0].headers[wire.FAILED_Q] == sales.address
    assert "nowhere" in moved[1].headers[wire.EXCEPTION_MESSAGE]
    assert (pump.processed, pump.failed) == (18, 2)


def test_a_batch_drops_expired_messages_and_moves_poison_unchanged(transport):
    sales, error = transport.queue("Sales"), transport.queue("error")
    raw = '{"NServiceBus.MessageId": "x", broken'
    with transport.engine.begin() as conn:
        sales.send(conn, b"0", headers(0))
        sales.send(conn, b"gone", headers("gone"), time_to_be_received=0.05)
        poison = sales.send(conn, b"\x00poison", raw)
        sales.send(conn, b"3", headers(3))
    time.sleep(0.5)
    seen = []
    pump = MessagePump(transport, sales, lambda m, c: seen.append(m.body), batch_size=50, peek_delay=0.1)
    assert pump.receive_batch() == 4
    assert pump.receive_batch() == 0
    pump.close()
    assert seen == [b"0", b"3"]
    with transport.engine.begin() as conn:
        moved = error.receive(conn)
        assert sales.peek(conn) == 0
    assert (moved.id, moved.raw_headers, moved.body) == (poison, raw, b"\x00poison")


def test_batched_pump_drains_in_fifo_order_and_stops_gracefully(transport):
    sales = transport.queue("Sales")
    total = 230
    with transport.engine.begin() as conn:
        conn.execute(text(EFFECTS))
        sales.send_many(conn, [(str(n).encode(), headers(n)) for n in range(total)])
    seen, lock = [], threading.Lock()

    def handler(message, context):
        effect(context, message)
        with lock:
            seen.append(int(message.headers["n"]))

    pump = MessagePump(transport, sales, handler, batch_size=50, peek_delay=0.1)
    pump.start()
    deadline = time.time() + 30
    while pump.processed < total and time.time() < deadline:
        time.sleep(0.05)
    pump.stop(timeout=10)
    assert seen == list(range(total))  # one receive task: strict FIFO
    assert sorted(n for _, n, _ in effects(transport.engine)) == list(range(total))
    with transport.engine.begin() as conn:
        assert sales.peek(conn) == 0


def test_the_context_connection_is_the_batch_transaction_after_a_savepoint(transport):
    """Isolated: a handler that never uses the connection takes no savepoint; one that does gets the
    batch's transaction. Optimistic: none takes a savepoint."""
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        sales.send_many(conn, [(str(n).encode(), headers(n)) for n in range(3)])
    contexts = []

    def handler(message, context):
        contexts.append(context)
        if message.headers["n"] == "1":
            assert context.connection.in_transaction()

    pump = MessagePump(transport, sales, handler, batch_size=3, peek_delay=0.1, isolation="savepoint")
    assert pump.receive_batch() == 3
    pump.close()
    assert [c.saved for c in contexts] == [False, True, False]
    assert len({id(c._connection) for c in contexts}) == 1

    with transport.engine.begin() as conn:
        sales.send_many(conn, [(str(n).encode(), headers(n)) for n in range(3)])
    contexts.clear()
    pump = MessagePump(transport, sales, handler, batch_size=3, peek_delay=0.1)
    assert pump.receive_batch() == 3
    pump.close()
    assert [c.saved for c in contexts] == [False, False, False]


# -- optimistic batches ------------------------------------------------------------------------
def fill(transport, total: int) -> list[str]:
    """The effects table, and `total` messages numbered 0.. on Sales."""
    with transport.engine.begin() as conn:
        conn.execute(text(EFFECTS))
        return transport.queue("Sales").send_many(conn, [(str(n).encode(), headers(n)) for n in range(total)])


def effect_counts(engine) -> dict[int, int]:
    counts: dict[int, int] = {}
    for _, n, _ in effects(engine):
        counts[n] = counts.get(n, 0) + 1
    return counts


def test_an_always_failing_message_in_an_optimistic_batch_of_50_goes_alone_to_the_error_queue(transport):
    sales, error, audit = transport.queue("Sales"), transport.queue("error"), transport.queue("audit")
    ids = fill(transport, 50)
    calls: list[int] = []

    def handler(message, context):
        n = int(message.headers["n"])
        calls.append(n)
        cursor_effect(context, message)  # the driver path, and SQLAlchemy's, in the one transaction
        context.send(audit.address, message.body, {"n": str(n)})
        if n == 17:
            effect(context, message)
            raise ValueError("cannot process order 17")

    pump = MessagePump(transport, sales, handler, batch_size=50, immediate_retries=2, peek_delay=0.1)
    assert drain(pump) == [50, 1, 1]  # the batch (run twice: 17 fails twice), 17 a third time, 17 to the error queue
    pump.close()
    # optimistic up to 17, rolled back; all 50 again isolated; 17 alone, its last retry; then moved, not called
    assert calls == [*range(18), *range(50), 17]
    assert (pump.reruns, pump.processed, pump.failed) == (1, 49, 1)
    assert effect_counts(transport.engine) == {n: 1 for n in range(50) if n != 17}  # every other effect once
    with transport.engine.begin() as conn:
        assert sorted(int(m.headers["n"]) for m in audit.receive_batch(conn, 100)) == [n for n in range(50) if n != 17]
        moved = error.receive_batch(conn, 10)
        assert sales.peek(conn) == 0
    assert [m.id for m in moved] == [ids[17]]
    assert moved[0].headers[wire.EXCEPTION_MESSAGE] == "cannot process order 17"


def test_a_handler_failing_once_then_succeeding_commits_every_effect_once(transport):
    ids = fill(transport, 50)
    calls: list[int] = []

    def handler(message, context):
        n = int(message.headers["n"])
        calls.append(n)
        cursor_effect(context, message)
        if n == 30 and calls.count(30) == 1:
            raise TimeoutError("the first try times out")

    pump = MessagePump(transport, transport.queue("Sales"), handler, batch_size=50, peek_delay=0.1)
    assert drain(pump) == [50]
    pump.close()
    assert calls == [*range(31), *range(50)]  # rolled back at 30, then run again isolated: 30 succeeds
    assert (pump.reruns, pump.processed, pump.failed) == (1, 50, 0)
    assert effect_counts(transport.engine) == {n: 1 for n in range(50)}
    assert {message_id for message_id, _, _ in effects(transport.engine)} == set(ids)
    with transport.engine.begin() as conn:
        assert transport.queue("error").peek(conn) == 0


POISONED, CLEAN, BATCH, COOLDOWN = 200, 200, 20, 4


def poisoned_run(transport, cooldown: int) -> tuple[MessagePump, list[tuple[int, bool]]]:
    """POISONED messages with one that always fails in every batch (n % BATCH == 5), then CLEAN ones;
    each handler call as (n, whether it ran after its own savepoint)."""
    with transport.engine.begin() as conn:
        transport.queue("Sales").purge(conn)
        conn.execute(text("DELETE FROM effects"))
        transport.queue("Sales").send_many(conn, [(str(n).encode(), headers(n)) for n in range(POISONED + CLEAN)])
    calls: list[tuple[int, bool]] = []

    def handler(message, context):
        n = int(message.headers["n"])
        cursor_effect(context, message)
        calls.append((n, context.saved))
        if n < POISONED and n % BATCH == 5:
            raise ValueError(f"poison {n}")

    pump = MessagePump(
        transport, transport.queue("Sales"), handler, batch_size=BATCH, immediate_retries=1, peek_delay=0.1, isolation_cooldown=cooldown
    )
    drain(pump)
    pump.close()
    return pump, calls


def test_a_poison_message_does_not_double_the_work_of_later_batches(transport):
    fill(transport, 0)
    pump, calls = poisoned_run(transport, COOLDOWN)
    poisons = POISONED // BATCH
    # every clean message once, each poison twice (1 immediate retry), and the first optimistic
    # batch's 5 messages before its poison once more: no other batch ran twice
    assert len(calls) == (POISONED + CLEAN - poisons) + 2 * poisons + 5
    assert (pump.reruns, pump.processed, pump.failed) == (1, POISONED + CLEAN - poisons, poisons)
    assert effect_counts(transport.engine) == {n: 1 for n in range(POISONED + CLEAN) if n >= POISONED or n % BATCH != 5}
    # isolated while poison keeps coming and for COOLDOWN batches after the last failure (the last
    # two poisoned batches hold the first clean ones: a poison fails at its first and second try);
    # optimistic again after that
    clean = [saved for n, saved in calls if n >= POISONED]
    assert clean == sorted(clean, reverse=True)
    assert COOLDOWN * BATCH <= sum(clean) < (COOLDOWN + 2) * BATCH

    unguarded, unguarded_calls = poisoned_run(transport, 0)  # no cool-down: each poisoned batch runs twice
    assert unguarded.reruns >= poisons - 1
    assert len(unguarded_calls) > len(calls) + 4 * (poisons - 1)
    assert effect_counts(transport.engine) == {n: 1 for n in range(POISONED + CLEAN) if n >= POISONED or n % BATCH != 5}


def test_isolation_is_checked(transport):
    sales = transport.queue("Sales")
    with pytest.raises(errors.UsageError, match="isolation must be one of optimistic, savepoint, not 'none'"):
        MessagePump(transport, sales, lambda m, c: None, isolation="none")
    with pytest.raises(errors.UsageError, match="isolation_cooldown is a number of batches"):
        MessagePump(transport, sales, lambda m, c: None, isolation_cooldown=-1)


# -- a pump process killed mid-batch, then a new one ------------------------------------------
KILL_BATCH, KILL_AT, KILL_TOTAL = 25, 60, 200  # the kill lands at the 60th handler call: mid third batch


def run_pump(url: str, mid_batch, until_empty: bool, isolation: str = "optimistic", fail_once: int | None = None) -> None:
    """A pump process (module level: the spawn context imports it by name). until_empty: stop when
    the queue is empty; else signal `mid_batch` at the KILL_AT-th handler call and wait there to be
    killed. fail_once: the handler of that message fails at its first call."""
    pid = os.getpid()
    transport = Transport(make_engine(url), "9.1")
    sales = transport.queue("Sales")
    handled = 0

    def handler(message, context):
        nonlocal handled
        cursor_effect(context, message, pid)
        handled += 1
        if not until_empty and handled == KILL_AT:
            mid_batch.set()
            time.sleep(600)  # killed here, with the batch's transaction open
        if int(message.headers["n"]) == fail_once and not until_empty:
            raise ValueError("first try fails")

    pump = MessagePump(transport, sales, handler, batch_size=KILL_BATCH, peek_delay=0.1, isolation=isolation)
    while pump.receive_batch():
        pass
    pump.close()
    transport.engine.dispose()


@pytest.mark.parametrize(
    "isolation, fail_once",
    [
        ("savepoint", None),  # killed at message 59, isolated
        ("optimistic", None),  # killed at message 59, optimistic
        ("optimistic", 55),  # 55 fails: the batch rolls back, runs again isolated, killed there at message 53
    ],
)
def test_a_pump_killed_mid_batch_loses_nothing(project, db_url, isolation, fail_once):
    project.deploy(db_url, "transport_version: '9.1'\nqueues:\n  - name: Sales\n  - name: error\n")
    engine = make_engine(db_url)
    sales = Transport(engine, "9.1").queue("Sales")
    with engine.begin() as conn:
        conn.execute(text(EFFECTS))
        sent = sales.send_many(conn, [(str(n).encode(), headers(n)) for n in range(KILL_TOTAL)])
    ctx = process_context(__name__)
    mid_batch = ctx.Event()
    victim = ctx.Process(target=run_pump, args=(db_url, mid_batch, False, isolation, fail_once), daemon=True)
    victim.start()
    try:
        assert mid_batch.wait(60), f"the pump did not reach its {KILL_AT}th message (exit code {victim.exitcode})"
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10)
    finally:
        if victim.is_alive():
            victim.kill()
    before = effects(engine)
    assert {p for _, _, p in before} <= {victim.pid}
    assert len(before) == KILL_AT // KILL_BATCH * KILL_BATCH  # the batches committed before the kill; the open one rolled back

    survivor = ctx.Process(target=run_pump, args=(db_url, mid_batch, True, isolation), daemon=True)
    survivor.start()
    survivor.join(120)
    if survivor.is_alive():
        survivor.kill()
        pytest.fail("the restarted pump did not drain the queue in 120 s")
    assert survivor.exitcode == 0
    rows = effects(engine)
    by_id = {}
    for message_id, _, pid in rows:
        by_id.setdefault(message_id, []).append(pid)
    assert set(by_id) == set(sent)  # none lost
    assert all(len(pids) == 1 for pids in by_id.values())  # none committed twice
    redone = sorted(n for _, n, pid in rows if pid == survivor.pid)
    assert redone == list(range(len(before), KILL_TOTAL))  # the killed batch's handled messages came back, in order
    with engine.begin() as conn:
        assert sales.peek(conn) == 0
    engine.dispose()


def test_concurrent_batches_handle_each_message_once(transport):
    """Three receive tasks, each its own batch and connection: every message handled and committed once."""
    sales = transport.queue("Sales")
    total = 300
    with transport.engine.begin() as conn:
        conn.execute(text(EFFECTS))
        sales.send_many(conn, [(str(n).encode(), headers(n)) for n in range(total)])
    pump = MessagePump(transport, sales, lambda m, c: effect(c, m), batch_size=20, concurrency=3, peek_delay=0.1)
    pump.start()
    deadline = time.time() + 60
    while pump.processed < total and time.time() < deadline:
        time.sleep(0.05)
    pump.stop(timeout=10)
    rows = effects(transport.engine)
    assert sorted(n for _, n, _ in rows) == list(range(total))
    assert len({message_id for message_id, _, _ in rows}) == total
    with transport.engine.begin() as conn:
        assert sales.peek(conn) == 0
