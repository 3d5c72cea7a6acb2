"""status and retry on real SQLite and PostgreSQL, against tables the project's migrations made; SQL
Server's statements parsed as T-SQL."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from sqltransport_schema import cli, engines, errors, wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.errorqueue import LEFT_NO_FAILED_Q, LEFT_UNKNOWN, retry
from sqltransport_schema.runtime.status import status
from sqltransport_schema.runtime.transport import Transport
from sqltransport_schema.schema import Kind, TableName
from sqltransport_schema.versions import profile

from .support import catalog
from .support.projects import REPO
from .support.runtime import TOPOLOGY
from .support.tsql import parse_problems
from .support.warm import program


def deploy(project, url: str) -> None:
    project.deploy(url, TOPOLOGY)


@pytest.fixture
def bus(project, db_url, monkeypatch):
    deploy(project, db_url)
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(db_url))
    yield transport, db_url
    transport.engine.dispose()


def headers(n: int = 0, sent: datetime | None = None, **extra: str) -> dict[str, str]:
    return {
        **wire.standard_headers(message_id=str(uuid.uuid4()), enclosed_types=["Shop.OrderPlaced"], reply_to="Sales", now=sent),
        "n": str(n),
        **extra,
    }


def failed(transport: Transport, queue: str, n: int, **extra: str) -> dict[str, str]:
    """Headers of a message the pump moved to the error queue after failing in `queue`."""
    try:
        raise RuntimeError(f"handler failed on {n}")
    except RuntimeError as exc:
        return {**wire.error_headers(headers(n), exc, queue), "NServiceBus.Retries": "2", **extra}


def run_cli(*argv: str, capsys) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def table(report: dict, name: str) -> dict:
    return next(t for t in report["tables"] if t["name"] == name)


# --------------------------------------------------------------------------------------------- status
def test_status_reports_what_was_sent(bus, capsys):
    transport, url = bus
    sales, billing, error = (transport.queue(n) for n in ("Sales", "Billing", "error"))
    hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    endpoint = transport.endpoint("Sales")
    with transport.engine.begin() as conn:
        sales.send(conn, b"head", headers(0, sent=hour_ago))
        sales.send_many(conn, [(b"x", headers(n)) for n in range(1, 40)])
        sales.send_many(conn, [(b"old", headers(n)) for n in range(3)], time_to_be_received=0.001)  # expire at once
        billing.send_many(conn, [(b"y", headers(n)) for n in range(7)])
        for n in range(3):
            endpoint.send_delayed(conn, sales, b"due", headers(n), due_after=0.001)
        for n in range(2):
            endpoint.send_delayed(conn, sales, b"later", headers(n), due_after=3600)
        error.send_many(conn, [(b"e", failed(transport, sales.address, n)) for n in range(4)])
        error.send(conn, b"e", failed(transport, billing.address, 9))
        error.send(conn, b"e", headers(10))  # no FailedQ
        subscriptions = transport.subscriptions()
        subscriptions.subscribe(conn, "Billing", billing.address, "Shop.OrderPlaced")
        subscriptions.subscribe(conn, "Sales", sales.address, "Shop.OrderPlaced")
        subscriptions.subscribe(conn, "Billing", billing.address, "Shop.OrderCancelled")
    time.sleep(0.1)  # (SQLite's statements take no negative delay: a short one, then a wait)

    code, out, _ = run_cli("status", "--url", url, "--format", "json", capsys=capsys)
    assert code == 0
    report = json.loads(out)
    assert {(t["kind"], t["name"]) for t in report["tables"]} == {
        ("queue", "Sales"),
        ("queue", "Billing"),
        ("queue", "error"),
        ("queue", "audit"),
        ("delayed", "Sales.Delayed"),
        ("delayed", "Billing.Delayed"),
        ("subscriptions", "SubscriptionRouting"),
    }
    got = table(report, "Sales")
    assert (got["depth"], got["expired"], got["missing"], got["estimated"]) == (43, 3, False, False)
    assert set(got) >= {"kind", "schema", "catalog", "name", "address", "depth"} and got["address"] == sales.address
    # the schema the table is in, as its address says (docs/operations.md); SQLite has none
    assert (got["schema"], got["catalog"]) == ((None, None) if url.startswith("sqlite") else ("public", None))
    assert 3590 < got["oldest_age_seconds"] < 3700
    assert datetime.fromisoformat(got["oldest_time_sent"]) == wire.parse_time_sent(wire.format_time_sent(hour_ago))
    assert (table(report, "Billing")["depth"], table(report, "audit")["depth"], table(report, "audit")["oldest_age_seconds"]) == (
        7,
        0,
        None,
    )
    delayed = table(report, "Sales.Delayed")
    assert (delayed["depth"], delayed["due"]) == (5, 3)
    assert datetime.fromisoformat(delayed["next_due"]) < datetime.now(timezone.utc)
    assert table(report, "Billing.Delayed")["next_due"] is None
    err = table(report, "error")
    assert err["depth"] == 6
    assert {f["failed_queue"]: f["messages"] for f in err["failed_queues"]} == {sales.address: 4, billing.address: 1, None: 1}
    assert table(report, "SubscriptionRouting")["topics"] == [
        {"topic": "Shop.OrderCancelled", "subscribers": 1},
        {"topic": "Shop.OrderPlaced", "subscribers": 2},
    ]

    code, out, _ = run_cli("status", "--url", url, capsys=capsys)
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("queue") and sales.address + " " in line)
    assert re.search(r"\s43\s+1\.0h\s+3 expired$", line), line
    assert "4 from " + sales.address in out and "1 from (no FailedQ)" in out and "3 due, next due" in out

    code, out, _ = run_cli("status", "--url", url, "--format", "markdown", capsys=capsys)
    assert code == 0 and out.startswith("### sqltransport-schema status") and "| queue | " + sales.address + " | 43 | 1.0h |" in out


def test_status_counts_messages_the_postgresql_transport_sent_with_its_own_sql(project, pg_url, monkeypatch, capsys):
    """The send and the delayed store as transport-facts §7 gives them, run through psycopg."""
    import psycopg

    project.write_topology(TOPOLOGY.replace('"9.1"', '"9.1"\nengines: [postgresql]'))
    project.compile("initial")
    project.upgrade(pg_url)
    nsb_send = (
        'INSERT INTO "public"."Sales" (Id, Expires, Headers, Body) VALUES (%(Id)s, (now() AT TIME ZONE \'UTC\') + '
        "(%(TimeToBeReceivedMs)s || ' ms')::INTERVAL, %(Headers)s, %(Body)s)"
    )
    nsb_store = PG_STORE_DELAYED.replace("{delayed}", '"public"."Sales.Delayed"')
    sent = datetime.now(timezone.utc) - timedelta(minutes=5)
    with psycopg.connect(pg_url.replace("+psycopg", "")) as raw:
        for n in range(25):
            ttbr = -1000 if n < 5 else None  # five already expired
            raw.execute(
                nsb_send, {"Id": uuid.uuid4(), "TimeToBeReceivedMs": ttbr, "Headers": wire.encode_headers(headers(n, sent)), "Body": b"b"}
            )
        for seconds in (-5, -5, 600):
            raw.execute(nsb_store, {"Headers": "{}", "Body": b"d", "Days": 0, "Hours": 0, "Minutes": 0, "Seconds": seconds, "Ms": 0})
    capsys.readouterr()
    code, out, _ = run_cli("status", "--url", pg_url, "--format", "json", capsys=capsys)
    report = json.loads(out)
    sales = table(report, "Sales")
    assert (code, sales["depth"], sales["expired"]) == (0, 25, 5)
    assert 295 < sales["oldest_age_seconds"] < 400
    assert (table(report, "Sales.Delayed")["depth"], table(report, "Sales.Delayed")["due"]) == (3, 2)


PG_STORE_DELAYED = """\
WITH params (DueDate) as (
   values (timestamptz (now() AT TIME ZONE 'UTC')
      + (%(Days)s || ' days ')::INTERVAL + (%(Hours)s || ' hours ')::INTERVAL
      + (%(Minutes)s || ' mins ')::INTERVAL + (%(Seconds)s || ' s ')::INTERVAL
      + (%(Ms)s || ' ms')::INTERVAL)
)
INSERT INTO {delayed} (Headers, Body, Due)
SELECT %(Headers)s, %(Body)s, DueDate
FROM params"""


def test_a_table_missing_from_the_database_is_reported(bus, capsys):
    transport, url = bus
    catalog.execute(url, 'DROP TABLE "Billing"' if url.startswith("sqlite") else 'DROP TABLE "public"."Billing"')
    code, out, err = run_cli("status", "--url", url, "--format", "json", capsys=capsys)
    assert code == 1 and err == ""
    report = json.loads(out)
    assert table(report, "Billing")["missing"] is True and table(report, "Billing")["depth"] is None
    assert table(report, "Sales")["missing"] is False and table(report, "Sales")["depth"] == 0
    code, out, _ = run_cli("status", "--url", url, capsys=capsys)
    assert code == 1 and "missing from the database" in out and "1 table(s) of the deployed blueprint are missing" in out


def test_estimate_mode(bus, capsys):
    transport, url = bus
    with transport.engine.begin() as conn:
        transport.queue("Sales").send_many(conn, [(b"x", headers(n)) for n in range(30)])
    if not url.startswith("sqlite"):
        catalog.execute(url, "ANALYZE")
    report = status(transport, estimate=True)
    sales = next(t for t in report.tables if t.name == "Sales")
    assert sales.estimated and sales.expired is None and sales.oldest_age_seconds is not None
    assert sales.depth == 30  # SQLite: the peek; PostgreSQL: the statistics after ANALYZE
    assert next(t for t in report.tables if t.name == "Sales.Delayed").due == 0
    billing = next(t for t in report.tables if t.name == "Billing")  # estimated empty: no head read (PostgreSQL)
    assert (billing.depth, billing.oldest_time_sent, billing.estimated) == (0, None, True)


def fill_bus(transport: Transport) -> None:
    """Messages in every kind of table: queues (one empty), expired ones, delayed, failed, subscribers."""
    sales, billing, error = (transport.queue(n) for n in ("Sales", "Billing", "error"))
    with transport.engine.begin() as conn:
        sales.send(conn, b"head", headers(0, sent=datetime.now(timezone.utc) - timedelta(minutes=10)))
        sales.send_many(conn, [(b"x", headers(n)) for n in range(1, 12)])
        sales.send_many(conn, [(b"old", headers(n)) for n in range(2)], time_to_be_received=0.001)
        billing.send_many(conn, [(b"y", headers(n)) for n in range(4)])
        transport.endpoint("Sales").send_delayed(conn, sales, b"due", headers(0), due_after=0.001)
        error.send_many(conn, [(b"e", failed(transport, sales.address, n)) for n in range(3)])
        transport.subscriptions().subscribe(conn, "Billing", billing.address, "Shop.OrderPlaced")
    time.sleep(0.1)


def test_status_on_its_own_connections_matches_status_in_the_callers_transaction(bus, monkeypatch):
    """Spread over the engine's connections (PostgreSQL: two) or run in the caller's transaction,
    the figures are the same, with statements of two tables each (several per connection)."""
    transport, url = bus
    fill_bus(transport)
    monkeypatch.setattr(transport.dialect.live_bus, "batch", 2)
    now = datetime.now(timezone.utc)
    transport.engine.dispose()
    spread = status(transport, now=now).to_json()
    if not url.startswith("sqlite"):
        assert transport.engine.pool.checkedin() == 2  # the status's own connection and one more
    with transport.engine.connect() as conn, conn.begin():
        alone = status(transport, now=now, connection=conn).to_json()
    assert spread == alone
    sales = table(spread, "Sales")
    assert (sales["depth"], sales["expired"], table(spread, "Billing")["depth"], table(spread, "audit")["depth"]) == (14, 2, 4, 0)
    assert 590 < sales["oldest_age_seconds"] < 700 and table(spread, "Sales.Delayed")["due"] == 1
    assert table(spread, "error")["failed_queues"] == [{"failed_queue": sales["address"], "messages": 3}]


def test_a_repeated_status_runs_each_share_on_the_same_session(project, pg_url, monkeypatch):
    """Each pooled connection runs the statements it ran before, so its session has them prepared
    (psycopg prepares them at their first run) and the tables' catalog entries loaded: after three
    runs each statement is prepared in one session only."""
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(pg_url)
    transport = Transport.from_database(make_engine(pg_url))
    fill_bus(transport)
    monkeypatch.setattr(transport.dialect.live_bus, "batch", 2)
    try:
        reports = [status(transport, now=datetime.now(timezone.utc)) for _ in range(3)]
        assert {t.name: t.depth for t in reports[0].tables} == {t.name: t.depth for t in reports[-1].tables}
        assert transport.engine.pool.checkedin() == 2
        prepared = []
        with transport.engine.connect() as one, transport.engine.connect() as other:
            for conn in (one, other):
                rows = conn.exec_driver_sql("SELECT statement FROM pg_prepared_statements").scalars().all()
                prepared.append({text for text in rows if "count(*)" in text and "GROUP BY" not in text})
        assert prepared[0] and prepared[1] and not prepared[0] & prepared[1]
        assert len(prepared[0] | prepared[1]) >= 4  # 7 tables, 2 a statement (a queue first seen filled changes its text)
    finally:
        transport.engine.dispose()


def test_a_queue_the_statistics_call_empty_is_counted_and_its_head_read_after(project, pg_url):
    """Counting, a queue the statistics estimate empty is counted without planning its head read;
    when the count finds messages (the statistics lag behind), its head is read after."""
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(pg_url)
    transport = Transport.from_database(make_engine(pg_url))
    catalog.execute(pg_url, "ANALYZE")  # every table analyzed empty
    try:
        with transport.engine.connect() as conn:
            with conn.begin():
                sales = transport.queue("Sales")
                sales.send(conn, b"head", headers(0, sent=datetime.now(timezone.utc) - timedelta(minutes=10)))
                sales.send_many(conn, [(b"x", headers(n)) for n in range(1, 12)])
            conn.exec_driver_sql("SELECT pg_stat_force_next_flush()").all()  # the sends' counts reach the statistics now
        catalog.execute(pg_url, "SELECT pg_stat_reset()")  # ... and are forgotten
        estimate = "SELECT pg_stat_get_live_tuples(c.oid) + c.reltuples FROM pg_class c WHERE c.relname = 'Sales'"
        assert catalog.execute(pg_url, estimate) == [(0,)]
        report = status(transport)
        got = next(t for t in report.tables if t.name == "Sales")
        assert got.depth == 12 and got.expired == 0 and 590 < got.oldest_age_seconds < 700
        assert next(t for t in report.tables if t.name == "Billing").oldest_time_sent is None
        again = next(t for t in status(transport).tables if t.name == "Sales")  # now read in the figures statement
        assert again.depth == 12 and again.oldest_time_sent == got.oldest_time_sent
    finally:
        transport.engine.dispose()


def test_status_without_a_second_connection_counts_on_the_first(project, pg_url, monkeypatch):
    """An engine whose pool has no connection to spare: the status's own connection runs every
    statement after waiting a second for another (not the pool's 30 s)."""
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(pg_url)
    transport = Transport.from_database(make_engine(pg_url, pool_size=1, max_overflow=0))
    fill_bus(transport)
    monkeypatch.setattr(transport.dialect.live_bus, "batch", 2)
    try:
        started = time.monotonic()
        report = status(transport).to_json()
        assert time.monotonic() - started < 10
        assert (table(report, "Sales")["depth"], table(report, "Billing")["depth"], table(report, "Sales.Delayed")["due"]) == (14, 4, 1)
        assert table(report, "SubscriptionRouting")["topics"] == [{"topic": "Shop.OrderPlaced", "subscribers": 1}]
    finally:
        transport.engine.dispose()


# A strict reading of the Prometheus text exposition format (0.0.4): comments are HELP or TYPE
# lines, every sample is name{label="value",...} number, a family's TYPE precedes its samples.
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"({_NAME})(?:\{{({_LABEL}(?:,{_LABEL})*)?\}})? (-?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|NaN|\+Inf|-Inf))(?: -?\d+)?")
_HELP = re.compile(rf"# HELP ({_NAME}) .+")
_TYPE = re.compile(rf"# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)")


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    assert text.endswith("\n")
    families: dict[str, list] = {}
    typed: set[str] = set()
    for line in text[:-1].split("\n"):
        if m := _HELP.fullmatch(line):
            assert m.group(1) not in families, f"HELP after samples: {line}"
        elif m := _TYPE.fullmatch(line):
            assert m.group(1) not in typed, f"second TYPE: {line}"
            typed.add(m.group(1))
            families[m.group(1)] = []
        else:
            m = _SAMPLE.fullmatch(line)
            assert m, f"not a sample line: {line!r}"
            assert m.group(1) in typed, f"sample before its TYPE: {line}"
            labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            families[m.group(1)].append(
                ({k: re.sub(r"\\(.)", lambda e: "\n" if e[1] == "n" else e[1], v) for k, v in labels.items()}, float(m.group(3)))
            )
    return families


