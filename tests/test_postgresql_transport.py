"""The PostgreSQL transport's own behaviour, on a real server: BodyString as its installer adds it,
delayed messages stored with its five-part due time and moved under competition with its locking."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import psycopg
import pytest

from sqltransport_schema.db import make_engine
from sqltransport_schema.engines.postgresql import PostgreSQL
from sqltransport_schema.runtime.transport import Transport, _due_after
from sqltransport_schema.schema import Kind, TableName, TableSpec
from sqltransport_schema.versions import profile

from .support import catalog
from .support.commands import adopt_cli, check_cli
from .support.installers import INSTALLER
from .support.messages import headers

TOPOLOGY = """\
transport_version: "{version}"
engines: [postgresql]
endpoints:
  - name: Sales
    body_string: {body_string}
"""
PG = PostgreSQL()


def driver_url(url: str) -> str:
    return url.replace("+psycopg", "")


def deploy(project, url, version="9.1", body_string="false") -> Transport:
    project.deploy(url, TOPOLOGY.format(version=version, body_string=body_string))
    return Transport(make_engine(url), version)


# --------------------------------------------------------------------------- BodyString
def test_body_string_added_to_a_queue_holding_messages_keeps_every_message(project, pg_url, capsys):
    transport = deploy(project, pg_url)
    sales = transport.queue("Sales")
    bodies = [f"{{\"order\": {n}}}".encode() for n in range(200)]
    with transport.engine.begin() as conn:
        sent = sales.send_many(conn, [(body, headers(n)) for n, body in enumerate(bodies)])
        endpoint = transport.endpoint("Sales")
        for n in range(20):  # and delayed messages: the transport's option covers the delayed table too
            endpoint.send_delayed(conn, endpoint.input, f"later {n}".encode(), headers(n), due_after=timedelta(hours=1))
    before = project.head()

    project.write_topology(TOPOLOGY.format(version="9.1", body_string="true"))
    assert project.compile("body string") == 0
    revision = project.revisions()[-1].read_text()
    assert 'op.add_body_string("Sales", version="9.1")' in revision
    assert 'op.add_body_string("Sales.Delayed", version="9.1")' in revision
    project.upgrade(pg_url)
    with psycopg.connect(driver_url(pg_url)) as raw:
        delayed = raw.execute('SELECT Body, BodyString FROM "public"."Sales.Delayed" ORDER BY Due').fetchall()
    assert sorted(b for b, _ in delayed) == sorted(f"later {n}".encode() for n in range(20))
    assert all(body_string == body.decode("ascii") for body, body_string in delayed)

    table = catalog.read(pg_url)[("public", "Sales")]
    assert table.columns["bodystring"] == ("TEXT", True) and table.rows == 200
    with psycopg.connect(driver_url(pg_url)) as raw:
        rows = raw.execute('SELECT Id::text, Body, BodyString FROM "public"."Sales" ORDER BY Seq').fetchall()
    assert [r[0] for r in rows] == sent
    assert all(body_string == body.decode("ascii") for _, body, body_string in rows)  # encode(Body, 'escape')
    assert check_cli(project, pg_url, capsys) == 0

    with transport.engine.begin() as conn:  # the runtime reads past the generated column
        received = [sales.receive(conn) for _ in bodies]
    assert [m.id for m in received] == sent and [m.body for m in received] == bodies

    project.downgrade(pg_url, before)
    assert "bodystring" not in catalog.read(pg_url)[("public", "Sales")].columns
    assert "bodystring" not in catalog.read(pg_url)[("public", "Sales.Delayed")].columns
    assert catalog.read(pg_url)[("public", "Sales.Delayed")].rows == 20
    transport.engine.dispose()


def test_a_queue_created_with_body_string_gets_the_column_once(project, pg_url):
    transport = deploy(project, pg_url, version="8.1.13", body_string="true")
    spec = TableSpec(Kind.QUEUE, TableName("Sales"), body_string=True)
    again = PG.add_body_string(spec, profile("8.1.13"))
    assert again[0].startswith("DO $$") and "pg_advisory_xact_lock('3619444225693432866')" in again[0]
    assert "ALTER TABLE public.\"Sales\"" in again[0]
    with psycopg.connect(driver_url(pg_url)) as raw:
        raw.execute(again[0])  # the installer's block finds the column and leaves it
    assert catalog.read(pg_url)[("public", "Sales")].columns["bodystring"] == ("TEXT", True)
    with transport.engine.begin() as conn:
        transport.queue("Sales").send(conn, b"<order/>", headers())
    with psycopg.connect(driver_url(pg_url)) as raw:
        assert raw.execute('SELECT BodyString FROM "public"."Sales"').fetchone() == ("<order/>",)
    transport.engine.dispose()


def test_a_schema_that_a_bare_name_would_not_reach_is_quoted_in_the_alter():
    spec = TableSpec(Kind.QUEUE, TableName("Sales", "Billing"), body_string=True)
    block = PG.add_body_string(spec, profile("9.1"))[0]
    assert "table_schema = 'Billing'" in block and 'ALTER TABLE "Billing"."Sales"' in block
    assert PG.bare("public") == "public" and PG.bare("user") == '"user"' and PG.bare("a b") == '"a b"'


@pytest.mark.parametrize("version", ["8.1.12", "9.0.1"])
def test_body_string_is_refused_where_the_transports_script_never_adds_it(project, version, capsys):
    project.write_topology(TOPOLOGY.format(version=version, body_string="true"))
    assert project.compile("initial") != 0
    assert "never adds the column (it does from 8.1.13 and 9.0.2 on)" in capsys.readouterr().err


def test_adopt_tells_the_body_string_releases_apart(project, pg_url, capsys):
    spec = TableSpec(Kind.QUEUE, TableName("Sales", "public"), body_string=True)
    catalog.execute(pg_url, INSTALLER[0], *PG.add_body_string(spec, profile("9.1")))
    topology = TOPOLOGY.format(version="9.1", body_string="true")
    project.write_topology("subscriptions: false\n" + topology.replace("    body_string", "    delayed_delivery: false\n    body_string"))
    project.compile("initial")
    code, payload = adopt_cli(project, pg_url, capsys, "--dry-run")
    assert (code, payload["status"]) == (0, "matches_head"), json.dumps(payload)
    assert payload["made_by"] == ["8.1.13", "9.0.2", "9.1"]

    catalog.execute(pg_url, 'ALTER TABLE "public"."Sales" DROP COLUMN BodyString')
    code, payload = adopt_cli(project, pg_url, capsys, "--dry-run")
    assert payload["status"] == "needs_upgrade" and payload["plan"], json.dumps(payload)
    assert payload["plan"] == ['add body string column of "public"."Sales"']


# --------------------------------------------------------------------------- delayed delivery
def test_the_due_time_is_stored_from_its_five_parts(project, pg_url):
    transport = deploy(project, pg_url)
    sales = transport.endpoint("Sales")
    delay = timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)
    parts = {k: v for k, v in _due_after(delay).items() if k != "Due"}  # Due: SQL Server 3.1-4.1's absolute form
    assert parts == {
        "DueAfterMs": 93784005,
        "DueAfterDays": 1,
        "DueAfterHours": 2,
        "DueAfterMinutes": 3,
        "DueAfterSeconds": 4,
        "DueAfterMilliseconds": 5,
    }
    assert _due_after(-1.5)["DueAfterSeconds"] == -1 and _due_after(-1.5)["DueAfterMilliseconds"] == -500
    with transport.engine.begin() as conn:
        sales.send_delayed(conn, sales.input, b"later", headers(), due_after=delay)
    with psycopg.connect(driver_url(pg_url)) as raw:
        (ahead,) = raw.execute('SELECT Due - now() FROM "public"."Sales.Delayed"').fetchone()
    assert abs(ahead - delay) < timedelta(seconds=5)
    transport.engine.dispose()


def test_next_due_passes_over_a_row_another_mover_holds(project, pg_url):
    transport = deploy(project, pg_url)
    sales = transport.endpoint("Sales")
    with transport.engine.begin() as conn:
        sales.send_delayed(conn, sales.input, b"first", headers(1), due_after=3600)
        sales.send_delayed(conn, sales.input, b"second", headers(2), due_after=7200)
    with transport.engine.connect() as holder, transport.engine.connect() as other:
        with holder.begin():
            first = sales.next_due(holder)  # locks the earliest row until this transaction ends
            with other.begin():
                other.exec_driver_sql("SET LOCAL lock_timeout = '2s'")
                second = sales.next_due(other)
        assert second - first > timedelta(minutes=59)
    transport.engine.dispose()


def test_due_messages_moved_by_competing_movers_arrive_exactly_once(project, pg_url):
    transport = deploy(project, pg_url)
    sales = transport.endpoint("Sales")
    with transport.engine.begin() as conn:
        for n in range(300):
            sales.send_delayed(conn, sales.input, str(n).encode(), headers(n), due_after=-1)
    with psycopg.connect(driver_url(pg_url)) as raw:
        delayed_ids = {r[0] for r in raw.execute('SELECT Id FROM "public"."Sales.Delayed"')}

    movers, start, moved, errors = 6, threading.Barrier(6), [], []
    engine = make_engine(pg_url, pool_size=movers)

    def mover():
        try:
            start.wait()
            count = 0
            while True:
                with engine.begin() as conn:  # the move and the next-due probe in one transaction, as upstream
                    batch = sales.move_due(conn, 7)
                    pending = sales.next_due(conn)
                count += batch
                if batch == 0 and pending is None:
                    break
            moved.append(count)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=mover) for _ in range(movers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(moved) == movers
    assert sum(moved) == 300
    with psycopg.connect(driver_url(pg_url)) as raw:
        queued = [r[0] for r in raw.execute('SELECT Id FROM "public"."Sales"')]
        left = raw.execute('SELECT count(*) FROM "public"."Sales.Delayed"').fetchone()[0]
    assert left == 0 and len(queued) == 300 and set(queued) == delayed_ids
    with engine.begin() as conn:
        bodies = sorted(int(m.body) for m in sales.input.receive_batch(conn, 400))
    assert bodies == list(range(300))
    engine.dispose()
    transport.engine.dispose()


def test_find_subscribers_binds_the_transports_parameter_names(project, pg_url):
    transport = deploy(project, pg_url)
    subs = transport.subscriptions()
    statement = subs._statements(3)["find_subscribers"]
    assert statement.params == ("Topic_0", "Topic_1", "Topic_2") and "@Topic_2)" in statement.sql
    with transport.engine.begin() as conn:
        subs.subscribe(conn, "Billing", "Billing@[public]", "Shop.OrderPlaced")
        subs.subscribe(conn, "Audit", "Audit@[public]", "Shop.OrderShipped")
        assert subs.subscribers(conn, ["Shop.Nothing", "Shop.OrderShipped", "Shop.OrderPlaced"]) == ["Audit@[public]", "Billing@[public]"]
    transport.engine.dispose()


def test_the_first_releases_peek_without_locks():
    old = PG.runtime_statements(profile("8.1.4"), TableName("Sales"))["peek"]
    new = PG.runtime_statements(profile("8.1.5"), TableName("Sales"))["peek"]
    assert "max(seq)" in old.sql and "FOR UPDATE" not in old.sql and "SKIP LOCKED" in new.sql


def test_adopt_reads_body_string_on_the_delayed_table_as_the_installer_adds_it(project, pg_url, capsys):
    """The transport's option runs the BodyString block for the delayed table too: such a database
    is the head as it is, and one whose delayed table lacks the column gets just that step."""
    queue = TableSpec(Kind.QUEUE, TableName("Sales", "public"), body_string=True)
    delayed = TableSpec(Kind.DELAYED, TableName("Sales.Delayed", "public"), body_string=True)
    blocks = PG.add_body_string(queue, profile("9.1")) + PG.add_body_string(delayed, profile("9.1"))
    catalog.execute(pg_url, INSTALLER[0], INSTALLER[2], INSTALLER[3], *blocks)
    project.write_topology("subscriptions: false\n" + TOPOLOGY.format(version="9.1", body_string="true"))
    project.compile("initial")
    code, payload = adopt_cli(project, pg_url, capsys, "--dry-run")
    assert (code, payload["status"]) == (0, "matches_head"), json.dumps(payload)

    catalog.execute(pg_url, 'ALTER TABLE "public"."Sales.Delayed" DROP COLUMN BodyString')
    code, payload = adopt_cli(project, pg_url, capsys, "--dry-run")
    assert payload["plan"] == ['add body string column of "public"."Sales.Delayed"'], json.dumps(payload)
    code, payload = adopt_cli(project, pg_url, capsys, "--apply")
    assert code == 0, json.dumps(payload)
    assert "bodystring" in catalog.read(pg_url)[("public", "Sales.Delayed")].columns
    assert check_cli(project, pg_url, capsys) == 0
