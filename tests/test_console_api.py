"""The console's JSON API on a real server process, on SQLite and PostgreSQL: the error queue grouped
(by exception, failed queue, message type, endpoint), filtered, paged by keyset, one message's
headers and body as text; a retry moves exactly the messages chosen and is logged in the database;
requests without the CSRF value or the operator token are refused; --read-only and a non-loopback
bind without a token refused."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from sqlalchemy.engine import make_url

from sqltransport_schema import wire

from .support.console import HOSTILE, ConsoleProcess, console_bus, console_missing, needs, seed

pytestmark = pytest.mark.console


@pytest.fixture
def transport(project, db_url, monkeypatch):
    """The bus of the console's tests: the error queue with its archive, and the action log."""
    yield from console_bus(project, db_url, monkeypatch)


@pytest.fixture
def bus(transport):
    needs(console_missing())
    seed(transport)
    return transport


@pytest.fixture
def console(bus, project):
    started = ConsoleProcess(bus.engine.url.render_as_string(hide_password=False), cwd=str(project.root))
    yield started
    started.close()


def csrf(console) -> dict[str, str]:
    return {"X-CSRF-Token": console.json("/api/csrf")["csrf"]}


def error_ids(transport) -> list[str]:
    with transport.engine.connect() as conn:
        return [
            str(row[0])
            for row in conn.exec_driver_sql(f"SELECT Id FROM {transport.dialect.qualified(transport.name('error'), transport.profile)}")
        ]


def test_groups_by_exception_failed_queue_message_type_and_endpoint(bus, console):
    by_exception = console.json("/api/failed/groups?by=exception")["groups"]
    counts = {g["key"]["exception_type"]: g["messages"] for g in by_exception}
    assert counts == {"TimeoutError": 7, "KeyError": 3, "ValueError": 1}
    timeout = next(g for g in by_exception if g["key"]["exception_type"] == "TimeoutError")
    assert timeout["key"]["exception_message"] == "database timeout"
    assert timeout["first_failure"] == "2026-11-01 12:00:00:000000 Z"
    assert timeout["last_failure"] == "2026-11-01 12:06:00:000000 Z"
    queues = {g["key"]["failed_queue"]: g["messages"] for g in console.json("/api/failed/groups?by=failed_queue")["groups"]}
    assert queues == {bus.queue("Sales").address: 7, bus.queue("Billing").address: 4}
    types = console.json("/api/failed/groups?by=message_type")["groups"]
    assert [(g["key"]["message_type"], g["messages"]) for g in types] == [("Shop.OrderPlaced", 11)]
    endpoints = console.json("/api/failed/groups?by=endpoint")["groups"]
    assert sum(g["messages"] for g in endpoints) == 11


def test_filters_time_range_failed_queue_and_header_text(bus, console):
    since = console.json("/api/failed/groups?by=exception&since=2026-11-01T12:05:00&until=2026-11-01T12:11:00")["groups"]
    assert {g["key"]["exception_type"]: g["messages"] for g in since} == {"TimeoutError": 2, "KeyError": 1}
    billing = bus.queue("Billing").address
    only = console.json("/api/failed/groups?by=exception&failed_queue=" + billing)["groups"]
    assert {g["key"]["exception_type"] for g in only} == {"KeyError", "ValueError"}
    text = console.json("/api/failed/messages?text=onerror")["messages"]
    assert [m["exception_type"] for m in text] == ["ValueError"]
    assert console.json("/api/failed/messages?text=100%25")["messages"] == []  # % is a character, not a wildcard


def test_keyset_paging_visits_every_message_once_in_order(bus, console):
    seen, after = [], None
    while True:
        page = console.json("/api/failed/messages?limit=4" + (f"&after={after}" if after is not None else ""))
        seen.extend(m["key"] for m in page["messages"])
        after = page["next_after"]
        if after is None:
            break
    assert len(seen) == 11 and seen == sorted(seen) and len(set(seen)) == 11


