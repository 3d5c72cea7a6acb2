"""The console's reads of the error queue (errorqueue/reading.py, the engines' header reads) on SQLite and
PostgreSQL, without the web stack: a header's value read the same whether the headers are compact
JSON, hold escapes or spaces, lack the header, or are no JSON at all."""

from __future__ import annotations

import json

import pytest

from sqltransport_schema import errors, wire
from sqltransport_schema.errorqueue import reading as failed

TRICKY = [
    # (headers text, the exception message the groups show)
    ('{"NServiceBus.ExceptionInfo.Message":"plain","NServiceBus.FailedQ":"Sales"}', "plain"),
    ('{"NServiceBus.ExceptionInfo.Message":"say \\"hi\\" \\/ \\u00e9","NServiceBus.FailedQ":"Sales"}', 'say "hi" / \u00e9'),
    ('{"NServiceBus.ExceptionInfo.Message" : "spaced", "NServiceBus.FailedQ": "Sales"}', "spaced"),
    ('{"x":"a \\"NServiceBus.ExceptionInfo.Message\\":\\"fake\\"","NServiceBus.ExceptionInfo.Message":"real"}', "real"),
    ('{"NServiceBus.FailedQ":"Sales"}', ""),
    ('{"NServiceBus.ExceptionInfo.Message":"","NServiceBus.FailedQ":"Sales"}', ""),  # an empty value: the cut is '' too
    ("not json at all", ""),
]


def test_header_values_as_json_reads_them(transport):
    queue = transport.queue("error")
    with transport.engine.begin() as conn:
        queue.send_many(conn, [(b"x", text) for text, _ in TRICKY])
    for text, _ in TRICKY[:4]:  # the texts that are JSON say the same as a JSON reader
        assert json.loads(text)["NServiceBus.ExceptionInfo.Message"] in {m for _, m in TRICKY}
    rows = failed.page(transport).rows
    assert [r["exception_message"] for r in rows] == [m for _, m in TRICKY]
    counts = {g.key["exception_message"]: g.messages for g in failed.groups(transport, "exception")}
    assert counts == {"plain": 1, 'say "hi" / \u00e9': 1, "spaced": 1, "real": 1, "": 3}
    assert failed.page(transport, failed.Selection(group=(("exception_message", "spaced"),))).rows[0]["failed_queue"] == "Sales"


def test_keyset_pages_and_the_time_filter(transport):
    queue = transport.queue("error")
    times = ["2026-11-01 12:00:00:000000 Z", "2026-11-01 13:00:00:000000 Z", "2026-11-01 14:00:00:000000 Z"]
    with transport.engine.begin() as conn:
        queue.send_many(conn, [(b"x", wire.encode_headers({wire.TIME_OF_FAILURE: t, wire.FAILED_Q: "Sales"})) for t in times])
    first = failed.page(transport, limit=2)
    assert len(first.rows) == 2 and first.next_after == first.rows[-1]["key"]
    second = failed.page(transport, after=first.next_after, limit=2)
    assert [r["time_of_failure"] for r in second.rows] == times[2:] and second.next_after is None
    window = failed.Selection.of({"since": "2026-11-01T12:30:00", "until": "2026-11-01T14:00:00"})
    assert [r["time_of_failure"] for r in failed.page(transport, window).rows] == [times[1]]
    [group] = failed.groups(transport, "failed_queue")
    assert (group.messages, group.first, group.last) == (3, times[0], times[2])


def test_body_text_kinds():
    assert failed.body_text(b'{"a":[1,2]}') == ("json", '{\n  "a": [\n    1,\n    2\n  ]\n}')
    kind, text = failed.body_text(b"<a><b>1</b></a>")
    assert kind == "xml" and "<b>1</b>" in text and text.count("\n") >= 3
    assert failed.body_text(b"plain words") == ("text", "plain words")
    assert failed.body_text(b"\xff\x00")[0] == "binary"
    assert failed.body_text(b"") == ("empty", "")


