"""The console under test: a deployed bus whose error queue holds failures of three kinds (one with
hostile headers and body), and `sqltransport-schema console` in a subprocess on a free port.
Without the console extra the tests are skipped locally and fail under CI, as a missing database
server's are (as support/prometheus.py does for Prometheus)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest

from sqltransport_schema import wire

from .messages import headers
from .projects import REPO
from .runtime import TOPOLOGY, deployed
from .spark import demanded
from .warm import program

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
CHROMIUM = "/usr/bin/chromium"
BASE_TIME = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
# The runtime's topology with the error queue's archive and the console's action log, as docs/console.md declares them.
CONSOLE_TOPOLOGY = (
    TOPOLOGY.replace("  - name: error\n", "  - name: error\n    archive: error_archive\n") + "action_log:\n  table: ConsoleActions\n"
)


def console_bus(project, url: str, monkeypatch):
    """CONSOLE_TOPOLOGY deployed on `url`: the transport, disposed of afterwards (a fixture's body)."""
    transport = deployed(project, url, monkeypatch, CONSOLE_TOPOLOGY)
    yield transport
    transport.engine.dispose()


def console_missing() -> str | None:
    """Why the console tests cannot run here, or None. README's test command runs without the extra
    (they are then skipped at collection, as the spark tests are); `.ci/run` installs it, with
    Playwright and Debian's chromium, and sets SQLTRANSPORT_TEST_EXTRAS=console: then they must run."""
    try:
        import python_multipart  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return "the console extra is not installed (pip install -e '.[console]')"
    return None


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (no Playwright, or no /usr/bin/chromium), or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; .ci/run installs it)"
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install chromium; no browser is downloaded)"
    return None


def needs(problem: str | None) -> None:
    """Skip for `problem`, or fail where the run insists on the console (SQLTRANSPORT_TEST_EXTRAS=console)."""
    if problem is not None:
        if demanded("console"):
            pytest.fail(f"{problem}: required (SQLTRANSPORT_TEST_EXTRAS=console)")
        pytest.skip(problem)


def fail(transport, queue: str, n: int, exc: Exception, start: int = 0, body: bytes = b'{"order": 1}', **extra) -> None:
    """n messages that failed in `queue` with `exc`, the i-th at BASE_TIME + (start + i) minutes."""
    address = transport.queue(queue).address
    messages = []
    for i in range(n):
        h = wire.error_headers(headers(start + i, **extra), exc, address, now=BASE_TIME + timedelta(minutes=start + i))
        messages.append((body, wire.encode_headers(h)))
    with transport.engine.begin() as conn:
        transport.queue("error").send_many(conn, messages)


def seed(transport) -> dict[str, int]:
    """The error queue of the tests: 7 Sales timeouts, 3 Billing key errors, 1 hostile message."""
    fail(transport, "Sales", 7, TimeoutError("database timeout"))
    fail(transport, "Billing", 3, KeyError("customer"), start=10, body=b"\x00\x01\xffbinary")
    fail(transport, "Billing", 1, ValueError(HOSTILE), start=20, body=HOSTILE.encode(), hostile=HOSTILE, **{HOSTILE: "name"})
    return {"TimeoutError": 7, "KeyError": 3, "ValueError": 1}


class ConsoleProcess:
    """`sqltransport-schema console --url URL --bind 127.0.0.1:0 ...` in a subprocess; the port it
    chose is read from its first line."""

    def __init__(self, url: str, *args: str, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        command = [program("sqltransport-schema"), "console", "--url", url, "--bind", "127.0.0.1:0", *args]
        environ = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, cwd=cwd)
        first = self.process.stderr.readline()
        assert "serving http://127.0.0.1:" in first, first + self.process.stderr.read()
        self.first_line = first
        self.base = "http://127.0.0.1:" + first.split("http://127.0.0.1:", 1)[1].split("/", 1)[0]

    def request(self, path: str, data: object = None, headers: dict[str, str] | None = None, method: str | None = None):
        """(status, headers, body text) of one request; data is sent as JSON."""
        body = None if data is None else json.dumps(data).encode()
        h = {**({"Content-Type": "application/json"} if body is not None else {}), **(headers or {})}
        req = urllib.request.Request(self.base + path, data=body, headers=h, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read().decode()

    def json(self, path: str, data: object = None, headers: dict[str, str] | None = None) -> dict:
        code, _, text = self.request(path, data, headers)
        assert code in (200, 202), (code, text)
        return json.loads(text)

    def close(self) -> str:
        """Stop it (SIGTERM); what it wrote to stderr after its first line (printed: pytest shows it on a failure)."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate(timeout=30)
        print(err)
        return err


POISON_MARK = "@POISON@"  # replaced in the encoded headers by the raw JSON text of a poison value
BIG = 1 << 20  # a 1 MB header value


def _poison_headers(transport, i: int, field: str, raw: str, exc_type: str = "PoisonError") -> str:
    """Headers of a failure in Sales whose `field` header is `raw` written into the JSON text as is
    (a `\\u0000` or `\\ud800` escape as .NET's serializer writes it)."""
    at = BASE_TIME + timedelta(hours=1, minutes=i)
    h = wire.error_headers(headers(100 + i), ValueError("poisoned"), transport.queue("Sales").address, now=at)
    h[wire.EXCEPTION_TYPE] = exc_type
    h[field] = POISON_MARK
    return wire.encode_headers(h).replace(POISON_MARK, raw)


def poison(transport) -> dict[str, str]:
    """Rows no listing may break on, beside seed's: NUL and a lone surrogate in the headers the pages
    group by, headers that are not JSON or repeat a key, a 1 MB value; bodies nested 100,000 deep (JSON)
    and 50,000 deep (XML), 3 MB, invalid UTF-8. name -> the raw Headers text of each."""
    sales = transport.queue("Sales").address
    texts = {
        "nul_message": _poison_headers(transport, 0, wire.EXCEPTION_MESSAGE, "before\\u0000after"),
        "nul_type": _poison_headers(transport, 1, wire.EXCEPTION_TYPE, "Nul\\u0000Error"),
        "nul_failed_q": _poison_headers(transport, 2, wire.FAILED_Q, sales + "\\u0000x"),
        "nul_types": _poison_headers(transport, 3, "NServiceBus.EnclosedMessageTypes", "Shop.\\u0000Evil"),
        "surrogate": _poison_headers(transport, 4, wire.EXCEPTION_MESSAGE, "lone \\ud800 surrogate"),
        "not_json": '{"NServiceBus.ExceptionInfo.ExceptionType":"Broken","NServiceBus.FailedQ":"' + sales + '","cut',
        "duplicate": _poison_headers(transport, 5, wire.EXCEPTION_TYPE, "First").replace(
            "{", '{"NServiceBus.ExceptionInfo.ExceptionType":"Second",', 1
        ),
        "big": _poison_headers(transport, 6, wire.EXCEPTION_MESSAGE, "M" * BIG),
    }
    bodies = {
        "deep_json": b"[" * 100_000,
        "deep_xml": b"<a>" * 50_000 + b"</a>" * 50_000,
        "huge": b'{"x": "' + b"y" * (3 << 20) + b'"}',
        "invalid_utf8": b'{"bad": "\xc3\x28\xff"}',
    }
    for i, name in enumerate(bodies):
        texts[name] = _poison_headers(transport, 10 + i, wire.EXCEPTION_MESSAGE, name)
    with transport.engine.begin() as conn:
        queue = transport.queue("error")
        for name, text in texts.items():
            queue.send(conn, bodies.get(name, b'{"order": 1}'), text)
    return texts
