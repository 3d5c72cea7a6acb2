"""One way to reach a database (db.make_engine's read_timeout): status, check and status --fleet
bound every connection, statement and lock wait by --read-timeout (default 10 s), and a database
that gives no answer within it is reported as such, with the time waited, on real PostgreSQL
(docs/operations.md). A held lock is what makes a read wait."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from sqltransport_schema import cli
from sqltransport_schema.db import make_engine

pytestmark = pytest.mark.postgresql
TOPOLOGY = 'transport_version: "9.1"\nengines: [postgresql]\nendpoints:\n  - name: Sales\n    outbox: true\n'


@contextmanager
def held(url: str, table: str = "alembic_version"):
    """Another session holding an ACCESS EXCLUSIVE lock on the table (an ALTER of it in flight, as it were)."""
    engine = make_engine(url)
    connection = engine.connect()
    transaction = connection.begin()
    connection.execute(sa.text(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE'))
    try:
        yield
    finally:
        transaction.rollback()
        connection.close()
        engine.dispose()


def timed(argv: list[str]) -> tuple[int, float]:
    started = time.monotonic()
    code = cli.main(argv)
    return code, time.monotonic() - started


def test_status_and_check_answer_within_twice_the_read_timeout(project, pg_url, capsys):
    url = project.deploy(pg_url, TOPOLOGY)
    ini = str(project.ini)
    capsys.readouterr()
    with held(url):
        status = timed(["status", "--url", url, "-c", ini, "--read-timeout", "1s"])
        status_err = capsys.readouterr().err
        check = timed(["check", "--url", url, "-c", ini, "--read-timeout", "1s"])
        check_err = capsys.readouterr().err
    assert status[0] == 2 and status[1] < 2 * 1, (status, status_err)
    assert status_err.startswith("error: no answer within 1.") and "(read timeout 1 s; --read-timeout): " in status_err, status_err
    assert len(status_err.splitlines()) == 1
    assert check[0] == 2 and check[1] < 2 * 1, (check, check_err)
    assert check_err.startswith("error: no answer within 1.") and "canceling statement due to" in check_err, check_err
    assert cli.main(["status", "--url", url, "-c", ini, "--read-timeout", "1s"]) == 0  # the lock gone: read as ever
    assert cli.main(["status", "--url", url, "-c", ini, "--read-timeout", "soon"]) == 2
    assert capsys.readouterr().err.endswith("error: --read-timeout soon: give a duration with its unit, e.g. 500ms, 5s or 1m, above 0\n")


def test_status_fleet_reports_the_target_that_does_not_answer_and_reads_the_others(project, pg_url, pg_url2, capsys):
    first = project.deploy(pg_url, TOPOLOGY)
    project.upgrade(pg_url2)
    (project.root / "fleet.yaml").write_text(
        f"targets:\n  - name: stuck\n    url: {first}\n  - name: fine\n    url: {pg_url2}\nread_timeout: 1s\n", encoding="utf-8"
    )
    capsys.readouterr()
    with held(first, "Sales_OutboxData"):
        code, took = timed(["status", "--fleet", "-c", str(project.ini)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1 and took < 2 * 1 + 1, (code, took, out)  # twice the bound, and the fleet file's loading
    stuck = next(line for line in out if line.startswith("stuck"))
    assert "failed: " in stuck and "no answer within 1." in stuck and "(read timeout 1 s; --read-timeout or read_timeout:)" in stuck
    assert any(line.startswith("fine (shared): ") and "failed" not in line for line in out), out


def test_a_status_serve_scrape_answers_within_twice_the_read_timeout(project, pg_url):
    """The exporter started, then a table's lock held: a scrape says the read failed (up 0) within twice
    --read-timeout, and the next scrape after the lock is gone reads it again."""
    from .support.prometheus import Exporter

    url = project.deploy(pg_url, TOPOLOGY)
    exporter = Exporter(url, "--min-interval", "0", "--read-timeout", "1s", "-c", str(project.ini))
    try:
        assert exporter.metrics()["sqltransport_up"] == [({}, 1.0)]
        with held(url, "Sales"):
            started = time.monotonic()
            samples = exporter.metrics()
            took = time.monotonic() - started
        assert took < 2 * 1, took
        assert samples["sqltransport_up"] == [({}, 0.0)]
        assert exporter.metrics()["sqltransport_up"] == [({}, 1.0)]
    finally:
        exporter.close()


def asgi_get(app, path: str) -> tuple[int, str]:
    """(status, body text) of a GET of the console's application in this process (no server, no socket)."""
    import asyncio

    sent: list[dict] = []
    asked = [False]

    async def receive() -> dict:
        if asked[0]:  # the request was read whole: nothing more comes until the response is sent
            await asyncio.Event().wait()
        asked[0] = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()


