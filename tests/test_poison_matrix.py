"""One poison message never stops an endpoint: the pump's recoverability on every receive path, on real
PostgreSQL and SQLite databases.

{plain, outbox} x {one database, tenant databases} x {batch 1, batch 50}: the Sales queue holds
healthy messages and every kind of poison the path can meet, interleaved: a handler that raises, a
body the handler cannot read, headers that cannot be read, and with tenant databases an unknown
tenant, a message without the tenant header, and a tenant database that is down until the message's
first delayed retry. With immediate_retries=1 and delayed_retries=1 each failing message takes
exactly two attempts, a delayed retry (NServiceBus.Retries=1), two more attempts, then the error
queue once, with the exception headers NServiceBus writes; the message whose database came back is
handled once; every healthy message is handled once, in the order it was sent, and sends once; one
warning per attempt, no more.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport
from sqltransport_schema.schema import TableName

from .support.databases import PG_ADMIN_URL, admin, pg_databases
from .support.messages import id_for
from .support.projects import REPO, new_project

ONE_DATABASE = """\
transport_version: "9.1"
engines: [postgresql, sqlite]
endpoints:
  - name: Sales
    outbox: true
  - name: Billing
queues:
  - name: error
"""
TENANT_DATABASES = ONE_DATABASE.replace("endpoints:", "tenants:\n  tables: [outbox]\nendpoints:")

IMMEDIATE, DELAYED, INCREASE = 1, 1, 0.2
ATTEMPTS = (IMMEDIATE + 1) * (DELAYED + 1)  # a poison message's handler failures before the error queue
TENANT = "tenant"


def ident(name: str) -> str:
    """A message's NServiceBus.MessageId."""
    return id_for("poison-matrix", name)


@dataclass
class Bus:
    """A deployed topology: the shared database, tenant databases a and b (b goes down), a tenant URL
    whose database does not exist, and the effects table wherever handlers write."""

    engine_name: str
    tenants: bool
    shared: str
    ini: str
    tenant_urls: dict[str, str] = field(default_factory=dict)
    effects_urls: list[str] = field(default_factory=list)


def _effects_table(url: str) -> None:
    engine = make_engine(url)
    seq = "seq SERIAL PRIMARY KEY" if engine.dialect.name == "postgresql" else "seq INTEGER PRIMARY KEY AUTOINCREMENT"
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE effects ({seq}, message_id VARCHAR(64) NOT NULL)"))
    engine.dispose()


@pytest.fixture(
    scope="module",
    params=[("postgresql", False), ("postgresql", True), ("sqlite", False), ("sqlite", True)],
    ids=["postgresql-one", "postgresql-tenants", "sqlite-one", "sqlite-tenants"],
)
def bus(request, tmp_path_factory):
    engine_name, tenants = request.param
    root = tmp_path_factory.mktemp("poison")
    project = new_project(root / "project")
    count = 3 if tenants else 1
    if engine_name == "postgresql":
        databases = pg_databases(count)
        urls = next(databases)
    else:
        databases = None
        urls = [f"sqlite:///{root / f'db{i}.db'}" for i in range(count)]
    try:
        project.deploy(urls[0], TENANT_DATABASES if tenants else ONE_DATABASE)
        found = Bus(engine_name, tenants, urls[0], str(project.ini))
        if tenants:
            for url in urls[1:]:
                project.upgrade(url, "head", "role=tenant")
            missing = (
                f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/sqlts_no_such_tenant" if engine_name == "postgresql" else f"sqlite:///{root / 'none.db'}"
            )
            found.tenant_urls = {"a": urls[1], "b": urls[2], "zzz": missing}
            found.effects_urls = urls[1:]
        else:
            found.effects_urls = [urls[0]]
        for url in found.effects_urls:
            _effects_table(url)
        yield found
    finally:
        if databases is not None:
            next(databases, None)


