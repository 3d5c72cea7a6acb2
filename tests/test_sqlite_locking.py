"""Competing processes on one SQLite file through the runtime API: they wait for each other, no call fails.

Every sender and consumer is its own process (forked by a forkserver that imported this module once)
with its own engine or sqlite3 connection,
on the database the project's migrations made. All four ways in are mixed: a SQLAlchemy
Connection (`with conn.begin():` around each call, as an application writes it), a plain sqlite3
connection bound with `Transport.driver_connection`, and the message pump. Any exception a call
raises (or a database failure the pump logs and retries) is a failed call; the test asks for none,
and for every message sent to be received exactly once.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections import Counter

import pytest

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.transport import Transport

from .support.runtime import deployed
from .support.warm import process_context

QUEUE = "Sales"
TOPIC = "Shop.OrderPlaced"
ROUNDS = 5
SENDS = 400  # per sender and round
PREFILLED = 800
EMPTY_SLEEP_S = 0.002
DEADLINE_S = 120

pytestmark = pytest.mark.slow

SENDERS = ("connection", "driver")
CONSUMERS = ("connection", "driver", "pump", "pump")


# -- the processes (module level: the forkserver imports them by name) ----------------------
class _Counted(logging.Handler):
    """The pump's warnings about failed receives and peeks: each is a failed call it retried."""

    def __init__(self, failures: list[str]):
        super().__init__(logging.WARNING)
        self.failures = failures

    def emit(self, record):
        self.failures.append(record.getMessage())


def _retrying(failures: list[str], call):
    """Call until it succeeds; every exception on the way is a failed call."""
    while True:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - counted, reported by the test
            failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")


def work(role: str, path: str, url: str, ini: str, start, senders_done, results, sends: int) -> None:
    failures: list[str] = []
    done: list[str] = []
    try:
        start.wait(timeout=DEADLINE_S)
        engine = make_engine(url)
        transport = _retrying(failures, lambda: Transport.from_database(engine, ini))
        queue = transport.queue(QUEUE)
        if role == "sender":
            _send(path, engine, transport, queue, sends, done, failures)
        elif path == "pump":
            _pump(engine, transport, queue, senders_done, done, failures)
        else:
            _consume(path, engine, transport, queue, senders_done, done, failures)
        engine.dispose()
    except BaseException as exc:  # noqa: BLE001 - the parent fails the test with it
        failures.append(f"process ended: {type(exc).__name__}: {exc}")
    results.put((role, path, done, failures))