@pytest.mark.console
def test_a_console_page_whose_read_runs_out_says_so_and_the_others_are_served(project, pg_url, capsys):
    """A lock held on the error queue: its pages answer 503 within twice --read-timeout, saying the seconds
    waited (no 500, no traceback, no hang); the overview, which reads no row of it, is served, and the
    error queue's pages again once the lock is gone."""
    from sqltransport_schema.runtime.transport import Transport

    from .support.console import CONSOLE_TOPOLOGY, console_missing, needs

    needs(console_missing())
    from sqltransport_schema.console.app import Console, make_app
    from sqltransport_schema.console.security import Access

    url = project.deploy(pg_url, CONSOLE_TOPOLOGY)
    transport = Transport.from_database(make_engine(url, must_exist=True, read_timeout=1), str(project.ini))
    try:
        app = make_app(Console(transport, Access.from_environment("127.0.0.1", True, environ={}), None, "error"))
        assert asgi_get(app, "/failed")[0] == 200
        capsys.readouterr()
        with held(url, "error"):
            for path in ("/failed", "/api/failed/groups", "/failed/messages"):
                started = time.monotonic()
                code, body = asgi_get(app, path)
                took = time.monotonic() - started
                assert code == 503 and took < 2 * 1, (path, code, took, body)
                assert "no answer within 1." in body and "(read timeout 1 s; --read-timeout): " in body, body
                assert "Traceback" not in body
            assert asgi_get(app, "/log")[0] == 200  # a page that reads no row of it
        err = capsys.readouterr().err
        assert "console: GET /failed: no answer within 1." in err and "Traceback" not in err, err
        assert asgi_get(app, "/failed")[0] == 200
    finally:
        transport.engine.dispose()
    # console --read-timeout, as status's: a wrong duration is one error line (exit 2); a database whose
    # deployed blueprint cannot be read within it is reported before anything is served
    ini = str(project.ini)
    assert cli.main(["console", "--url", url, "-c", ini, "--read-timeout", "soon"]) == 2
    assert capsys.readouterr().err.endswith("error: --read-timeout soon: give a duration with its unit, e.g. 500ms, 5s or 1m, above 0\n")
    with held(url, "alembic_version"):
        code, took = timed(["console", "--url", url, "-c", ini, "--read-timeout", "1s", "--bind", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert code == 2 and took < 2 * 1 + 1, (code, took, err)
    assert err.startswith("error: no answer within 1.") and len(err.splitlines()) == 1, err


def test_the_commands_that_change_the_error_queue_or_the_outbox_answer_within_the_read_timeout(project, pg_url, capsys):
    """retry, archive, restore, purge and outbox cleanup (one database, and --fleet) take --read-timeout
    as status does: a held lock on the table they change is one error line within twice the bound, and
    the same command reads and changes as ever once the lock is gone."""
    from .support.console import CONSOLE_TOPOLOGY

    url = project.deploy(pg_url, CONSOLE_TOPOLOGY.replace("  - name: Sales\n", "  - name: Sales\n    outbox: true\n", 1))
    ini = str(project.ini)
    (project.root / "fleet.yaml").write_text(f"targets:\n  - name: stuck\n    url: {url}\n", encoding="utf-8")
    commands = {
        "error": (["retry", "--all"], ["archive", "--all"]),
        "error_archive": (["restore", "--all"], ["purge", "--older-than", "1d", "--yes"]),
        "Sales_OutboxData": (["outbox", "cleanup", "--older-than", "1d"],),
    }
    capsys.readouterr()
    for table, argvs in commands.items():
        with held(url, table):
            for argv in argvs:
                code, took = timed([*argv, "--url", url, "-c", ini, "--read-timeout", "1s"])
                err = capsys.readouterr().err
                assert code == 2 and took < 2 * 1, (argv, code, took, err)
                assert err.startswith("error: no answer within 1.") and len(err.splitlines()) == 1, (argv, err)
            if table == "Sales_OutboxData":
                code, took = timed(["outbox", "cleanup", "--older-than", "1d", "--fleet", "-c", ini, "--read-timeout", "1s"])
                out = capsys.readouterr().out
                assert code == 1 and took < 2 * 1 + 1, (code, took, out)
                assert "no answer within 1." in out and "stuck" in out, out
    for argv in (["retry", "--all"], ["archive", "--all"], ["outbox", "cleanup", "--older-than", "1d"]):
        assert cli.main([*argv, "--url", url, "-c", ini, "--read-timeout", "1s"]) == 0, capsys.readouterr()