class Down:
    """Tenant database b out of reach, as a database that is gone is (renamed away; a SQLite file moved),
    then back."""

    def __init__(self, bus: Bus):
        self.bus = bus
        self.url = bus.tenant_urls["b"]
        self.is_down = False

    def __enter__(self) -> Down:
        self._rename(self.url, self.url + "_away")
        self.is_down = True
        return self

    def back(self) -> None:
        if self.is_down:
            self._rename(self.url + "_away", self.url)
            self.is_down = False

    def __exit__(self, *exc) -> None:
        self.back()

    def _rename(self, source: str, target: str) -> None:
        if self.bus.engine_name == "sqlite":
            shutil.move(source.removeprefix("sqlite:///"), target.removeprefix("sqlite:///"))
            return
        engine = admin(PG_ADMIN_URL, "PostgreSQL")
        old, new = source.rsplit("/", 1)[1], target.rsplit("/", 1)[1]
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"), {"d": old})
            conn.execute(sa.text(f'ALTER DATABASE "{old}" RENAME TO "{new}"'))
        engine.dispose()


def _reset(bus: Bus, transport: Transport) -> None:
    """Every table the scenario touches emptied (the module's databases serve every case)."""
    dialect = transport.dialect
    tables = [TableName(name) for name in ("Sales", "Sales.Delayed", "Billing", "error")]
    with transport.engine.begin() as conn:
        for table in tables:
            conn.execute(sa.text(f"DELETE FROM {dialect.qualified(table)}"))
        if not bus.tenants:
            conn.execute(sa.text(f"DELETE FROM {dialect.qualified(TableName('Sales_OutboxData'))}"))
    for url in bus.effects_urls:
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM effects"))
            if bus.tenants:
                conn.execute(sa.text(f"DELETE FROM {dialect.qualified(TableName('Sales_OutboxData'))}"))
        engine.dispose()


def _messages(tenants: bool, postgresql: bool) -> list[tuple[str, bytes, dict[str, str] | str]]:
    """(name, body, headers) in the order sent: healthy ones between every kind of poison. On
    PostgreSQL one more: a handler whose send carries a NUL in a header, which the outbox's jsonb
    row refuses (\u0000) while the plain send's text column takes it escaped: poison with the
    outbox only."""

    def headers(name: str, **more: str) -> dict[str, str]:
        return {wire.MESSAGE_ID: ident(name), **({TENANT: "a"} if tenants else {}), **more}

    found: list[tuple[str, bytes, dict[str, str] | str]] = [
        ("raises", b'{"order": 0}', headers("raises", kind="raise")),
        ("healthy-1", b'{"order": 1}', headers("healthy-1")),
        ("unreadable-body", b"\xff\xfe not json", headers("unreadable-body")),
        ("healthy-2", b'{"order": 2}', headers("healthy-2")),
        ("unreadable-headers", b'{"order": 9}', '{"NServiceBus.MessageId": '),
    ]
    if postgresql:
        found.append(("unstorable", b'{"order": 7}', headers("unstorable", kind="nul")))
    if tenants:
        found += [
            ("unknown-tenant", b'{"order": 3}', {**headers("unknown-tenant"), TENANT: "zzz"}),
            ("no-tenant", b'{"order": 4}', {wire.MESSAGE_ID: ident("no-tenant")}),
            ("tenant-down", b'{"order": 5}', {**headers("tenant-down"), TENANT: "b"}),
        ]
    return found + [("healthy-3", b'{"order": 6}', headers("healthy-3"))]


HEALTHY = ["healthy-1", "healthy-2", "healthy-3"]


def _rows(transport: Transport, table: str) -> list[tuple[str, str | None]]:
    """(raw headers, Id) of every row of a queue table."""
    with transport.engine.connect() as conn:
        return [(row[0], None) for row in conn.execute(sa.text(f"SELECT Headers FROM {transport.dialect.qualified(TableName(table))}"))]


def _effects(bus: Bus) -> list[str]:
    """The message ids whose effect committed, in commit order (over every database handlers write to)."""
    found = []
    for url in bus.effects_urls:
        engine = make_engine(url)
        with engine.connect() as conn:
            found += [row[0] for row in conn.execute(sa.text("SELECT message_id FROM effects ORDER BY seq"))]
        engine.dispose()
    return found


