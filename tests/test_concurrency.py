"""Competing consumers in separate processes on real PostgreSQL: each message exactly once.

Every consumer is its own process (forked from multiprocessing's fork server, support/warm.py) with its own engine. In one transaction it
receives a message and writes a ledger row; the ledger is the proof: a lost message
has no row, a duplicated one has two. The second test SIGKILLs consumers while their
transactions are open and checks that the killed receives went back to the queue.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .support.warm import process_context

QUEUE = "work"
TOPOLOGY = f"""\
transport_version: "9.1"
queues:
  - name: {QUEUE}
"""
SEND_CHUNK = 5000
# Every receive races the other consumers for the queue's head, so a few thousand receives per consumer
# already meet every interleaving these tests look for; 50,000 messages cost 3x the time and found nothing
# more (the suite's budget, benchmarks/RESULTS.md). Throughput is measured in benchmarks/, not here.
MESSAGES = 15_000
EMPTY_SLEEP_S = 0.1  # after one empty receive; a second empty one in a row ends the consumer
READY_TIMEOUT_S = 60
# Consumer sessions commit without waiting for the WAL flush (~2.5 ms a commit on this disk).
# Locking and visibility are unchanged, so is what a killed client leaves behind; only a
# crash of the server itself could lose a commit, and no test crashes the server.
NO_FLUSH_WAIT = "SET synchronous_commit = off"

pytestmark = pytest.mark.slow


# -- the consumer process (module level: the spawn context imports it by name) -------
def consume(url: str, queue_name: str, go, ready, max_delay_s: float = 0.0, record_attempts: bool = False, batch: int = 1) -> None:
    """Receive and record in the ledger, one message (or one batch) per transaction, until the queue stays empty."""
    pid = os.getpid()
    engine = make_engine(url)
    queue = Transport(engine, "9.1").queue(queue_name)
    attempts = None
    try:
        if record_attempts:
            attempts = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            attempts.exec_driver_sql(NO_FLUSH_WAIT)
        with engine.connect() as conn:
            conn.exec_driver_sql(NO_FLUSH_WAIT)  # a session setting: it outlives the commit
            conn.commit()
            ready.set()
            go.wait()
            empty = 0
            while True:
                with conn.begin():
                    if batch > 1:
                        messages = queue.receive_batch(conn, batch)
                    else:
                        messages = [m for m in [queue.receive(conn)] if m is not None]
                    for message in messages:
                        if attempts is not None:  # survives a kill: its own, committed connection
                            attempts.exec_driver_sql(
                                "INSERT INTO attempts (message_id, pid) VALUES (%(id)s, %(pid)s)",
                                {"id": message.id, "pid": pid},
                            )
                        if max_delay_s:
                            time.sleep(random.uniform(0, max_delay_s))  # the kill lands here, mid-transaction
                        conn.exec_driver_sql(
                            "INSERT INTO received (message_id, seq, pid) VALUES (%(id)s, %(seq)s, %(pid)s)",
                            {"id": message.id, "seq": int(message.headers["seq"]), "pid": pid},
                        )
                    seqs = [int(m.headers["seq"]) for m in messages]
                    assert seqs == sorted(seqs), f"a batch out of FIFO order: {seqs}"
                message = messages[0] if messages else None
                if message is not None:
                    empty = 0
                    continue
                empty += 1
                if empty >= 2:
                    return
                time.sleep(EMPTY_SLEEP_S)
    finally:
        if attempts is not None:
            attempts.close()
        engine.dispose()


def pump_consume(url: str, queue_name: str, go, ready, batch: int = 50) -> None:
    """A MessagePump with batch_size=batch, its handler writing the ledger row in the batch's
    transaction, run (peek, receive, peek) until the queue is empty; exit code 3 if a batch handed
    the handler its messages out of FIFO order. FIFO holds within a batch, not from one batch to the
    next: a competing pump's peek holds the head row for a moment (FOR UPDATE SKIP LOCKED, as
    upstream's peek does), and a batch taken in that moment starts behind it."""
    pid = os.getpid()
    engine = make_engine(url, connect_args={"options": "-c synchronous_commit=off"})  # NO_FLUSH_WAIT, per session
    transport = Transport(engine, "9.1")
    last, out_of_order = -1, 0
    batch_transaction = None  # held, so a later batch's transaction cannot be mistaken for it

    def handler(message, context) -> None:
        nonlocal last, out_of_order, batch_transaction
        seq = int(message.headers["seq"])
        transaction = context.connection.get_transaction()
        if transaction is not batch_transaction:  # the first message of a batch
            batch_transaction, last = transaction, -1
        out_of_order += seq < last
        last = seq
        context.connection.exec_driver_sql(
            "INSERT INTO received (message_id, seq, pid) VALUES (%(id)s, %(seq)s, %(pid)s)", {"id": message.id, "seq": seq, "pid": pid}
        )

    pump = MessagePump(transport, transport.queue(queue_name), handler, batch_size=batch, peek_delay=0.1, immediate_retries=0)
    try:
        with engine.connect() as monitor:
            ready.set()
            go.wait()
            pump.start()
            # any row left, locked ones included (their batch has not committed); the Seq index
            # keeps this cheap while the table fills with dead rows
            waiting = f'SELECT 1 FROM "{queue_name}" ORDER BY Seq LIMIT 1'
            while monitor.exec_driver_sql(waiting).first():
                monitor.rollback()
                time.sleep(0.5)
        pump.stop(timeout=60)
        assert pump.failure is None, pump.failure
    finally:
        engine.dispose()
    if out_of_order:
        os._exit(3)