def test_a_message_shows_every_header_the_exception_and_the_body_as_text(bus, console):
    [hostile] = console.json("/api/failed/messages?exception_type=ValueError")["messages"]
    message = console.json(f"/api/failed/messages/{hostile['key']}")
    assert message["headers"]["hostile"] == HOSTILE
    assert message["exception"]["type"] == "ValueError" and HOSTILE in message["exception"]["message"]
    assert message["body_kind"] == "xml" or message["body_kind"] == "text"
    [binary] = console.json("/api/failed/messages?exception_type=KeyError&limit=1")["messages"]
    shown = console.json(f"/api/failed/messages/{binary['key']}")
    assert shown["body_kind"] == "binary" and shown["body"].startswith("00000000  00 01 ff 62")
    [timeout] = console.json("/api/failed/messages?exception_type=TimeoutError&limit=1")["messages"]
    body = console.json(f"/api/failed/messages/{timeout['key']}")
    assert body["body_kind"] == "json" and body["body"] == '{\n  "order": 1\n}'
    code, _, text = console.request("/api/failed/messages/999999999")
    assert code == 404 and "no message" in text


def test_retry_moves_exactly_the_chosen_messages_and_logs_the_action(bus, console):
    keyerrors = console.json("/api/failed/messages?exception_type=KeyError")["messages"]
    chosen = [m["id"] for m in keyerrors[:2]]
    job = console.json("/api/retry", {"ids": chosen, "wait": True}, csrf(console))
    assert job["state"] == "done" and job["report"]["moved"] == 2
    left = set(error_ids(bus))
    assert not left & set(chosen) and len(left) == 9
    with bus.engine.connect() as conn:
        billing = bus.dialect.qualified(bus.name("Billing"), bus.profile)
        assert conn.exec_driver_sql(f"SELECT count(*) FROM {billing}").scalar() == 2
    log = console.json("/api/log")["actions"]
    assert log[0]["messages"] == 2 and log[0]["who"].startswith("operator@127.0.0.1") and "2 chosen" in log[0]["target"]


def test_retry_of_a_group_by_filter_takes_that_group_alone(bus, console):
    job = console.json(
        "/api/retry", {"filter": {"exception_type": "TimeoutError", "exception_message": "database timeout"}, "wait": True}, csrf(console)
    )
    assert job["report"]["moved"] == 7
    assert {g["key"]["exception_type"] for g in console.json("/api/failed/groups")["groups"]} == {"KeyError", "ValueError"}


def test_state_changes_without_the_csrf_value_are_refused(bus, console):
    before = error_ids(bus)
    code, _, text = console.request("/api/retry", {"ids": before, "wait": True})
    assert code == 403 and "CSRF" in text
    code, _, _ = console.request("/api/retry", {"ids": before, "wait": True}, {"X-CSRF-Token": "forged"})
    assert code == 403
    assert error_ids(bus) == before


def test_read_only_console_refuses_actions(bus, project):
    started = ConsoleProcess(bus.engine.url.render_as_string(hide_password=False), "--read-only", cwd=str(project.root))
    try:
        before = error_ids(bus)
        code, _, text = started.request("/api/retry", {"ids": before, "wait": True}, csrf(started))
        assert code == 403 and "read-only" in text
        assert error_ids(bus) == before
        assert started.json("/api/overview")["read_only"] is True
    finally:
        started.close()


def test_tokens_views_with_either_actions_with_the_operator_token_alone(bus, project):
    env = {"SQLTRANSPORT_CONSOLE_TOKEN": "operator-token-0123456789", "SQLTRANSPORT_CONSOLE_READ_TOKEN": "reader-token-0123456789"}
    started = ConsoleProcess(bus.engine.url.render_as_string(hide_password=False), env=env, cwd=str(project.root))
    try:
        assert started.request("/api/failed/groups")[0] == 401
        assert started.request("/api/failed/groups", headers={"Authorization": "Bearer wrong-token-0123456789"})[0] == 401
        reader = {"Authorization": "Bearer reader-token-0123456789"}
        operator = {"Authorization": "Bearer operator-token-0123456789"}
        assert started.json("/api/failed/groups", headers=reader)["groups"]
        token = started.json("/api/csrf", headers=reader)["csrf"]
        before = error_ids(bus)
        code, _, text = started.request("/api/retry", {"ids": before[:1], "wait": True}, {**reader, "X-CSRF-Token": token})
        assert code == 403 and "operator token" in text
        assert error_ids(bus) == before
        code, _, text = started.request("/api/retry", {"ids": before[:1], "wait": True}, {**operator, "X-CSRF-Token": token})
        assert code == 403 and "CSRF" in text  # the reader's CSRF value is the reader's alone
        own = started.json("/api/csrf", headers=operator)["csrf"]
        job = started.json("/api/retry", {"ids": before[:1], "wait": True}, {**operator, "X-CSRF-Token": own})
        assert job["report"]["moved"] == 1
    finally:
        started.close()


