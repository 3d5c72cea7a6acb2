"""No single message breaks a listing: failed messages whose headers hold a NUL or a lone surrogate
(as JSON escapes, where the pages group them), are no JSON, repeat a key or hold a 1 MB value, and
bodies nested 100,000 deep, 3 MB, binary or invalid UTF-8, beside ordinary ones, on SQLite and
PostgreSQL: every page and API answer 200 and shows each poison escaped, marked or cut with a notice;
a group is named by a hash, never by its text in a URL."""

from __future__ import annotations

import json
import re

import pytest

from sqltransport_schema.errorqueue import reading as failed

from .support.console import BIG, ConsoleProcess, console_bus, console_missing, needs, poison, seed


@pytest.fixture
def transport(project, db_url, monkeypatch):
    yield from console_bus(project, db_url, monkeypatch)


def test_the_reads_of_the_error_queue_take_every_poison_row(transport):
    """errorqueue/reading.py alone: groups by each grouping, pages, each message, each group's messages."""
    seed(transport)
    poison(transport)
    rows = failed.page(transport, limit=100).rows
    assert len(rows) == 11 + 12
    for by in failed.GROUPINGS:
        found = failed.groups(transport, by)
        assert sum(g.messages for g in found) == 23
        for g in found:
            assert len(g.id) == 16 and re.fullmatch("[0-9a-f]+", g.id)
            chosen = failed.Selection.of({"group": g.id, "by": by})
            assert len(failed.ids_of(transport, chosen)) == g.messages, (by, g.key)
    messages = {g.key["exception_message"] for g in failed.groups(transport, "exception")}
    assert {"before\x00after", "lone \ud800 surrogate", "M" * BIG} <= messages
    assert {"Nul\x00Error", "Second"} <= {g.key["exception_type"] for g in failed.groups(transport, "exception")}
    assert transport.queue("Sales").address + "\x00x" in {g.key["failed_queue"] for g in failed.groups(transport, "failed_queue")}
    assert "Shop.\x00Evil" in {g.key["message_type"] for g in failed.groups(transport, "message_type")}
    shown = {}
    for row in rows:
        m = failed.message(transport, row["key"])
        shown[m.exception["message"] or m.headers_problem] = m
    assert shown["deep_json"].body_kind == "text" and "nested too deeply" in shown["deep_json"].body_note
    assert shown["deep_xml"].body_kind == "text" and "nested too deeply" in shown["deep_xml"].body_note
    assert shown["huge"].body_note.startswith("cut: the first 1,048,576 of") and len(shown["huge"].body) == 1 << 20
    assert shown["invalid_utf8"].body_kind == "binary" and "not UTF-8" in shown["invalid_utf8"].body_note
    assert shown["lone \ud800 surrogate"].headers["NServiceBus.ExceptionInfo.Message"] == "lone \ud800 surrogate"
    duplicate = next(m for m in shown.values() if m.headers_problem and "duplicate" in m.headers_problem)
    assert duplicate.exception["type"] == "Second"  # the first value, as the groups read it
    assert next(m for m in shown.values() if m.headers_problem and "invalid JSON" in m.headers_problem).headers is None


@pytest.mark.console
def test_every_page_and_api_answer_shows_the_poison_marked(transport, project):
    """Over HTTP, a console on the error queue with the poison rows: every page and API answer 200;
    a NUL and a lone surrogate shown as their escapes (marked on the pages), the 1 MB value cut with a
    notice, the deep bodies shown as text with a note; a group's link is its id, a retry of a group
    by its id takes its messages alone."""
    needs(console_missing())
    seed(transport)
    poison(transport)
    console = ConsoleProcess(transport.engine.url.render_as_string(hide_password=False), cwd=str(project.root))
    try:
        for path in ("/api/overview", "/api/failed/messages?limit=100", *(f"/api/failed/groups?by={by}" for by in failed.GROUPINGS)):
            code, headers, text = console.request(path)
            assert code == 200, (path, text[:500])
            assert text.isascii() and json.loads(text)
        groups = console.json("/api/failed/groups?by=exception")["groups"]
        by_message = {g["key"]["exception_message"]: g for g in groups}
        assert "before\x00after" in by_message and "lone \ud800 surrogate" in by_message
        big = by_message["M" * 2000]
        assert big["key_cut"] == {"exception_message": BIG}
        code, _, html = console.request("/failed")
        assert code == 200 and '<mark class="escaped"' in html and "\\u0000" in html and "\\ud800" in html
        assert "cut: " in html and "M" * 2001 not in html and "\x00" not in html
        links = re.findall(r'href="(/failed/messages\?[^"]*)"', html)
        assert len(links) == len(groups) and all(len(link) < 200 and "group=" in link for link in links)
        for by in failed.GROUPINGS:
            code, _, html = console.request(f"/failed?by={by}")
            assert code == 200 and "\x00" not in html
            for link in re.findall(r'href="(/failed/messages\?[^"]*)"', html):
                code, _, page = console.request(link.replace("&amp;", "&"))
                assert code == 200 and "No message on this page" not in page, link
        code, _, html = console.request("/failed/messages?limit=100")
        assert code == 200 and html.count('<mark class="escaped"') >= 5
        keys = [m["key"] for m in console.json("/api/failed/messages?limit=100")["messages"]]
        assert len(keys) == 23
        notes = []
        for key in keys:
            code, _, html = console.request(f"/failed/messages/{key}")
            assert code == 200 and "\x00" not in html, (key, html[:300])
            message = console.json(f"/api/failed/messages/{key}")
            notes.append(message["body_note"] or message["headers_problem"] or "")
        assert sum("nested too deeply" in n for n in notes) == 2 and sum(n.startswith("cut: ") for n in notes) == 1
        assert any("not UTF-8" in n for n in notes) and any("duplicate header" in n for n in notes)
        token = {"X-CSRF-Token": console.json("/api/csrf")["csrf"]}
        nul = by_message["before\x00after"]
        job = console.json("/api/retry", {"filter": {"group": nul["id"], "by": "exception"}, "wait": True}, token)
        assert job["state"] == "done" and job["report"]["moved"] == 1, job
        job = console.json("/api/archive", {"filter": {"group": big["id"], "by": "exception"}, "wait": True}, token)
        assert job["state"] == "done" and job["moved"] == 1 and len(job["what"]) < 200, job
        left = {g["key"]["exception_message"] for g in console.json("/api/failed/groups?by=exception")["groups"]}
        assert "before\x00after" not in left and "M" * 2000 not in left and "lone \ud800 surrogate" in left
        assert console.json(f"/api/failed/messages?by=exception&group={nul['id']}")["messages"] == []  # its one message retried
        code, _, text = console.request("/api/failed/messages?by=exception&group=0123456789abcdef")
        assert code == 404 and "no group" in text
        for path in ("/api/failed/messages?text=a%00b", "/api/failed/groups?exception_message=%00", "/failed?text=%00"):
            code, _, text = console.request(path)
            assert code == 400 and "NUL" in text, (path, text)
        code, _, text = console.request("/api/archive", {"filter": {}, "why": "a\x00b"}, token)
        assert code == 400 and "NUL" in text
        code, _, text = console.request("/api/failed/messages?group=" + "x" * 5000)
        assert code == 400 and "is no group's id" in text and len(text) < 300
    finally:
        console.close()
