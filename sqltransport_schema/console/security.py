"""Who may do what in the console, every rule of it here: the bind rule (loopback unless a token is
set), the operators (each a name, a role and a token: SQLTRANSPORT_CONSOLE_TOKENS or --tokens-file;
or the single SQLTRANSPORT_CONSOLE_TOKEN and SQLTRANSPORT_CONSOLE_READ_TOKEN), the sessions a sign-in
opens (the cookie holds a random session id, never a token), the CSRF value of each session, the
Origin check of every POST and the trusted-host check of every request. Headers and bodies shown come
from anyone: the pages escape every value and the Content-Security-Policy allows no inline script."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .. import errors

TOKEN_ENV = "SQLTRANSPORT_CONSOLE_TOKEN"
READ_TOKEN_ENV = "SQLTRANSPORT_CONSOLE_READ_TOKEN"
TOKENS_ENV = "SQLTRANSPORT_CONSOLE_TOKENS"  # named operators, as a --tokens-file holds them
COOKIE = "sqltransport_console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
OPERATOR, READER = "operator", "read-only"
ROLES = (OPERATOR, READER)
DEFAULT_BIND = "127.0.0.1:8765"
MIN_TOKEN = 16
SESSION_IDLE = 12 * 3600.0  # seconds a session lasts unused
MAX_SESSIONS = 10_000  # beyond it the session unused longest ends
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: a browser then sends the console's own Origin with its forms'
    # POSTs (no-referrer makes it "null"), which the Origin check compares
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Operator:
    """Who a token is: a name (the action log's), a role (operator or read-only), the token."""

    name: str
    role: str
    token: str = field(repr=False)


def _check_token(where: str, token: str) -> None:
    if len(token) < MIN_TOKEN:
        raise errors.UsageError(
            f"{where}: give a token of at least {MIN_TOKEN} characters (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
        )


def parse_tokens(text: str, where: str) -> list[Operator]:
    """Operators from the text of a tokens file (or SQLTRANSPORT_CONSOLE_TOKENS): one a line (or
    separated by `;`), `NAME ROLE TOKEN`, ROLE operator or read-only; `#` starts a comment."""
    out: list[Operator] = []
    for number, line in enumerate(re.split(r"[\n;]", text), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3:
            raise errors.UsageError(f"{where}, entry {number}: give NAME ROLE TOKEN (ROLE {' or '.join(ROLES)})")
        name, role, token = parts
        if not _NAME.fullmatch(name):
            raise errors.UsageError(f"{where}, entry {number}: {name[:70]!r} is no name (letters, digits, . _ @ -; up to 64)")
        if role not in ROLES:
            raise errors.UsageError(f"{where}, entry {number} ({name}): role {role[:30]!r}: choose {' or '.join(ROLES)}")
        _check_token(f"{where}, entry {number} ({name})", token)
        if any(o.name == name for o in out):
            raise errors.UsageError(f"{where}: {name} is named twice")
        if any(hmac.compare_digest(o.token.encode(), token.encode()) for o in out):
            raise errors.UsageError(f"{where}: {name}'s token is another operator's too")
        out.append(Operator(name, role, token))
    return out


def trusted_hosts(bind_host: str, allowed: Iterable[str] = ()) -> frozenset[str]:
    """The Host header's names a request may give (without its port): 127.0.0.1, localhost, ::1, the
    bind address, and each --allowed-host (a name or an address, no port; checked here)."""
    hosts = {"127.0.0.1", "localhost", "::1", bind_host.strip("[]").lower()}
    for given in allowed:
        name = given.strip().lower()
        if not name or "/" in name or (":" in name and not _is_ip(name.strip("[]"))) or any(c.isspace() for c in name):
            raise errors.UsageError(f"--allowed-host {given!r}: give a host name or an address, without a port")
        hosts.add(name.strip("[]"))
    return frozenset(hosts)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def host_of(netloc: str) -> str | None:
    """The host of a Host header or of an origin's netloc, lowercase, without port or brackets; None
    for one that cannot be read."""
    try:
        host = urlsplit("//" + netloc).hostname
    except ValueError:
        return None
    return host.lower() if host else None


@dataclass
class Session:
    operator: Operator
    csrf: str
    last_used: float


class Access:
    """The operators, the sessions and the checks of one console process."""

    def __init__(
        self, operators: list[Operator], read_only: bool, hosts: frozenset[str] = frozenset({"127.0.0.1", "localhost", "::1"})
    ) -> None:
        self.operators, self.read_only, self.hosts = operators, read_only, hosts
        self._secret = secrets.token_bytes(32)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_environment(
        cls,
        host: str,
        read_only: bool,
        environ: dict[str, str] | None = None,
        tokens_file: str | None = None,
        allowed_hosts: Iterable[str] = (),
    ) -> Access:
        """The operators of --tokens-file, else of SQLTRANSPORT_CONSOLE_TOKENS, else the single
        tokens (SQLTRANSPORT_CONSOLE_TOKEN: the operator named `operator`; ..._READ_TOKEN: `read-only`)."""
        env = os.environ if environ is None else environ
        if tokens_file is not None:
            try:
                text = Path(tokens_file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise errors.UsageError(f"--tokens-file {tokens_file}: {getattr(exc, 'strerror', None) or exc}") from None
            operators = parse_tokens(text, f"--tokens-file {tokens_file}")
            if not operators:
                raise errors.UsageError(f"--tokens-file {tokens_file}: no operator in it (NAME ROLE TOKEN, a line each)")
        elif env.get(TOKENS_ENV):
            operators = parse_tokens(env[TOKENS_ENV], TOKENS_ENV)
        else:
            operators = []
            for name, variable, role in (("operator", TOKEN_ENV, OPERATOR), ("read-only", READ_TOKEN_ENV, READER)):
                value = env.get(variable) or None
                if value is not None:
                    _check_token(variable, value)
                    operators.append(Operator(name, role, value))
            if operators and operators[0].role != OPERATOR:
                raise errors.UsageError(f"{READ_TOKEN_ENV} is set without {TOKEN_ENV}: set the operator's token too")
        if not is_loopback(host) and not operators:
            raise errors.UsageError(
                f"--bind {host}: a console reachable from other machines needs a token: set {TOKEN_ENV} "
                f"(and {READ_TOKEN_ENV} for views only), {TOKENS_ENV} or --tokens-file, or bind to 127.0.0.1"
            )
        return cls(operators, read_only, trusted_hosts(host, allowed_hosts))

    @property
    def tokens_required(self) -> bool:
        return bool(self.operators)

    def _role(self, operator: Operator) -> str:
        return READER if self.read_only else operator.role

    # -- who a request is ------------------------------------------------------------------------
    def of_token(self, presented: str | None) -> Operator | None:
        """The operator a token names (None: refused); every token compared, in constant time each."""
        if presented is None:
            return None
        found = None
        for operator in self.operators:
            if hmac.compare_digest(presented.encode(), operator.token.encode()):
                found = operator
        return found

    def anonymous(self) -> Operator:
        """Who a caller is where no token is set: the operator (read-only with --read-only)."""
        return Operator("operator", READER if self.read_only else OPERATOR, "")

    def role_of(self, operator: Operator | None) -> str | None:
        return None if operator is None else self._role(operator)

    # -- sessions ----------------------------------------------------------------------------
    def open_session(self, operator: Operator) -> str:
        """A new session of this operator: its id (the cookie's value; random, never the token)."""
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._forget_idle(now)
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[min(self._sessions, key=lambda s: self._sessions[s].last_used)]
            self._sessions[sid] = Session(operator, secrets.token_urlsafe(32), now)
        return sid

    def session(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            found = self._sessions.get(sid)
            if found is None or now - found.last_used > SESSION_IDLE or found.operator not in self.operators:
                self._sessions.pop(sid, None)
                return None
            found.last_used = now
            return found

    def close_session(self, sid: str | None) -> None:
        with self._lock:
            self._sessions.pop(sid or "", None)

    def _forget_idle(self, now: float) -> None:
        for sid in [s for s, found in self._sessions.items() if now - found.last_used > SESSION_IDLE]:
            del self._sessions[sid]

    # -- CSRF ----------------------------------------------------------------------------------
    def csrf_of(self, session: Session | None, operator: Operator | None) -> str:
        """The CSRF value of a caller: its session's own; a script's (a token in Authorization) one
        of its operator's, made from a secret of this process; without tokens, one of this process."""
        if session is not None:
            return session.csrf
        who = "" if operator is None or not self.tokens_required else operator.name
        return hmac.new(self._secret, ("csrf:" + who).encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def csrf_ok(expected: str, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), expected.encode())

    # -- hosts and origins ---------------------------------------------------------------------
    def host_ok(self, host_header: str | None) -> bool:
        """Whether the request's Host names this console (the DNS-rebinding check)."""
        host = host_of(host_header or "")
        return host is not None and host in self.hosts

    @staticmethod
    def origin_ok(origin: str | None, referer: str | None, scheme: str, host_header: str) -> bool:
        """Whether a POST comes from the console's own pages: its Origin (else its Referer's origin)
        is the console's, scheme, host and port, as the request's Host names it; a POST with neither
        (a script's, which a browser never sends) passes, "null" does not."""
        given = origin if origin is not None else referer
        if given is None:
            return True
        parts = urlsplit(given.strip())
        try:
            port = parts.port
        except ValueError:
            return False
        if parts.scheme != scheme or parts.hostname is None:
            return False
        own = urlsplit(f"{scheme}://{host_header}")
        try:
            own_port = own.port
        except ValueError:
            return False
        default = {"http": 80, "https": 443}.get(scheme)
        return parts.hostname.lower() == (own.hostname or "").lower() and (port or default) == (own_port or default)