def test_overview_reuses_status_and_shows_no_password(bus, console):
    overview = console.json("/api/overview")
    tables = {t["name"]: t for t in overview["status"]["tables"]}
    assert tables["error"]["depth"] == 11
    assert (
        overview["migrations"].get("head_revision")
        and overview["migrations"]["deployed_revision"] == overview["migrations"]["head_revision"]
    )
    code, headers, html = console.request("/")
    assert code == 200 and "default-src 'self'" in headers["content-security-policy"]
    assert "<script>" not in html.replace('<script src="/static/console.js" defer></script>', "")


def test_bad_values_are_a_400_naming_the_field(bus, console):
    code, _, text = console.request("/api/failed/groups?by=colour")
    assert code == 400 and "group by" in text
    code, _, text = console.request("/api/failed/messages?since=yesterday")
    assert code == 400 and "since" in text
    assert json.loads(console.request("/api/failed/messages?limit=0")[2])["error"].startswith("limit")


def test_a_grants_monitor_login_gets_the_read_only_console(project, pg_url):
    """grants --monitor's login may read every table and delete from none: the console finds that at
    start (a DELETE of no row, refused) and serves views only, whatever the token."""
    needs(console_missing())
    from .support.grants import TOPOLOGY, apply, run_grants

    deployed = project.deploy(pg_url, TOPOLOGY)
    name = f"sqlts_console_{uuid.uuid4().hex[:10]}"
    apply(deployed, f'CREATE ROLE "{name}" LOGIN')
    try:
        code, sql = run_grants(project, "--engine", "postgresql", "--login", name, "--monitor")
        assert code == 0
        apply(deployed, sql)
        url = make_url(deployed).set(drivername="postgresql+psycopg", username=name).render_as_string(hide_password=False)
        started = ConsoleProcess(url, cwd=str(project.root))
        try:
            assert "read-only" in started.first_line
            state = started.json("/api/csrf")
            assert state["read_only"] is True
            code, _, text = started.request("/api/retry", {"ids": ["x"], "wait": True}, {"X-CSRF-Token": state["csrf"]})
            assert code == 403 and "may not delete" in text
            assert started.json("/api/failed/groups")["groups"] == []
        finally:
            started.close()
    finally:
        apply(deployed, f'REASSIGN OWNED BY "{name}" TO postgres; DROP OWNED BY "{name}"; DROP ROLE "{name}"')


def test_a_slowed_retry_is_cancelled_after_the_batch_in_hand(bus, project):
    """--batch-size 2 and a rate of one batch every 2 s: cancelled at once, the job stops after its
    first batch (committed: those 2 moved), the others stay; the log says it was cancelled."""
    started = ConsoleProcess(bus.engine.url.render_as_string(hide_password=False), "--batch-size", "2", cwd=str(project.root))
    try:
        token = csrf(started)
        job = started.json("/api/retry", {"filter": {}, "rate": 0.5}, token)
        assert job["state"] == "running" and job["chosen"] == 11
        started.json(f"/api/jobs/{job['id']}/cancel", {}, token)
        state = finished(started, job)
        assert state["state"] == "cancelled" and state["report"]["moved"] == 2
        assert len(error_ids(bus)) == 9
        assert started.json("/api/log")["actions"][0]["action"] == "retry (cancelled)"
    finally:
        started.close()


def test_retry_to_a_chosen_queue_moves_them_there_and_an_unknown_queue_is_refused(bus, console):
    token = csrf(console)
    before = error_ids(bus)
    for queue, words in (("Nowhere", "is no queue of the deployed topology"), ("error", "is the error queue itself")):
        code, _, text = console.request("/api/retry", {"filter": {"exception_type": "KeyError"}, "to_queue": queue, "wait": True}, token)
        assert code == 400 and words in json.loads(text)["error"], text
    code, _, text = console.request("/api/retry", {"ids": before[:1], "to_queue": 7}, token)
    assert code == 400 and "to_queue" in text
    assert error_ids(bus) == before  # nothing moved, no job started
    job = console.json("/api/retry", {"filter": {"exception_type": "KeyError"}, "to_queue": "Sales", "wait": True}, token)
    assert job["state"] == "done" and job["report"]["moved"] == 3 and "to Sales" in job["what"]
    assert [q["messages"] for q in job["report"]["by_queue"]] == [3]
    with bus.engine.connect() as conn:
        count = {
            q: conn.exec_driver_sql(f"SELECT count(*) FROM {bus.dialect.qualified(bus.name(q), bus.profile)}").scalar()
            for q in ("Sales", "Billing")
        }
    assert count == {"Sales": 3, "Billing": 0}  # the KeyErrors failed in Billing; they went where they were sent
    assert len(error_ids(bus)) == 8
    assert "to Sales" in console.json("/api/log")["actions"][0]["target"]