def _wait(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("batch", [1, 50])
@pytest.mark.parametrize("outbox", [False, True], ids=["plain", "outbox"])
def test_every_poison_message_ends_in_error_once_and_every_healthy_one_is_handled_once(bus, outbox, batch, caplog):
    transport = Transport.from_database(make_engine(bus.shared), bus.ini)
    _reset(bus, transport)
    sent = _messages(bus.tenants, bus.engine_name == "postgresql")
    with transport.engine.begin() as conn:
        for name, body, headers in sent:
            transport.queue("Sales").send(conn, body, headers, message_id=ident(name))

    def handler(message, context):
        json.loads(message.body)  # a body that cannot be read fails here
        if message.headers.get("kind") == "raise":
            raise RuntimeError("the handler refuses this order")
        key = message.headers[wire.MESSAGE_ID]
        context.connection.execute(sa.text("INSERT INTO effects (message_id) VALUES (:id)"), {"id": key})
        note = "a\x00b" if message.headers.get("kind") == "nul" else "fine"
        context.send("Billing", b"{}", {wire.MESSAGE_ID: id_for(key), "note": note})

    choose = (lambda headers: bus.tenant_urls[headers[TENANT]]) if bus.tenants else None
    handled = (
        HEALTHY + (["tenant-down"] if bus.tenants else []) + (["unstorable"] if bus.engine_name == "postgresql" and not outbox else [])
    )
    poison = [name for name, *_ in sent if name not in handled]
    caplog.set_level(logging.WARNING, logger="sqltransport_schema")
    with Down(bus) if bus.tenants else _Nothing() as down:
        pump = MessagePump(
            transport,
            transport.queue("Sales"),
            handler,
            batch_size=batch,
            peek_delay=0.1,
            immediate_retries=IMMEDIATE,
            delayed_retries=DELAYED,
            delayed_retry_increase=INCREASE,
            endpoint=transport.endpoint("Sales"),
            outbox=outbox,
            tenant_database=choose,
        )
        pump.start()
        try:
            if bus.tenants:  # b comes back once its message is waiting for its first delayed retry
                _wait(lambda: any(ident("tenant-down") in raw for raw, _ in _rows(transport, "Sales.Delayed")), "tenant-down delayed")
                down.back()
            expected_billing = len(handled)
            _wait(
                lambda: len(_rows(transport, "error")) >= len(poison) and len(_rows(transport, "Billing")) >= expected_billing,
                "every message settled",
            )
            _wait(lambda: not _rows(transport, "Sales") and not _rows(transport, "Sales.Delayed"), "Sales and its delayed table empty")
        finally:
            pump.stop(30)
    assert pump.failure is None

    errors = [(raw, _readable(raw)) for raw, _ in _rows(transport, "error")]
    in_error = Counter(headers[wire.MESSAGE_ID] if headers else "unreadable" for _, headers in errors)
    assert in_error == Counter({ident(name): 1 for name in poison if name != "unreadable-headers"} | {"unreadable": 1})
    for raw, headers in errors:
        if headers is None:
            assert raw == '{"NServiceBus.MessageId": '  # unreadable headers: moved unchanged, at once
            continue
        assert headers[wire.FAILED_Q] == transport.queue("Sales").address and wire.EXCEPTION_TYPE in headers
        assert wire.DELAYED_RETRIES not in headers and wire.DELAYED_RETRIES_TIMESTAMP in headers  # it had its delayed retry

    effects = _effects(bus)
    assert Counter(effects) == Counter(ident(name) for name in handled)  # each once
    assert [e for e in effects if e in {ident(n) for n in HEALTHY}] == [ident(n) for n in HEALTHY]  # FIFO
    assert len(_rows(transport, "Billing")) == len(handled)  # each sent once

    attempts = Counter()
    for record in caplog.records:
        if record.levelno == logging.WARNING and record.getMessage().startswith("handling message "):
            attempts[record.getMessage().split()[2]] += 1
    for name in poison:
        if name != "unreadable-headers":
            assert attempts[ident(name)] == ATTEMPTS, f"{name}: {attempts[ident(name)]} attempts, the policy says {ATTEMPTS}"
    assert attempts[ident("unreadable-headers")] == 0
    transport.engine.dispose()


def _readable(raw: str) -> dict[str, str] | None:
    try:
        return wire.decode_headers(raw)
    except wire.PoisonHeaders:
        return None


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


@pytest.mark.parametrize("bus", [("postgresql", False), ("sqlite", False)], indirect=True, ids=["postgresql", "sqlite"])
@pytest.mark.parametrize("point", ["delayed-store", "due-move"])
def test_a_pump_killed_during_a_delayed_retry_loses_and_doubles_nothing(bus, point):
    """SIGKILL as a failed message goes to its delayed retry (before that receive commits) and as it
    comes back (before the move commits); the pump run again: the poison message in the error queue
    once, after the whole policy; each healthy message's effect once."""
    transport = Transport.from_database(make_engine(bus.shared), bus.ini)
    _reset(bus, transport)
    with transport.engine.begin() as conn:
        for name, kind in (("raises", "raise"), ("healthy-1", "ok"), ("healthy-2", "ok")):
            transport.queue("Sales").send(conn, b"{}", {wire.MESSAGE_ID: ident(name), "kind": kind}, message_id=ident(name))
    command = [sys.executable, "-m", "tests.support.retry_child", bus.shared, bus.ini]
    crashed = subprocess.run([*command, point], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    errors = [wire.decode_headers(raw) for raw, _ in _rows(transport, "error")]
    assert [headers[wire.MESSAGE_ID] for headers in errors] == [ident("raises")]
    assert Counter(_effects(bus)) == Counter({ident("healthy-1"): 1, ident("healthy-2"): 1})
    assert "Retries: 1" in again.stderr or "delayed retry 1 of 1" in again.stderr + crashed.stderr
    transport.engine.dispose()


@pytest.mark.parametrize("bus", [("postgresql", False)], indirect=True, ids=["postgresql"])
def test_a_pump_over_many_tenants_holds_at_most_max_tenant_connections(bus):
    """Eight tenant databases, max_tenant_connections=3: never more than three of them connected at once
    (the least recently used engine closed first), and none once the pump has closed."""
    transport = Transport.from_database(make_engine(bus.shared), bus.ini)
    _reset(bus, transport)
    databases = pg_databases(8)
    tenants = next(databases)
    names = [url.rsplit("/", 1)[1] for url in tenants]
    watch = admin(PG_ADMIN_URL, "PostgreSQL")
    count = sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = ANY(:names)")
    seen: list[int] = []
    try:
        with transport.engine.begin() as conn:
            for i in range(24):
                transport.queue("Sales").send(conn, b"{}", {TENANT: str(i % 8)})

        def handler(message, context):
            context.connection.execute(sa.text("SELECT 1"))
            with watch.connect() as conn:
                seen.append(conn.execute(count, {"names": names}).scalar())

        pump = MessagePump(
            transport,
            transport.queue("Sales"),
            handler,
            batch_size=4,
            delayed_retries=0,
            tenant_database=lambda headers: tenants[int(headers[TENANT])],
            max_tenant_connections=3,
        )
        while pump.receive_batch():
            pass
        assert pump.processed == 24 and pump.tenants.open == 3
        assert max(seen) <= 3, seen
        pump.close()

        def connected() -> int:
            with watch.connect() as conn:
                return conn.execute(count, {"names": names}).scalar()

        _wait(lambda: connected() == 0, "the tenants' sessions ended (a backend leaves pg_stat_activity as it exits)", 10)
    finally:
        watch.dispose()
        next(databases, None)
        transport.engine.dispose()


def test_delayed_retries_need_the_endpoint_s_delayed_table(sqlite_url, project, caplog):
    """Without an endpoint (or with one whose delayed table is not deployed) there are no delayed
    retries, said at construction; asked for by number, a usage error naming the fix."""
    from sqltransport_schema.errors import UsageError

    project.deploy(sqlite_url, ONE_DATABASE.replace("  - name: Billing\n", ""))
    transport = Transport.from_database(make_engine(sqlite_url), str(project.ini))
    sales = transport.queue("Sales")
    caplog.set_level(logging.INFO, logger="sqltransport_schema")
    assert MessagePump(transport, sales, print).delayed_retries == 0
    assert "no delayed retries for Sales" in caplog.text
    assert MessagePump(transport, sales, print, endpoint=transport.endpoint("Sales")).delayed_retries == 3  # NServiceBus's default
    with pytest.raises(UsageError, match="delayed_retries=2 needs the endpoint's delayed table"):
        MessagePump(transport, sales, print, delayed_retries=2, endpoint=transport.endpoint("Billing"))
    with pytest.raises(UsageError, match="immediate_retries is a number of retries"):
        MessagePump(transport, sales, print, immediate_retries=-1)
    transport.engine.dispose()