def test_a_bind_beyond_loopback_needs_the_token_and_bad_binds_are_one_error_line(transport, monkeypatch, capsys):
    """Refused before the database is opened or the web stack imported: exit 2, one `error:` line."""
    from sqltransport_schema import cli

    url = transport.engine.url.render_as_string(hide_password=False)
    monkeypatch.delenv("SQLTRANSPORT_CONSOLE_TOKEN", raising=False)
    for bind, words in (
        ("0.0.0.0:0", "needs a token: set SQLTRANSPORT_CONSOLE_TOKEN"),
        ("[::]:0", "needs a token"),
        ("localhost", "--bind localhost: give HOST:PORT"),
    ):
        assert cli.main(["console", "--url", url, "--bind", bind]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.setenv("SQLTRANSPORT_CONSOLE_TOKEN", "short")
    assert cli.main(["console", "--url", url, "--bind", "0.0.0.0:0"]) == 2
    assert "at least 16 characters" in capsys.readouterr().err
    for keep in ("0", "-1"):
        assert cli.main(["console", "--url", url, "--keep-jobs", keep]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --keep-jobs {keep}: give 1 or more") and err.count("\n") == 1


BODY_TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
  - name: Billing
  - name: error
    body_string: true
queues:
  - name: audit
"""


def test_text_in_the_body_where_the_error_queue_has_body_string(project, db_url, monkeypatch):
    """The body filter reads BodyString (PostgreSQL's encode(Body, 'escape'), SQLite's CAST(Body AS
    TEXT)) with LIKE, its %, _ and ! characters, not wildcards; beside the headers' text filter."""
    from .support.console import HOSTILE, seed

    project.deploy(db_url, BODY_TOPOLOGY)
    monkeypatch.chdir(project.root)
    from sqltransport_schema.db import make_engine
    from sqltransport_schema.runtime.transport import Transport

    transport = Transport.from_database(make_engine(db_url), str(project.ini))
    try:
        seed(transport)
        assert failed.has_body_string(transport)
        by_body = {g.key["exception_type"]: g.messages for g in failed.groups(transport, "exception", failed.Selection(body='"order"'))}
        assert by_body == {"TimeoutError": 7}
        [hostile] = failed.page(transport, failed.Selection(body="onerror=")).rows
        assert hostile["exception_type"] == "ValueError"
        assert failed.page(transport, failed.Selection(body="order_")).rows == []  # _ is a character
        assert failed.page(transport, failed.Selection(body="%")).rows == []  # and so is %
        both = failed.Selection(body="order", text="Sales")
        assert len(failed.page(transport, both).rows) == 7
        assert failed.groups(transport, "failed_queue", failed.Selection(body="order", text=HOSTILE)) == []
        assert failed.Selection.of({"body": "x y"}).query() == {"body": "x y"}
    finally:
        transport.engine.dispose()


def test_the_body_filter_is_refused_without_body_string(transport):
    assert not failed.has_body_string(transport)
    with pytest.raises(errors.UsageError, match="no BodyString column"):
        failed.groups(transport, "exception", failed.Selection(body="order"))


def test_times_shown_relative_with_the_exact_time_on_hover():
    from datetime import datetime, timedelta, timezone

    from sqltransport_schema.console.display import ago, as_time, when

    now = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
    assert [ago(now - timedelta(seconds=s), now) for s in (2, 40, 60, 180, 7200, 86400 * 3, 86400 * 65, 86400 * 800)] == [
        "just now",
        "40 seconds ago",
        "1 minute ago",
        "3 minutes ago",
        "2 hours ago",
        "3 days ago",
        "2 months ago",
        "2 years ago",
    ]
    assert ago(now + timedelta(minutes=5), now) == "in 5 minutes"
    assert as_time("2026-11-01 12:00:00:000000 Z") == now == as_time("2026-11-01 12:00:00") == as_time("2026-11-01T13:00:00+01:00")
    assert as_time("not a time") is None and as_time(None) is None
    shown = str(when("2026-11-01 12:00:00:000000 Z"))
    assert shown.startswith('<time datetime="2026-11-01T12:00:00+00:00" title="2026-11-01 12:00:00 UTC">')
    assert str(when("<b>no time</b>")) == "&lt;b&gt;no time&lt;/b&gt;"


def test_totals_and_sorting_of_the_groups_and_of_a_page(transport):
    queue = transport.queue("error")

    def failure(exc: str, minute: int) -> str:
        t = f"2026-11-01 12:{minute:02d}:00:000000 Z"
        return wire.encode_headers({wire.TIME_OF_FAILURE: t, wire.FAILED_Q: "Sales", wire.EXCEPTION_TYPE: exc})

    # A: 3 messages at 12:10-12:12; B: 1 at 12:30 (the latest); C: 2 at 12:00 and 12:01 (the earliest)
    rows = [failure("A", 10 + i) for i in range(3)] + [failure("C", 0), failure("B", 30), failure("C", 1)]
    with transport.engine.begin() as conn:
        queue.send_many(conn, [(b"x", h) for h in rows])
    order = {sort: [g.key["exception_type"] for g in failed.groups(transport, "exception", sort=sort)] for sort in failed.GROUP_SORTS}
    assert order == {"count": ["A", "C", "B"], "count_asc": ["B", "C", "A"], "time": ["B", "A", "C"], "time_asc": ["C", "A", "B"]}
    assert failed.count(transport) == 6
    assert failed.count(transport, failed.Selection(group=(("exception_type", "C"),))) == 2
    assert failed.count(transport, failed.Selection.of({"since": "2026-11-01T12:10:00", "text": "Sales"})) == 4
    first = failed.page(transport, limit=4, sort="time")
    assert len(first.rows) == 4 and [r["key"] for r in first.rows] == sorted((r["key"] for r in first.rows), reverse=True)
    rest = failed.page(transport, after=first.next_after, limit=4, sort="time")
    assert rest.next_after is None and len(rest.rows) == 2 and max(r["key"] for r in rest.rows) < first.next_after
    assert [r["exception_type"] for r in first.rows + rest.rows] == ["C", "B", "C", "A", "A", "A"]
    with pytest.raises(errors.UsageError, match="sort: 'Id; DROP' is no order of this list"):
        failed.groups(transport, "exception", sort="Id; DROP")
    with pytest.raises(errors.UsageError, match="choose one of time_asc, time"):
        failed.page(transport, sort="count")
    assert failed.count(transport, cap=4) == 4 and failed.count(transport, failed.Selection.of({"text": "Sales"}), cap=5) == 5


@pytest.mark.console  # the console command needs its extra (uvicorn)
def test_archive_retention_that_is_no_age_or_without_an_archive_is_one_error_line(transport, capsys):
    from sqltransport_schema import cli

    url = transport.engine.url.render_as_string(hide_password=False)
    with pytest.raises(SystemExit) as exited:  # argparse's own refusal: one error line, exit 2
        cli.main(["console", "--url", url, "--archive-retention", "soon"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "'soon' is not an age" in err and "Traceback" not in err
    assert cli.main(["console", "--url", url, "--bind", "127.0.0.1:0", "--archive-retention", "30d"]) == 2  # no archive here
    err = capsys.readouterr().err
    assert err.startswith("error: --archive-retention: the deployed topology declares no archive") and err.count("\n") == 1