def test_the_body_filter_without_body_string_is_a_400(bus, console):
    code, _, text = console.request("/api/failed/groups?body=order")
    assert code == 400 and "no BodyString column" in text


def test_depth_samples_accumulate_and_the_overview_draws_them(bus, project):
    """--sample-interval 1: the sampler reads status every second; messages sent to Sales between
    samples show as a rising line, each sample a point of the SVG drawn in the page (no script)."""
    started = ConsoleProcess(bus.engine.url.render_as_string(hide_password=False), "--sample-interval", "1", cwd=str(project.root))
    try:
        depths: set[int] = set()
        deadline = time.monotonic() + 90
        while len(depths) < 3:
            assert time.monotonic() < deadline, depths
            with bus.engine.begin() as conn:
                bus.queue("Sales").send(conn, b"{}", {"NServiceBus.MessageId": str(uuid.uuid4())})
            time.sleep(1.2)
            samples = started.json("/api/overview")["samples"]
            sales = next(a for a in samples[-1]["depths"] if a.split("@")[0] == "Sales")  # PostgreSQL's names its schema
            depths = {s["depths"][sales] for s in samples}
        code, headers, html = started.request("/")
        assert code == 200 and '<svg id="depth"' in html and "<script>" not in html.split("<main>")[1]
        svg = html.split('<svg id="depth"', 1)[1].split("</svg>", 1)[0]
        line = svg.split(f'data-queue="{sales}"', 1)[1].split("</g>", 1)[0]
        drawn = [int(t.rsplit(": ", 1)[1]) for t in line.split("<title>")[1:] for t in [t.split("</title>")[0]]]
        assert len(drawn) >= 3 and depths <= set(drawn) and drawn == sorted(drawn)  # every depth sampled, in time order
        assert line.count("<circle") == len(drawn) and len(line.split('points="')[1].split('"')[0].split()) == len(drawn)
    finally:
        started.close()


def archived_ids(transport) -> list[str]:
    with transport.engine.connect() as conn:
        table = transport.dialect.qualified(transport.name("error_archive"), transport.profile)
        return sorted(str(row[0]) for row in conn.exec_driver_sql(f"SELECT Id FROM {table}"))


def test_archive_restore_and_purge_move_exactly_the_chosen_messages_and_log_each(bus, console):
    """Archive two chosen messages (out of the error queue, into its archive with why and who),
    restore one of them (back into the error queue), purge by age: each a job, each logged."""
    keyerrors = console.json("/api/failed/messages?exception_type=KeyError")["messages"]
    chosen = sorted(m["id"] for m in keyerrors[:2])
    job = console.json("/api/archive", {"ids": chosen, "why": "poison", "wait": True}, csrf(console))
    assert (job["kind"], job["state"], job["chosen"], job["moved"]) == ("archive", "done", 2, 2)
    assert job["report"]["not_found"] == 0
    assert archived_ids(bus) == chosen
    left = set(error_ids(bus))
    assert not left & set(chosen) and len(left) == 9
    listed = console.json("/api/archive")["messages"]
    assert sorted(m["id"] for m in listed) == chosen
    assert {m["why"] for m in listed} == {"poison"} and all(m["by"].startswith("operator@127.0.0.1") for m in listed)
    restored = console.json("/api/restore", {"keys": [listed[0]["key"]], "wait": True}, csrf(console))
    assert restored["kind"] == "restore" and restored["report"]["moved"] == 1
    assert listed[0]["id"] in error_ids(bus) and archived_ids(bus) == [listed[1]["id"]]
    assert len(error_ids(bus)) == 10
    kept = console.json("/api/purge", {"older_than": "1h", "wait": True}, csrf(console))
    assert kept["moved"] == 0 and kept["chosen"] is None and archived_ids(bus) == [listed[1]["id"]]
    time.sleep(0.05)
    purged = console.json("/api/purge", {"older_than": "1ms", "wait": True}, csrf(console))
    assert purged["moved"] == 1 and archived_ids(bus) == []
    assert len(error_ids(bus)) == 10
    log = [(a["action"], a["messages"]) for a in console.json("/api/log")["actions"]]
    assert log[:4] == [("purge (done)", 1), ("purge (done)", 0), ("restore (done)", 1), ("archive (done)", 2)]


