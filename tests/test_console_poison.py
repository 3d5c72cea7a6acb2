"""No single message breaks a listing: failed messages whose headers hold a NUL or a lone surrogate
(as JSON escapes, where the pages group them), are no JSON, repeat a key or hold a 1 MB value, and
bodies nested 100,000 deep, 3 MB, binary or invalid UTF-8, beside ordinary ones, on SQLite and
PostgreSQL: every page and API answer 200 and shows each poison escaped, marked or cut with a notice;
a group is named by a hash, never by its text in a URL."""

from __future__ import annotations

import json
import re

import pytest

from sqltransport_schema.console import failed

from .support.console import BIG, ConsoleProcess, console_bus, console_missing, needs, poison, seed

pytestmark = pytest.mark.console


@pytest.fixture
def transport(project, db_url, monkeypatch):
    yield from console_bus(project, db_url, monkeypatch)


def test_the_reads_of_the_error_queue_take_every_poison_row(transport):
    """console/failed.py alone: groups by each grouping, pages, each message, each group's messages."""
    seed(transport)
    poison(transport)
    rows = failed.page(transport, limit=100).rows
    assert len(rows) == 11 + 12
    for by in failed.GROUPINGS:
        found = failed.groups(transport, by)
        assert sum(g.messages for g in found) == 23
        for g in found:
            assert len(g.id) == 16 and re.fullmatch("[0-9a-f]+", g.id)
            chosen = failed.Filter.of({"group": g.id, "by": by})
            assert len(failed.keys_of(transport, chosen)) == g.messages, (by, g.key)
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