def test_prometheus_text_parses(bus, capsys):
    transport, url = bus
    with transport.engine.begin() as conn:
        transport.queue("Sales").send_many(conn, [(b"x", headers(n)) for n in range(3)])
        transport.queue("error").send(conn, b"e", failed(transport, 'odd"queue\\name', 1))
        transport.subscriptions().subscribe(conn, "Sales", "Sales", "Shop.OrderPlaced")
    code, out, _ = run_cli("status", "--url", url, "--format", "prometheus", capsys=capsys)
    assert code == 0
    families = parse_prometheus(out)
    depth = {labels["table"]: value for labels, value in families["sqltransport_table_depth"]}
    assert depth["Sales"] == 3 and depth["error"] == 1
    assert {labels["failed_queue"] for labels, _ in families["sqltransport_error_messages"]} == {'odd"queue\\name'}
    assert families["sqltransport_topic_subscribers"] == [
        ({"address": transport.address_of(transport.name("SubscriptionRouting")), "topic": "Shop.OrderPlaced"}, 1.0)
    ]
    assert all(value == 0 for _, value in families["sqltransport_table_missing"])
    with pytest.raises(AssertionError):
        parse_prometheus('sqltransport_table_depth{table="x} 1\n')  # the parser is strict


def test_watch_prints_again_until_interrupted(bus):
    transport, url = bus
    command = [program("sqltransport-schema"), "status", "--url", url, "--watch", "0.2", "--format", "json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out = ""
    while out.count('"tables"') < 2:  # interrupted once it has printed twice (not after a sleep: a loaded machine is slower)
        line = process.stdout.readline()
        if not line:
            process.kill()
            pytest.fail(f"status --watch ended before its second report: {process.stderr.read()}")
        out += line
    process.send_signal(signal.SIGINT)
    rest, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert (out + rest).count('"tables"') >= 2


def start_watch(url: str, *args: str, stdout=subprocess.PIPE) -> subprocess.Popen:
    command = [program("sqltransport-schema"), "status", "--url", url, *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, env=env)


def test_watch_shows_messages_in_and_out_per_second_since_the_last_report(bus):
    transport, url = bus
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        sales.send_many(conn, [(b"before", headers(n)) for n in range(5)])
    with transport.engine.begin() as conn:
        sales.receive_batch(conn, 5)  # Sales is empty at the first report: its sequence still counts
    process = start_watch(url, "--watch", "3", "--watch-count", "2", "--format", "json")
    first = b""
    while not first.endswith(b"\n}\n"):  # the first report, whole
        line = process.stdout.readline()
        assert line, process.stderr.read().decode()
        first += line
    with transport.engine.begin() as conn:
        sales.send_many(conn, [(b"x", headers(n)) for n in range(10)])
    with transport.engine.begin() as conn:
        assert len(sales.receive_batch(conn, 4)) == 4
    rest, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    reports = [json.loads(first), json.loads(rest)]
    seconds = (datetime.fromisoformat(reports[1]["taken_at"]) - datetime.fromisoformat(reports[0]["taken_at"])).total_seconds()
    assert seconds >= 3
    assert "in_per_second" not in table(reports[0], "Sales")  # nothing to compare the first with
    sales_rates, billing_rates = table(reports[1], "Sales"), table(reports[1], "Billing")
    assert table(reports[0], "Sales")["depth"] == 0 and sales_rates["depth"] == 6
    assert sales_rates["in_per_second"] * seconds == pytest.approx(10, abs=0.01)
    assert sales_rates["out_per_second"] * seconds == pytest.approx(4, abs=0.01)
    assert billing_rates["in_per_second"] == billing_rates["out_per_second"] == 0
    assert "in_per_second" not in table(reports[1], "Sales.Delayed")  # queues only


def test_watch_redraws_on_a_terminal_and_appends_when_piped(project, sqlite_url):
    deploy(project, sqlite_url)
    args = ("--watch", "0.2", "--watch-count", "2")
    piped = start_watch(sqlite_url, *args)
    out, err = piped.communicate(timeout=60)
    assert piped.returncode == 0, err.decode()
    assert b"\x1b[" not in out and out.count(b"KIND ") == 2 and out.count(b"IN/S  OUT/S") == 2
    main, secondary = pty.openpty()
    on_terminal = start_watch(sqlite_url, *args, stdout=secondary)
    os.close(secondary)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert on_terminal.wait(60) == 0, on_terminal.stderr.read().decode()
    screens = shown.split(b"\x1b[H\x1b[2J")
    assert len(screens) == 3 and screens[0] == b""  # each report starts by clearing the screen
    assert all(screen.count(b"KIND ") == 1 for screen in screens[1:])


def test_watch_count_needs_watch(bus, capsys):
    _transport, url = bus
    code, _out, err = run_cli("status", "--url", url, "--watch-count", "2", capsys=capsys)
    assert code == 2 and "--watch-count takes a positive number of reports, with --watch SECONDS" in err


# ---------------------------------------------------------------------------------------------- retry
def fill_error_queue(transport: Transport) -> dict[str, list[dict]]:
    """Failed messages of Sales (5), Billing (3), of an unknown queue (2) and one without FailedQ."""
    sales, _billing = transport.queue("Sales"), transport.queue("Billing")
    sent = {
        "Sales": [failed(transport, sales.address, n) for n in range(5)],
        "Billing": [failed(transport, "Billing", n) for n in range(3)],
    }
    sent["Gone"] = [failed(transport, "Gone@[dbo]", n) for n in range(2)]
    sent["none"] = [headers(99)]
    with transport.engine.begin() as conn:
        for group in sent.values():
            transport.queue("error").send_many(conn, [(f"body {h['n']}".encode(), h) for h in group])
    return sent


def received(transport: Transport, queue: str) -> list:
    """Every message of the queue, received (so gone from it)."""
    with transport.engine.begin() as conn:
        return transport.queue(queue).receive_batch(conn, 100_000)


def depth(transport: Transport, queue: str) -> int:
    return next(t.depth for t in status(transport).tables if t.name == queue)


def test_retry_all_moves_each_message_back_to_its_failed_queue(bus, capsys):
    transport, url = bus
    sent = fill_error_queue(transport)
    code, out, _ = run_cli("retry", "--url", url, "--all", "--batch-size", "3", "--format", "json", capsys=capsys)
    report = json.loads(out)
    assert code == 1  # some stay: the finding
    assert report["moved"] == 8 and report["batches"] == 4 and report["scanned"] == 11
    assert {q["address"]: q["messages"] for q in report["by_queue"]} == {
        transport.queue("Sales").address: 5,
        transport.queue("Billing").address: 3,
    }
    assert {(q["failed_queue"], q["reason"]): q["messages"] for q in report["left"]} == {
        ("Gone@[dbo]", LEFT_UNKNOWN): 2,
        (None, LEFT_NO_FAILED_Q): 1,
    }
    sales = received(transport, "Sales")
    assert [m.headers["NServiceBus.MessageId"] for m in sales] == [h["NServiceBus.MessageId"] for h in sent["Sales"]]
    assert [m.body for m in sales] == [f"body {n}".encode() for n in range(5)]
    for message, original in zip(sales, sent["Sales"]):
        assert message.headers == wire.retry_headers(original)
        assert not any(k.startswith(("NServiceBus.ExceptionInfo.", "NServiceBus.Retries")) for k in message.headers)
        assert "NServiceBus.FailedQ" not in message.headers and "NServiceBus.TimeOfFailure" not in message.headers
        assert message.headers["NServiceBus.TimeSent"] == original["NServiceBus.TimeSent"]
    assert len(received(transport, "Billing")) == 3
    code, out, _ = run_cli("retry", "--url", url, "--all", capsys=capsys)  # again: only what stays is read
    assert code == 1 and out.startswith("moved 0 message(s)") and f"FailedQ Gone@[dbo]: {LEFT_UNKNOWN}" in out
    left = received(transport, "error")
    assert sorted(m.headers.get("NServiceBus.FailedQ", "-") for m in left) == ["-", "Gone@[dbo]", "Gone@[dbo]"]


def test_retry_of_one_failed_queue_and_of_some_ids(bus, capsys):
    transport, url = bus
    sent = fill_error_queue(transport)
    code, out, _ = run_cli("retry", "--url", url, "--failed-queue", "Billing", capsys=capsys)
    assert code == 0, out
    assert out.splitlines()[:2] == [
        "moved 3 message(s) from " + transport.queue("error").address + " in 1 batch(es)",
        "  3 to " + transport.queue("Billing").address,
    ]
    assert len(received(transport, "Billing")) == 3 and received(transport, "Sales") == []

    wanted = [sent["Sales"][1]["NServiceBus.MessageId"], sent["Sales"][3]["NServiceBus.MessageId"].upper(), "no-such-id"]
    code, out, _ = run_cli("retry", "--url", url, "--message-id", *wanted, "--format", "json", capsys=capsys)
    report = json.loads(out)
    assert code == 1 and report["moved"] == 2 and report["not_found"] == ["no-such-id"] and report["left"] == []
    assert [m.headers["n"] for m in received(transport, "Sales")] == ["1", "3"]
    assert depth(transport, "error") == 3 + 2 + 1


def test_retry_to_a_chosen_queue_sends_every_message_there_and_refuses_what_is_no_queue(bus):
    """to_queue: the messages of an unknown FailedQ and of none go too (the destination is known);
    an address that is no queue of the deployed topology, or the error queue, moves nothing."""
    transport, _ = bus
    fill_error_queue(transport)
    for address, words in (("Gone", "is no queue of the deployed topology"), ("error", "is the error queue itself")):
        with pytest.raises(errors.UsageError, match=words):
            retry(transport, all_messages=True, to_queue=address)
    assert depth(transport, "error") == 11
    report = retry(transport, all_messages=True, to_queue="audit")
    assert (
        report.moved == 11
        and report.left == {}
        and report.by_queue == {transport.address_of(transport.name("audit"), as_engine_knows=True): 11}
    )
    moved = received(transport, "audit")
    assert sorted(m.headers["n"] for m in moved) == sorted(["0", "1", "2", "3", "4", "0", "1", "2", "0", "1", "99"])
    assert not any(k.startswith("NServiceBus.ExceptionInfo") or k == wire.FAILED_Q for m in moved for k in m.headers)
    assert (depth(transport, "Sales"), depth(transport, "Billing"), depth(transport, "error")) == (0, 0, 0)


def test_the_command_retries_to_a_chosen_queue_and_refuses_an_unknown_one_in_one_line(bus, capsys):
    transport, url = bus
    fill_error_queue(transport)
    code, _, err = run_cli("retry", "--url", url, "--all", "--to-queue", "Gone", capsys=capsys)
    assert code == 2 and err.startswith("error: ") and "Gone" in err and len(err.splitlines()) == 1
    assert depth(transport, "error") == 11
    code, out, _ = run_cli("retry", "--url", url, "--failed-queue", "Sales", "--to-queue", "audit", "--format", "json", capsys=capsys)
    assert code == 0 and json.loads(out)["moved"] == 5
    assert (depth(transport, "audit"), depth(transport, "Sales"), depth(transport, "error")) == (5, 0, 6)


def test_dry_run_moves_nothing(bus, capsys):
    transport, url = bus
    fill_error_queue(transport)
    code, out, _ = run_cli("retry", "--url", url, "--all", "--dry-run", "--format", "json", capsys=capsys)
    report = json.loads(out)
    assert code == 1 and report["dry_run"] and report["moved"] == 8
    code, out, _ = run_cli("retry", "--url", url, "--failed-queue", "Sales", "--dry-run", capsys=capsys)
    assert code == 0 and out.startswith("would move 5 message(s)")
    assert (depth(transport, "Sales"), depth(transport, "error")) == (0, 11)


def test_a_long_retry_shows_progress_on_stderr(bus, capsys, monkeypatch):
    from sqltransport_schema.cli import live_bus as cli_operations

    transport, url = bus
    fill_error_queue(transport)
    monkeypatch.setattr(cli_operations, "PROGRESS_INTERVAL", 0.0)  # a line after every batch
    code, out, err = run_cli("retry", "--url", url, "--all", "--batch-size", "4", "--format", "json", capsys=capsys)
    assert code == 1 and json.loads(out)["moved"] == 8
    assert err.splitlines() == [
        "retry: 4 read, moved 4, 0 left in place",
        "retry: 8 read, moved 8, 0 left in place",
        "retry: 11 read, moved 8, 3 left in place",
    ]


def test_a_failed_queue_naming_no_deployed_table_stays(bus):
    transport, url = bus
    fill_error_queue(transport)
    report = retry(transport, failed_queue="Gone@[dbo]")
    assert report.moved == 0 and report.left == {("Gone@[dbo]", LEFT_UNKNOWN): 2}
    assert depth(transport, "error") == 11


def test_the_selection_is_one_of_all_a_queue_or_ids(bus, capsys):
    transport, url = bus
    with pytest.raises(ValueError, match="exactly one"):
        retry(transport, all_messages=True, failed_queue="Sales")
    with pytest.raises(SystemExit) as exited:
        cli.main(["retry", "--url", url])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1
    code, _, err = run_cli("retry", "--url", url, "--all", "--error-queue", "nowhere", capsys=capsys)
    assert code == 2 and "error queue nowhere" in err and len(err.splitlines()) == 1


KILLED_RETRY = """
import sys
from sqltransport_schema.db import make_engine
from sqltransport_schema.errorqueue import retry
from sqltransport_schema.runtime.transport import Transport

transport = Transport.from_database(make_engine(sys.argv[1]), verify=False)
retry(transport, all_messages=True, batch_size=50, progress=lambda r: print(r.moved, flush=True))
"""


def test_a_killed_retry_run_again_loses_and_doubles_nothing(bus):
    transport, url = bus
    total = 3000
    error = transport.queue("error")
    targets = ("Sales", "Billing")
    ids = []
    with transport.engine.begin() as conn:
        for start in range(0, total, 500):
            batch = [failed(transport, targets[n % 2], n) for n in range(start, start + 500)]
            ids += [h["NServiceBus.MessageId"] for h in batch]
            error.send_many(conn, [(str(h["n"]).encode(), h) for h in batch])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", KILLED_RETRY, url], stdout=subprocess.PIPE, text=True, env=env)
    moved = 0
    while moved < 300:  # mid-run: some batches committed, more to come
        line = process.stdout.readline()
        assert line, "the retry ended before it could be killed"
        moved = int(line)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    counts = {name: depth(transport, name) for name in ("error", *targets)}
    assert 0 < counts["error"] < total  # cut in the middle

    report = retry(transport, all_messages=True, batch_size=70)
    assert report.moved == counts["error"] and report.left == {}
    arrived = [m for name in targets for m in received(transport, name)]
    assert sorted(m.headers["NServiceBus.MessageId"] for m in arrived) == sorted(ids)  # each once, none lost
    assert received(transport, "error") == []
    assert all(m.body == m.headers["n"].encode() for m in arrived)


# ---------------------------------------------------------------------------------------- SQL Server
def test_sql_server_statements_parse_as_tsql():
    operations = engines.get("mssql").live_bus
    tables = [
        (Kind.QUEUE, TableName("Sales")),
        (Kind.DELAYED, TableName("Sales.Delayed", "dbo", "nsb")),
        (Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting")),
    ]
    statements = [
        *operations.figures(tables, profile("9.1")),
        *operations.figures(tables, profile("9.1"), estimate=True),
        *operations.tables({None, "nsb"}),
        operations.failed_queue_counts(TableName("error"), profile("9.1")),
        operations.topics(TableName("SubscriptionRouting"), profile("9.1")),
        operations.error_batch(TableName("error"), profile("9.1")),
        operations.error_batch(TableName("error"), profile("9.1"), lock=False),
        operations.delete_retried(TableName("error"), profile("9.1")),
        *(st for st, _ in operations.high_water([(0, TableName("Sales")), (2, TableName("audit", "dbo", "nsb"))], profile("9.1"))),
    ]
    for statement in statements:
        assert parse_problems(statement.sql) == [], statement.sql
    figures = operations.figures(tables, profile("9.1"))[0]
    assert figures.params == () and figures.sql.startswith("SELECT 0 AS i,") and "[nsb].[dbo].[Sales.Delayed] WITH (NOLOCK)" in figures.sql
    assert operations.error_batch(TableName("error"), profile("9.1")).sql == (
        "SELECT TOP (@BatchSize) RowVersion, Id, Headers, Body FROM [dbo].[error] WITH (UPDLOCK, ROWLOCK) "
        "WHERE RowVersion > @After ORDER BY RowVersion"
    )
    assert "JOIN [nsb].sys.partitions AS p" in operations.tables({"nsb"})[0].sql


def test_many_tables_go_in_few_statements():
    operations = engines.get("postgresql").live_bus
    tables = [(Kind.QUEUE, TableName(f"q{n}")) for n in range(1000)]
    statements = operations.figures(tables, profile("9.1"))
    assert len(statements) == 1000 // operations.batch and "\nSELECT 999 AS i, " in statements[-1].sql
    assert all(statement.params == () for statement in statements)


def test_estimating_reads_no_head_of_a_queue_estimated_empty():
    """Its arm is left out; the other tables keep their positions and their statements."""
    operations = engines.get("postgresql").live_bus
    tables = [(Kind.QUEUE, TableName(f"q{n}")) for n in range(2 * operations.batch)]
    every = operations.figures(tables, profile("9.1"), estimate=True)
    some = operations.figures(tables, profile("9.1"), estimate=True, empty=frozenset({1, 2}))
    assert len(every) == len(some) == 2 and some[1].sql == every[1].sql
    assert '"q1"' not in some[0].sql and '"q2"' not in some[0].sql and '(SELECT 3, ' in some[0].sql and '"q3"' in some[0].sql
    assert operations.figures(tables[:2], profile("9.1"), estimate=True, empty=frozenset({0, 1})) == []


# ------------------------------------------------------------------------------ which database
@pytest.mark.parametrize("command", [["status"], ["retry", "--all"]])
def test_no_url_and_no_database_is_refused_and_nothing_created(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)  # no alembic.ini here
    monkeypatch.delenv("SQLTRANSPORT_URL", raising=False)
    code, out, err = run_cli(*command, capsys=capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: no SQLite database at sqltransport.db (the default: no --url")
    assert "--url URL" in err and "SQLTRANSPORT_URL" in err
    assert list(tmp_path.iterdir()) == []  # no empty database made


def test_a_sqlite_url_to_no_file_is_refused_and_nothing_created(tmp_path, capsys):
    missing = tmp_path / "typo.db"
    code, _, err = run_cli("status", "--url", f"sqlite:///{missing}", capsys=capsys)
    assert code == 2 and f"no SQLite database at {missing} (given by --url)" in err
    assert not missing.exists()


def test_status_names_the_database_it_read_password_masked(bus, capsys):
    transport, url = bus
    if url.startswith("postgresql"):
        url = url.replace("postgres@", "postgres:s3cret@", 1)  # trust authentication ignores the password
    shown = url.replace("s3cret", "***")
    code, out, _ = run_cli("status", "--url", url, "--format", "json", capsys=capsys)
    assert code == 0 and json.loads(out)["database"] == shown
    code, out, _ = run_cli("status", "--url", url, capsys=capsys)
    assert code == 0 and out.splitlines()[0].startswith(f"{shown} ({transport.dialect.name}, transport 9.1) at ")
    code, out, _ = run_cli("status", "--url", url, "--format", "markdown", capsys=capsys)
    assert code == 0 and f"Database `{shown}`, transport 9.1." in out
    assert "s3cret" not in out


def test_retry_of_a_failed_queue_accounts_for_every_message_status_counts_under_it(bus, capsys):
    transport, url = bus
    sales, error = transport.queue("Sales"), transport.queue("error")
    # headers whose FailedQ status reads, but that cannot be read as a whole (a key twice: .NET's
    # dictionary refuses them, and so does the runtime's reader)
    poison = json.dumps(failed(transport, sales.address, 7))[:-1] + ', "NServiceBus.MessageId": "again"}'
    with transport.engine.begin() as conn:
        error.send_many(conn, [(b"e", failed(transport, sales.address, n)) for n in range(2)])
        error.send(conn, b"poison", poison)
    code, out, _ = run_cli("status", "--url", url, "--format", "json", capsys=capsys)
    assert {f["failed_queue"]: f["messages"] for f in table(json.loads(out), "error")["failed_queues"]} == {sales.address: 3}

    code, out, _ = run_cli("retry", "--url", url, "--failed-queue", "Sales", capsys=capsys)
    assert code == 1  # a message is left: docs/operations.md
    assert out.splitlines()[0].startswith("moved 2 message(s)")
    assert f"left in place: 1 message(s), FailedQ {sales.address}: headers cannot be read" in out
    with transport.engine.begin() as conn:
        assert [m.body for m in error.receive_batch(conn, 10)] == [b"poison"]  # left as it was