def test_archive_of_a_group_takes_that_group_alone(bus, console):
    code, _, text = console.request("/api/archive", {"ids": ["1; DROP TABLE error"]}, csrf(console))
    assert code == 400 and "GUID" in text
    code, _, text = console.request("/api/archive", {"filter": {}, "rate": 0}, csrf(console))
    assert code == 400 and "rate" in text
    assert console.json("/api/log")["actions"] == []  # refused before any job started
    job = console.json("/api/archive", {"filter": {"exception_type": "TimeoutError"}, "wait": True}, csrf(console))
    assert job["moved"] == 7
    assert len(archived_ids(bus)) == 7 and len(error_ids(bus)) == 4
    assert {g["key"]["exception_type"] for g in console.json("/api/failed/groups")["groups"]} == {"KeyError", "ValueError"}


def finished(console, job: dict) -> dict:
    """The job once it has ended (polled)."""
    deadline = time.monotonic() + 60
    while (job := console.json(f"/api/jobs/{job['id']}"))["state"] == "running":
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    return job


def test_archive_restore_and_purge_jobs_show_progress_and_a_cancel_leaves_each_message_in_one_table(bus, project):
    """--batch-size 2 and a rate of one batch every 5 s: the API shows a job's progress after its
    first batch, a cancel stops it there; every message is then in the error queue or in its archive,
    never both nor neither, the archive holding what the job says it moved. The same for a restore,
    and a purge cancelled after its first batch; each logged as cancelled with its count."""
    started = ConsoleProcess(bus.engine.url.render_as_string(hide_password=False), "--batch-size", "2", cwd=str(project.root))
    try:
        token = csrf(started)
        every = set(error_ids(bus))

        def cancel_after_a_batch(path: str, body: dict) -> dict:
            job = started.json(path, {**body, "rate": 0.2}, token)
            assert job["state"] == "running"
            deadline = time.monotonic() + 60
            while (shown := started.json(f"/api/jobs/{job['id']}"))["moved"] == 0:  # in its pause after a batch
                assert time.monotonic() < deadline and shown["state"] == "running", shown
                time.sleep(0.05)
            assert shown["state"] == "running" and shown["report"]["batches"] >= 1
            started.json(f"/api/jobs/{job['id']}/cancel", {}, token)
            done = finished(started, job)
            assert done["state"] == "cancelled" and 0 < done["moved"] < (done["chosen"] or 11), done
            return done

        def in_exactly_one_table() -> tuple[set[str], set[str]]:
            error, archived = set(error_ids(bus)), set(archived_ids(bus))
            assert not error & archived and error | archived == every
            return error, archived

        archive = cancel_after_a_batch("/api/archive", {"filter": {}})
        assert archive["kind"] == "archive" and archive["chosen"] == 11
        error, archived = in_exactly_one_table()
        assert len(archived) == archive["moved"] and len(error) == 11 - archive["moved"]
        assert started.json("/api/archive", {"ids": sorted(error), "wait": True}, token)["moved"] == len(error)
        assert in_exactly_one_table()[0] == set()
        keys = [m["key"] for m in started.json("/api/archive?limit=20")["messages"]]
        restore = cancel_after_a_batch("/api/restore", {"keys": keys})
        error, archived = in_exactly_one_table()
        assert len(error) == restore["moved"] and len(archived) == 11 - restore["moved"]
        time.sleep(0.05)
        purge = cancel_after_a_batch("/api/purge", {"older_than": "1ms"})
        assert len(archived_ids(bus)) == len(archived) - purge["moved"] and set(error_ids(bus)) == error
        log = [(a["action"], a["messages"]) for a in started.json("/api/log")["actions"]]
        assert log[:4] == [
            ("purge (cancelled)", purge["moved"]),
            ("restore (cancelled)", restore["moved"]),
            ("archive (done)", 11 - archive["moved"]),
            ("archive (cancelled)", archive["moved"]),
        ]
    finally:
        started.close()