# -- helpers --------------------------------------------------------------------------
def _deploy(project, url: str) -> None:
    project.deploy(url, TOPOLOGY)


def _fill(url: str, count: int) -> set[str]:
    """Send count messages, each with a unique `seq` header; create the ledger tables."""
    engine = make_engine(url)
    try:
        queue = Transport(engine, "9.1").queue(QUEUE)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE received (message_id uuid NOT NULL, seq int NOT NULL, pid int NOT NULL)")
            conn.exec_driver_sql("CREATE TABLE attempts (message_id uuid NOT NULL, pid int NOT NULL)")
        sent: list[str] = []
        for start in range(0, count, SEND_CHUNK):
            with engine.begin() as conn:
                sent += queue.send_many(conn, [(b"m", {"seq": str(n)}) for n in range(start, min(start + SEND_CHUNK, count))])
        with engine.begin() as conn:
            conn.exec_driver_sql(f'ANALYZE "{QUEUE}"')
        assert len(set(sent)) == count
        return set(sent)
    finally:
        engine.dispose()


class Consumers:
    """Consumer processes; whatever happens, none is left running."""

    def __init__(self, url: str, target=consume, **options):
        self.ctx = process_context(__name__)
        self.target = target
        self.url = url
        self.options = options
        self.go = self.ctx.Event()
        self.procs: list = []
        self.ready: dict[int, object] = {}  # pid -> Event

    def start(self):
        ready = self.ctx.Event()
        proc = self.ctx.Process(target=self.target, args=(self.url, QUEUE, self.go, ready), kwargs=self.options, daemon=True)
        proc.start()
        self.procs.append(proc)
        self.ready[proc.pid] = ready
        return proc

    def wait_ready(self, procs) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for proc in procs:
            while not self.ready[proc.pid].wait(0.1):
                assert proc.is_alive(), f"consumer {proc.pid} died before it was ready (exit code {proc.exitcode})"
                assert time.monotonic() < deadline, "consumers did not get ready in time"

    def alive_and_ready(self) -> list:
        return [p for p in self.procs if p.is_alive() and self.ready[p.pid].is_set()]

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        running = [p.pid for p in self.procs if p.is_alive()]
        assert not running, f"consumers still running after {timeout} s: {running}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for proc in self.procs:
            proc.join(10)


def _ledger(url: str):
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = [(str(i), s, p) for i, s, p in conn.exec_driver_sql("SELECT message_id, seq, pid FROM received")]
            attempts = [(str(i), p) for i, p in conn.exec_driver_sql("SELECT message_id, pid FROM attempts")]
            left = conn.exec_driver_sql(f'SELECT count(*) FROM "{QUEUE}"').scalar()
        return rows, attempts, left
    finally:
        engine.dispose()


def _assert_exactly_once(rows, sent: set[str], left: int) -> None:
    counts = Counter(message_id for message_id, _, _ in rows)
    duplicated = {m: n for m, n in counts.items() if n > 1}
    assert not duplicated, f"{len(duplicated)} message(s) received more than once, e.g. {list(duplicated.items())[:5]}"
    assert len(rows) == len(sent)
    assert set(counts) == sent, f"lost: {len(sent - set(counts))}, unknown: {len(set(counts) - sent)}"
    assert sorted(seq for _, seq, _ in rows) == list(range(len(sent)))
    assert left == 0


# -- the tests ------------------------------------------------------------------------
def test_eight_consumer_processes_receive_each_message_exactly_once(project, pg_url):
    total, consumers = MESSAGES, 8
    _deploy(project, pg_url)
    started = time.monotonic()
    sent = _fill(pg_url, total)
    filled = time.monotonic()
    with Consumers(pg_url) as group:
        procs = [group.start() for _ in range(consumers)]
        group.wait_ready(procs)
        ready = time.monotonic()
        group.go.set()
        group.join(timeout=300)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    drained = time.monotonic()

    rows, _, left = _ledger(pg_url)
    per_pid = Counter(pid for _, _, pid in rows)
    print(
        f"\n[exactly-once] sent {total} in {filled - started:.1f} s; {consumers} consumers ready in "
        f"{ready - filled:.1f} s; drained in {drained - ready:.1f} s ({total / (drained - ready):.0f} msg/s); "
        f"per consumer: {sorted(per_pid.values())}"
    )
    _assert_exactly_once(rows, sent, left)
    assert len(per_pid) > 1, "only one consumer did any work"


