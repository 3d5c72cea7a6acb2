"""The console on a shared machine, over HTTP against a real server process: named operators from a
tokens file (the action log says who), the cookie a random session id, a CSRF value per session and
none on the open sign-in page, the Origin check of every POST (another port of 127.0.0.1 is another
origin), the trusted-host check (DNS rebinding), sign-out, and the security headers on every answer,
a 404's and a 500's too. Refusals of the options are one `error:` line and exit 2."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

from .support.console import ConsoleProcess, console_bus, console_missing, needs, seed

pytestmark = pytest.mark.console

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
TOKENS = f"# the console's operators\nalice operator {ALICE}\nbob read-only {BOB}\n"


@pytest.fixture
def transport(project, db_url, monkeypatch):
    yield from console_bus(project, db_url, monkeypatch)


def raw(console, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):
    """(status, headers (lowercase names), body text) of one request as given: no redirect followed,
    the Host header as given (http.client sends the one in `headers`)."""
    parts = urllib.parse.urlsplit(console.base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        given = dict(headers or {})
        conn.putrequest(method, path, skip_host="Host" in given, skip_accept_encoding=True)
        for name, value in given.items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        conn.close()


def sign_in(console, token: str) -> str:
    """The session cookie a sign-in with this token sets (its value)."""
    code, headers, text = raw(
        console, "POST", "/login", urllib.parse.urlencode({"token": token}).encode(), {"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert code == 303, (code, text)
    cookie = headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    return cookie.split(";", 1)[0].split("=", 1)[1]


def post_json(console, path: str, data: object, headers: dict[str, str]):
    return raw(console, "POST", path, json.dumps(data).encode(), {"Content-Type": "application/json", **headers})


def test_sessions_csrf_origin_host_logout_and_named_operators(transport, project):
    needs(console_missing())
    seed(transport)
    tokens = project.root / "console-tokens"
    tokens.write_text(TOKENS)
    console = ConsoleProcess(
        transport.engine.url.render_as_string(hide_password=False),
        "--tokens-file",
        str(tokens),
        "--allowed-host",
        "console.example",
        cwd=str(project.root),
    )
    try:
        port = console.base.rsplit(":", 1)[1]
        own = {"Origin": console.base}
        code, headers, html = raw(console, "GET", "/login")
        assert code == 200 and 'name="csrf"' not in html and headers["content-security-policy"].startswith("default-src 'self'")
        first, second = sign_in(console, ALICE), sign_in(console, ALICE)
        assert first != second and ALICE not in first and len(first) >= 32
        csrf1 = json.loads(raw(console, "GET", "/api/csrf", headers={"Cookie": f"sqltransport_console={first}"})[2])
        csrf2 = json.loads(raw(console, "GET", "/api/csrf", headers={"Cookie": f"sqltransport_console={second}"})[2])
        assert csrf1["who"] == "alice" and csrf1["role"] == "operator" and csrf1["csrf"] != csrf2["csrf"]
        cookie1 = {"Cookie": f"sqltransport_console={first}"}
        code, _, html = raw(console, "GET", "/failed", headers=cookie1)
        assert code == 200 and csrf1["csrf"] in html and csrf2["csrf"] not in html and 'id="logout"' in html
        [one, two, three, *_] = [m["id"] for m in json.loads(raw(console, "GET", "/api/failed/messages", headers=cookie1)[2])["messages"]]
        archive = {"ids": [one], "wait": True}
        # another session's CSRF value, a foreign origin (another port, "null", a foreign Referer): refused
        for headers in (
            {**cookie1, **own, "X-CSRF-Token": csrf2["csrf"]},
            {**cookie1, "X-CSRF-Token": csrf1["csrf"], "Origin": f"http://127.0.0.1:{int(port) + 1}"},
            {**cookie1, "X-CSRF-Token": csrf1["csrf"], "Origin": "null"},
            {**cookie1, "X-CSRF-Token": csrf1["csrf"], "Referer": "http://localhost:1/attack.html"},
        ):
            code, answer, text = post_json(console, "/api/archive", archive, headers)
            assert code == 403 and "content-security-policy" in answer, (headers, text)
        code, _, text = post_json(console, "/api/archive", archive, {**cookie1, **own, "X-CSRF-Token": csrf1["csrf"]})
        assert code == 200 and json.loads(text)["moved"] == 1, text
        # a script's token: its own CSRF value; the reader may not act
        alice = {"Authorization": f"Bearer {ALICE}"}
        alice_csrf = json.loads(raw(console, "GET", "/api/csrf", headers=alice)[2])["csrf"]
        assert alice_csrf not in (csrf1["csrf"], csrf2["csrf"])
        code, _, text = post_json(console, "/api/retry", {"ids": [two], "wait": True}, {**alice, "X-CSRF-Token": alice_csrf})
        assert code == 200, text
        bob = {"Authorization": f"Bearer {BOB}"}
        bob_csrf = json.loads(raw(console, "GET", "/api/csrf", headers=bob)[2])
        assert bob_csrf["who"] == "bob" and bob_csrf["role"] == "read-only"
        code, _, text = post_json(console, "/api/retry", {"ids": [three], "wait": True}, {**bob, "X-CSRF-Token": bob_csrf["csrf"]})
        assert code == 403 and "operator token" in text
        log = json.loads(raw(console, "GET", "/api/log", headers=alice)[2])["actions"]
        assert [(a["action"], a["who"]) for a in log] == [("retry (done)", "alice@127.0.0.1"), ("archive (done)", "alice@127.0.0.1")]
        assert json.loads(raw(console, "GET", "/api/archive", headers=alice)[2])["messages"][0]["by"] == "alice@127.0.0.1"
        # the Host header: a foreign one refused, GET or POST; the bind address, localhost and --allowed-host served
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.2:{port}", ""):
            code, answer, text = raw(console, "GET", "/api/csrf", headers={**alice, "Host": host})
            assert code == 400 and "Host" in text and "x-frame-options" in answer, host
            code, _, _ = post_json(
                console, "/api/archive", {"ids": [three], "wait": True}, {**alice, "Host": host, "X-CSRF-Token": alice_csrf}
            )
            assert code == 400
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"console.example:{port}", "CONSOLE.example"):
            assert raw(console, "GET", "/api/csrf", headers={**alice, "Host": host})[0] == 200, host
        # sign-out ends that session alone
        logout = urllib.parse.urlencode({"csrf": csrf1["csrf"]}).encode()
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        code, answer, _ = raw(console, "POST", "/logout", logout, {**cookie1, **own, **form})
        assert code == 303 and answer["location"] == "/login" and 'sqltransport_console=""' in answer["set-cookie"].replace("=;", '="";')
        assert raw(console, "GET", "/api/csrf", headers=cookie1)[0] == 401
        assert raw(console, "GET", "/api/csrf", headers={"Cookie": f"sqltransport_console={second}"})[0] == 200
        assert raw(console, "GET", "/api/csrf", headers={"Cookie": f"sqltransport_console={ALICE}"})[0] == 401  # a token is no cookie
        # the security headers on a 404 and on a 500 (the error queue's table gone under the console)
        code, answer, _ = raw(console, "GET", "/no/such/page", headers=alice)
        assert code == 404 and answer["x-frame-options"] == "DENY" and "content-security-policy" in answer
        with transport.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {transport.dialect.qualified(transport.name('error'), transport.profile)}")
        code, answer, text = raw(console, "GET", "/api/failed/groups", headers=alice)
        assert code == 500 and answer["x-frame-options"] == "DENY" and "content-security-policy" in answer and "Traceback" not in text
        code, answer, _ = raw(console, "GET", "/failed", headers=alice)
        assert code == 500 and answer["referrer-policy"] == "same-origin"
    finally:
        console.close()


@pytest.mark.parametrize(
    "args, text, words",
    [
        (["--tokens-file", "missing-file"], None, "--tokens-file missing-file: No such file"),
        (["--tokens-file", "tokens"], "alice admin " + ALICE, "role 'admin': choose operator or read-only"),
        (["--tokens-file", "tokens"], "alice operator short", "at least 16 characters"),
        (["--tokens-file", "tokens"], f"alice operator {ALICE}\nalice read-only {BOB}", "alice is named twice"),
        (["--tokens-file", "tokens"], f"alice operator {ALICE}\nbob read-only {ALICE}", "another operator's too"),
        (["--tokens-file", "tokens"], "alice operator", "give NAME ROLE TOKEN"),
        (["--tokens-file", "tokens"], "# none yet\n", "no operator in it"),
        (["--allowed-host", "console.example:8765"], None, "without a port"),
    ],
)
def test_bad_operators_and_hosts_are_one_error_line(sqlite_url, tmp_path, monkeypatch, capsys, args, text, words):
    """Refused before the database is opened or the web stack imported: exit 2, one `error:` line, no token echoed."""
    from sqltransport_schema import cli

    monkeypatch.chdir(tmp_path)
    if text is not None:
        (tmp_path / "tokens").write_text(text)
    assert cli.main(["console", "--url", sqlite_url, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert ALICE not in err and BOB not in err


def test_operators_from_the_environment_and_the_single_tokens_still_work(monkeypatch):
    from sqltransport_schema import errors
    from sqltransport_schema.console.security import Access

    named = Access.from_environment("0.0.0.0", False, {"SQLTRANSPORT_CONSOLE_TOKENS": f"alice operator {ALICE}; bob read-only {BOB}"})
    assert [(o.name, o.role) for o in named.operators] == [("alice", "operator"), ("bob", "read-only")]
    assert named.of_token(BOB).name == "bob" and named.of_token("x" * 20) is None
    single = Access.from_environment("127.0.0.1", False, {"SQLTRANSPORT_CONSOLE_TOKEN": ALICE, "SQLTRANSPORT_CONSOLE_READ_TOKEN": BOB})
    assert [(o.name, o.role) for o in single.operators] == [("operator", "operator"), ("read-only", "read-only")]
    assert Access.from_environment("127.0.0.1", True, {"SQLTRANSPORT_CONSOLE_TOKEN": ALICE}).role_of(single.operators[0]) == "read-only"
    with pytest.raises(errors.UsageError, match="needs a token"):
        Access.from_environment("0.0.0.0", False, {})
    assert Access.from_environment("10.1.2.3", False, {"SQLTRANSPORT_CONSOLE_TOKEN": ALICE}).host_ok("10.1.2.3:8765")