def test_archive_restore_and_purge_need_the_csrf_value_the_operator_and_a_writable_console(bus, project):
    env = {"SQLTRANSPORT_CONSOLE_TOKEN": "operator-token-0123456789", "SQLTRANSPORT_CONSOLE_READ_TOKEN": "reader-token-0123456789"}
    url = bus.engine.url.render_as_string(hide_password=False)
    started = ConsoleProcess(url, env=env, cwd=str(project.root))
    try:
        operator = {"Authorization": "Bearer operator-token-0123456789"}
        reader = {"Authorization": "Bearer reader-token-0123456789"}
        before = error_ids(bus)
        token = started.json("/api/csrf", headers=operator)["csrf"]
        for path, body in (("/api/archive", {"ids": before}), ("/api/restore", {"keys": [1]}), ("/api/purge", {"older_than": "1ms"})):
            assert started.request(path, body)[0] == 401  # no token
            assert started.request(path, body, operator)[0] == 403  # no CSRF value
            assert started.request(path, body, {**reader, "X-CSRF-Token": token})[0] == 403  # the read-only token
        assert error_ids(bus) == before and archived_ids(bus) == []
    finally:
        started.close()
    read_only = ConsoleProcess(url, "--read-only", cwd=str(project.root))
    try:
        for path, body in (("/api/archive", {"ids": before}), ("/api/restore", {"keys": [1]}), ("/api/purge", {"older_than": "1ms"})):
            code, _, text = read_only.request(path, body, csrf(read_only))
            assert code == 403 and "read-only" in text
        assert error_ids(bus) == before and archived_ids(bus) == []
    finally:
        read_only.close()