def test_batched_consumer_processes_receive_each_message_exactly_once(project, pg_url):
    """receive_batch in competing processes: locked batches never overlap, each batch in FIFO order."""
    total, consumers, batch = 20_000, 4, 25
    _deploy(project, pg_url)
    sent = _fill(pg_url, total)
    with Consumers(pg_url, batch=batch) as group:
        procs = [group.start() for _ in range(consumers)]
        group.wait_ready(procs)
        group.go.set()
        group.join(timeout=300)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    rows, _, left = _ledger(pg_url)
    _assert_exactly_once(rows, sent, left)
    assert len(Counter(pid for _, _, pid in rows)) > 1, "only one consumer did any work"


def test_eight_batched_pump_processes_drain_each_message_exactly_once(project, pg_url):
    """MessagePump(batch_size=50) in 8 competing processes: each message handled and committed once."""
    total, consumers, batch = MESSAGES, 8, 50
    _deploy(project, pg_url)
    sent = _fill(pg_url, total)
    with Consumers(pg_url, target=pump_consume, batch=batch) as group:
        procs = [group.start() for _ in range(consumers)]
        group.wait_ready(procs)
        ready = time.monotonic()
        group.go.set()
        group.join(timeout=300)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    drained = time.monotonic()
    rows, _, left = _ledger(pg_url)
    per_pid = Counter(pid for _, _, pid in rows)
    print(f"\n[pumps] {consumers} pumps, batch {batch}: {total} drained in {drained - ready:.1f} s; per pump: {sorted(per_pid.values())}")
    _assert_exactly_once(rows, sent, left)
    assert len(per_pid) > 1, "only one pump did any work"


def test_consumers_killed_mid_transaction_lose_and_duplicate_nothing(project, pg_url):
    total, consumers = 20_000, 8
    min_kills, max_kills, kill_phase_s = 30, 40, 60
    stop_killing_below = 2000  # leave work for the survivors, so the queue is never empty while kills go on
    _deploy(project, pg_url)
    sent = _fill(pg_url, total)
    started = time.monotonic()
    killed: set[int] = set()
    monitor = make_engine(pg_url)
    try:
        with Consumers(pg_url, max_delay_s=0.003, record_attempts=True) as group:
            group.wait_ready([group.start() for _ in range(consumers)])
            group.go.set()
            deadline = time.monotonic() + kill_phase_s
            while len(killed) < max_kills and time.monotonic() < deadline:
                time.sleep(random.uniform(0.05, 0.15))
                with monitor.connect() as conn:
                    remaining = conn.exec_driver_sql(f'SELECT count(*) FROM "{QUEUE}"').scalar()
                if remaining < stop_killing_below:
                    break
                candidates = group.alive_and_ready()
                if not candidates:
                    continue
                victim = random.choice(candidates)
                os.kill(victim.pid, signal.SIGKILL)
                victim.join(10)
                killed.add(victim.pid)
                group.start()  # a replacement
            kill_phase = time.monotonic() - started
            group.join(timeout=300)
            survivors = [p for p in group.procs if p.pid not in killed]
            assert all(p.exitcode == 0 for p in survivors), [(p.pid, p.exitcode) for p in survivors]
        elapsed = time.monotonic() - started
    finally:
        monitor.dispose()

    rows, attempts, left = _ledger(pg_url)
    committed_by = {message_id: pid for message_id, _, pid in rows}
    interrupted = {message_id for message_id, pid in attempts if pid in killed and committed_by.get(message_id) != pid}
    re_received = {message_id for message_id in interrupted if message_id in committed_by}
    print(
        f"\n[kills] {len(killed)} consumers SIGKILLed in a {kill_phase:.1f} s kill phase; {len(interrupted)} receive(s) "
        f"interrupted mid-transaction, {len(re_received)} of them received again by another consumer; "
        f"{len(attempts)} attempts for {total} messages; total {elapsed:.1f} s"
    )
    _assert_exactly_once(rows, sent, left)
    assert len(killed) >= min_kills, f"only {len(killed)} kills before the queue ran low"
    assert re_received, "no receive interrupted by a kill was received again"
    assert re_received == interrupted  # every interrupted receive came back (implied by exactly-once; said plainly)