def _send(path, engine, transport, queue, sends, done, failures) -> None:
    if path == "driver":
        conn = sqlite3.connect(engine.url.database)
        bound = transport.driver_connection(conn)

        def send_one(n):
            message_id = queue.send(bound, b"body", {"n": str(n)})
            conn.commit()
            return message_id
    else:
        conn = engine.connect()

        def send_one(n):  # every other one published: the subscribers read, then the send writes
            headers = {wire.MESSAGE_ID: str(uuid.uuid4()), "n": str(n)}
            with conn.begin():
                if n % 2:
                    assert transport.publish(conn, TOPIC, b"body", headers) == [queue.address]
                    return headers[wire.MESSAGE_ID]
                return queue.send(conn, b"body", headers)

    for n in range(sends):
        try:
            done.append(send_one(n))
        except Exception as exc:  # noqa: BLE001
            failures.append(f"send: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            conn.rollback()
    conn.close()


def _consume(path, engine, transport, queue, senders_done, done, failures) -> None:
    if path == "driver":
        raw = sqlite3.connect(engine.url.database)
        conn = transport.driver_connection(raw)
        commit, rollback, close = raw.commit, raw.rollback, raw.close
    else:
        conn = engine.connect()
        commit, rollback, close = conn.commit, conn.rollback, conn.close
    empty = 0
    while True:
        try:
            message = queue.receive(conn)
            commit()
        except Exception as exc:  # noqa: BLE001
            failures.append(f"receive: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            rollback()
            continue
        if message is not None:
            done.append(message.id)
            empty = 0
            continue
        if senders_done.is_set():
            empty += 1
            if empty >= 3:
                break
        time.sleep(EMPTY_SLEEP_S)
    close()


def _pump(engine, transport, queue, senders_done, done, failures) -> None:
    from sqltransport_schema.runtime.pump import MessagePump

    logging.getLogger("sqltransport_schema.pump").addHandler(_Counted(failures))
    pump = MessagePump(transport, queue, lambda message, context: done.append(message.id), concurrency=2, peek_delay=0.1)
    pump.start()
    while True:
        time.sleep(0.05)
        if senders_done.is_set():
            with engine.connect() as conn:
                if _retrying(failures, lambda: queue.peek(conn)) == 0:
                    break
    pump.stop()


# -- the parent ----------------------------------------------------------------------------
def _run(url: str, ini: str, senders: tuple[str, ...], consumers: tuple[str, ...]) -> tuple[list, list]:
    """One round: every process starts at once; (sent ids, received ids) once all are done."""
    ctx = process_context(__name__)
    start, senders_done, results = ctx.Barrier(len(senders) + len(consumers)), ctx.Event(), ctx.Queue()
    if not senders:
        senders_done.set()
    roles = [("sender", p) for p in senders] + [("consumer", p) for p in consumers]
    procs = [
        ctx.Process(target=work, args=(role, path, url, ini, start, senders_done, results, SENDS), daemon=True) for role, path in roles
    ]
    for proc in procs:
        proc.start()
    try:
        outcomes, failures = [], []
        deadline = time.monotonic() + DEADLINE_S
        while len(outcomes) < len(procs):
            role, path, done, failed = results.get(timeout=max(0.1, deadline - time.monotonic()))
            outcomes.append((role, done))
            failures += [f"{role} ({path}): {f}" for f in failed]
            if sum(r == "sender" for r, _ in outcomes) == len(senders):
                senders_done.set()
        assert not failures, f"{len(failures)} failed call(s): {failures[:10]}"
        sent = [m for role, done in outcomes if role == "sender" for m in done]
        received = [m for role, done in outcomes if role == "consumer" for m in done]
        return sent, received
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


def _assert_exactly_once(sent, received, url: str) -> None:
    twice = [m for m, n in Counter(received).items() if n > 1]
    assert not twice, f"{len(twice)} message(s) received more than once"
    assert set(received) == set(sent), f"lost: {len(set(sent) - set(received))}, unknown: {len(set(received) - set(sent))}"
    with sqlite3.connect(make_engine(url).url.database) as raw:
        assert raw.execute(f'SELECT count(*) FROM "{QUEUE}"').fetchone()[0] == 0


@pytest.fixture
def deployment(project, sqlite_url, monkeypatch):
    transport = deployed(project, sqlite_url, monkeypatch)
    with transport.engine.begin() as conn:
        transport.subscriptions().subscribe(conn, "Sales", transport.queue(QUEUE).address, TOPIC)
    transport.engine.dispose()
    return sqlite_url, str(project.ini)


@pytest.mark.parametrize("round_no", range(ROUNDS))
def test_four_consumers_and_two_senders_no_call_fails(deployment, round_no):
    url, ini = deployment
    sent, received = _run(url, ini, SENDERS, CONSUMERS)
    assert len(sent) == SENDS * len(SENDERS)
    _assert_exactly_once(sent, received, url)


@pytest.mark.parametrize("round_no", range(ROUNDS))
def test_four_consumers_start_at_once_on_a_filled_queue(deployment, round_no):
    url, ini = deployment
    engine = make_engine(url)
    queue = Transport(engine, "9.1").queue(QUEUE)
    with engine.begin() as conn:
        sent = queue.send_many(conn, [(b"body", {"n": str(n)}) for n in range(PREFILLED)])
    engine.dispose()
    _, received = _run(url, ini, (), CONSUMERS)
    _assert_exactly_once(sent, received, url)


def test_the_migrations_create_a_database_in_wal_and_leave_an_existing_one_as_it_is(project, tmp_path, monkeypatch):
    new = f"sqlite:///{tmp_path / 'new.db'}"
    existing = tmp_path / "existing.db"
    with sqlite3.connect(existing) as raw:
        raw.execute("CREATE TABLE app (x)")  # the application's own table: not a database the migrations create
    deployed(project, new, monkeypatch).engine.dispose()
    project.upgrade(f"sqlite:///{existing}")
    modes = {}
    for path in (tmp_path / "new.db", existing):
        with sqlite3.connect(path) as raw:
            modes[path.name] = raw.execute("PRAGMA journal_mode").fetchone()[0]
    assert modes == {"new.db": "wal", "existing.db": "delete"}


def test_runtime_connections_wait_and_begin_as_writers(deployment):
    url, _ini = deployment
    engine = make_engine(url)
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
        # BEGIN IMMEDIATE: this transaction holds the write lock before it writes
        with conn.begin(), pytest.raises(sqlite3.OperationalError, match="locked"):
            sqlite3.connect(engine.url.database, timeout=0).execute("BEGIN IMMEDIATE")
    engine.dispose()
    driver = sqlite3.connect(make_engine(url).url.database, timeout=60)
    Transport(make_engine(url), "9.1").driver_connection(driver)
    assert driver.execute("PRAGMA busy_timeout").fetchone()[0] == 60000  # a longer timeout is kept
    assert driver.isolation_level == "IMMEDIATE"  # sqlite3's implicit BEGIN now begins a writer
    driver.close()