def test_without_an_action_log_or_an_archive_in_the_topology_actions_are_refused(project, sqlite_url, monkeypatch):
    """The console creates no table: where the deployed topology declares no action log (nor an
    archive), an action is a 409 saying what to declare, and nothing moves."""
    needs(console_missing())
    from .support.runtime import deployed

    transport = deployed(project, sqlite_url, monkeypatch)
    seed(transport)
    started = ConsoleProcess(sqlite_url, cwd=str(project.root))
    try:
        before = error_ids(transport)
        code, _, text = started.request("/api/archive", {"ids": before}, csrf(started))
        assert code == 409 and "action_log" in text
        code, _, text = started.request("/api/retry", {"ids": before, "wait": True}, csrf(started))
        assert code == 409 and "action_log" in text
        assert error_ids(transport) == before
        assert started.json("/api/log")["actions"] == []
        with transport.engine.connect() as conn:
            tables = {row[0].lower() for row in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "consoleactions" not in tables
    finally:
        started.close()
        transport.engine.dispose()


def job_links(console) -> list[int]:
    """The ids of the jobs /log lists under "Jobs of this console", as shown (newest first)."""
    code, _, html = console.request("/log")
    assert code == 200, html
    listed = html.split('<ul id="jobs">', 1)[1].split("</ul>", 1)[0] if '<ul id="jobs">' in html else ""
    return [int(part.split('"', 1)[0]) for part in listed.split('<a href="/jobs/')[1:]]


def test_finished_jobs_beyond_keep_jobs_are_dropped_oldest_ended_first_and_running_ones_kept(bus, project):
    """--keep-jobs 2: an archive slowed to one batch of 2 every 5 s stays running while three purges
    end; the first purge is dropped (its page and its API answer a 404 pointing at the action log),
    the running archive is kept although it is the oldest. Cancelled, the archive is the last to have
    ended: the second purge goes. The action log still has all four."""
    started = ConsoleProcess(
        bus.engine.url.render_as_string(hide_password=False), "--keep-jobs", "2", "--batch-size", "2", cwd=str(project.root)
    )
    try:
        token = csrf(started)
        slow = started.json("/api/archive", {"filter": {}, "rate": 0.2}, token)
        assert slow["state"] == "running"
        purges = [started.json("/api/purge", {"older_than": "1h", "wait": True}, token) for _ in range(3)]
        assert [p["state"] for p in purges] == ["done"] * 3
        assert started.json(f"/api/jobs/{slow['id']}")["state"] == "running"
        assert job_links(started) == [purges[2]["id"], purges[1]["id"], slow["id"]]
        code, _, text = started.request(f"/api/jobs/{purges[0]['id']}")
        assert code == 404, text
        said = json.loads(text)["error"]
        assert f"job {purges[0]['id']} has ended and is no longer kept" in said and "--keep-jobs" in said and "/api/log" in said
        code, _, text = started.request(f"/jobs/{purges[0]['id']}")
        assert code == 404 and "no longer kept" in text and "/log" in text
        assert started.request(f"/api/jobs/{purges[0]['id']}/cancel", {}, token)[0] == 404
        code, _, text = started.request(f"/api/jobs/{purges[2]['id'] + 1}")  # never started: not the dropped message
        assert code == 404 and json.loads(text)["error"] == f"no job {purges[2]['id'] + 1}"
        started.json(f"/api/jobs/{slow['id']}/cancel", {}, token)
        assert finished(started, slow)["state"] == "cancelled"
        deadline = time.monotonic() + 30
        while started.request(f"/api/jobs/{purges[1]['id']}")[0] != 404:  # dropped once the archive's thread has logged it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert job_links(started) == [purges[2]["id"], slow["id"]]
        log = [a["action"] for a in started.json("/api/log")["actions"]]
        assert log[:4] == ["archive (cancelled)", "purge (done)", "purge (done)", "purge (done)"]
    finally:
        started.close()


def test_a_message_history_has_its_failure_and_every_retry_archive_and_restore_of_it(bus, console):
    [message] = console.json("/api/failed/messages?exception_type=ValueError")["messages"]
    shown = console.json(f"/api/failed/messages/{message['key']}")
    raw = shown["headers"]
    assert [e["kind"] for e in shown["history"]] == ["failed"]
    failure = shown["history"][0]
    assert failure["at"] == "2026-11-01T12:20:00+00:00" and "ValueError" in failure["what"]
    assert bus.queue("Billing").address in failure["what"]
    job = console.json("/api/retry", {"ids": [message["id"]], "wait": True}, csrf(console))
    assert job["state"] == "done" and message["id"] not in error_ids(bus)
    with bus.engine.begin() as conn:  # it failed again: back in the error queue under its Id
        bus.queue("error").send(conn, b"again", raw, message_id=message["id"])
    [back] = console.json("/api/failed/messages?exception_type=ValueError")["messages"]
    assert back["id"] == message["id"]
    job = console.json("/api/archive", {"ids": [message["id"]], "wait": True}, csrf(console))
    assert job["state"] == "done"
    [archived] = [m for m in console.json("/api/archive")["messages"] if m["id"] == message["id"]]
    job = console.json("/api/restore", {"keys": [archived["key"]], "wait": True}, csrf(console))
    assert job["state"] == "done"
    [restored] = console.json("/api/failed/messages?exception_type=ValueError")["messages"]
    history = console.json(f"/api/failed/messages/{restored['key']}")["history"]
    assert [e["kind"] for e in history] == ["failed", "retry (done)", "archive (done)", "restore (done)"]
    assert all(e["who"].startswith("operator@127.0.0.1") for e in history[1:])
    assert history[1]["what"] == "1 chosen message(s)"  # the ids the log names are not shown again
    others = console.json("/api/failed/messages?exception_type=KeyError&limit=1")["messages"]
    assert [e["kind"] for e in console.json(f"/api/failed/messages/{others[0]['key']}")["history"]] == ["failed"]


FIRST = '<time datetime="2026-11-01T12:00:00+00:00" title="2026-11-01 12:00:00 UTC">'


def test_times_on_the_lists_and_a_message_page_are_relative_with_the_exact_utc_time_on_hover(bus, console):
    groups = console.request("/failed")[2]
    assert FIRST in groups and " ago</time>" in groups
    assert FIRST in console.request("/failed/messages?exception_type=TimeoutError")[2]
    [message] = console.json("/api/failed/messages?exception_type=TimeoutError&limit=1")["messages"]
    assert FIRST in console.request(f"/failed/messages/{message['key']}")[2]  # its history's failure
    console.json("/api/archive", {"ids": [message["id"]], "wait": True}, csrf(console))
    moment = re.compile(r'<time datetime="\d{4}-\d\d-\d\dT[0-9:.]+\+00:00" title="[0-9 :-]+ UTC">(just now|\d+ seconds? ago)</time>')
    for path in ("/archive", "/log"):  # the server's clock: a moment ago
        assert moment.search(console.request(path)[2]), path


def test_the_lists_give_their_total_and_sort_by_count_and_time_of_failure(bus, console):
    groups = console.json("/api/failed/groups?sort=count_asc")
    assert groups["total"] == 11 and [g["messages"] for g in groups["groups"]] == [1, 3, 7]
    latest = console.json("/api/failed/groups?sort=time")["groups"]
    assert [g["key"]["exception_type"] for g in latest] == ["ValueError", "KeyError", "TimeoutError"]
    page = console.request("/failed?sort=time_asc")[2]
    assert '<span id="total-count">11</span>' in page and page.index("TimeoutError") < page.index("KeyError") < page.index("ValueError")
    newest = console.json("/api/failed/messages?sort=time&limit=4")
    assert newest["total"] == 11 and [m["exception_type"] for m in newest["messages"]][:2] == ["ValueError", "KeyError"]
    rest = console.json(f"/api/failed/messages?sort=time&limit=10&after={newest['next_after']}")["messages"]
    assert len(rest) == 7 and all(m["exception_type"] == "TimeoutError" for m in rest)
    group = console.request("/failed/messages?exception_type=KeyError&sort=time")[2]
    assert '<span id="total-count">3</span>' in group and "sort=time&amp;after=" not in group  # one page: no next
    code, _, text = console.request("/api/failed/groups?sort=Messages%20DESC")
    assert code == 400 and "no order of this list" in text


def test_a_message_page_links_back_to_its_groups(bus, console):
    for exception, count in (("ValueError", 1), ("KeyError", 3)):
        [message] = console.json(f"/api/failed/messages?exception_type={exception}&limit=1")["messages"]
        page = console.request(f"/failed/messages/{message['key']}")[2]
        links = dict(re.findall(r'id="(group-link|failed-queue-link|message-type-link)" href="([^"]+)"', page))
        assert set(links) == {"group-link", "failed-queue-link", "message-type-link"}
        group = links["group-link"].replace("&amp;", "&")
        assert re.fullmatch(r"/failed/messages\?by=exception&group=[0-9a-f]{16}", group)
        shown = console.json("/api" + group)
        assert shown["total"] == count and message["key"] in {m["key"] for m in shown["messages"]}
        assert {m["exception_type"] for m in shown["messages"]} == {exception}
        queue = console.json("/api" + links["failed-queue-link"].replace("&amp;", "&"))
        assert queue["total"] == 4 and message["key"] in {m["key"] for m in queue["messages"]}  # Billing's


def test_archive_retention_purges_the_archived_messages_older_than_it_and_logs_each_purge(bus, project):
    console = ConsoleProcess(bus.engine.url.render_as_string(hide_password=False), "--archive-retention", "2s", cwd=str(project.root))
    try:
        [message] = console.json("/api/failed/messages?exception_type=ValueError")["messages"]
        assert console.json("/api/archive", {"ids": [message["id"]], "wait": True}, csrf(console))["state"] == "done"
        assert [m["id"] for m in console.json("/api/archive")["messages"]] == [message["id"]]
        deadline = time.monotonic() + 30
        while console.json("/api/archive")["messages"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert console.json("/api/archive")["messages"] == []
        [purge] = [e for e in console.json("/api/log")["actions"] if e["action"] == "purge (retention)"]
        assert purge["messages"] == 1 and purge["who"] == "retention@console" and "--archive-retention" in purge["target"]
        assert len(error_ids(bus)) == 10  # the error queue untouched
    finally:
        console.close()


def test_edit_and_retry_sends_the_edited_copy_keeps_the_original_in_the_archive_and_logs_the_edit(bus, console):
    [message] = console.json("/api/failed/messages?exception_type=TimeoutError&limit=1")["messages"]
    original = console.json(f"/api/failed/messages/{message['key']}")
    headers = dict(original["headers"], Edited="yes")
    done = console.json("/api/edit", {"key": message["key"], "headers": headers, "body": '{"order": 2}'}, csrf(console))
    assert done["original"] == message["id"] and done["changed"] == ["Edited"] and done["body_changed"]
    assert message["id"] not in error_ids(bus) and len(error_ids(bus)) == 10
    assert [m["id"] for m in console.json("/api/archive")["messages"]] == [message["id"]]  # the original kept
    with bus.engine.connect() as conn:
        sales = bus.dialect.qualified(bus.name("Sales"), bus.profile)
        [(row_id, raw, body)] = conn.exec_driver_sql(f"SELECT Id, Headers, Body FROM {sales}").fetchall()
    sent = wire.decode_headers(raw)
    assert str(row_id) == done["sent"] and bytes(body) == b'{"order": 2}' and sent["Edited"] == "yes"
    assert sent["ServiceControl.EditOf"] == message["id"] and wire.EXCEPTION_TYPE not in sent
    [edit] = [e for e in console.json("/api/log")["actions"] if e["action"] == "edit and retry"]
    assert edit["who"].startswith("operator@127.0.0.1") and "headers Edited; body changed" in edit["target"]
    code, _, text = console.request("/api/edit", {"key": message["key"], "headers": ["x"], "body": ""}, csrf(console))
    assert code == 400 and "headers: give a JSON object" in text
