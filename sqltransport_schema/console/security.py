"""Who may do what in the console: the bind rule (loopback unless a token is set), the two tokens
(SQLTRANSPORT_CONSOLE_TOKEN for the operator, SQLTRANSPORT_CONSOLE_READ_TOKEN for views only), and
the CSRF value every state-changing request must carry. Headers and bodies shown come from anyone:
the pages escape every value and the Content-Security-Policy allows no inline script."""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass

from .. import errors

TOKEN_ENV = "SQLTRANSPORT_CONSOLE_TOKEN"
READ_TOKEN_ENV = "SQLTRANSPORT_CONSOLE_READ_TOKEN"
COOKIE = "sqltransport_console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
OPERATOR, READER = "operator", "read-only"
DEFAULT_BIND = "127.0.0.1:8765"

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
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
class Access:
    """The tokens (None: not set) and the CSRF value of one console process."""

    operator_token: str | None
    read_token: str | None
    read_only: bool
    csrf: str

    @classmethod
    def from_environment(cls, host: str, read_only: bool, environ: dict[str, str] | None = None) -> Access:
        env = os.environ if environ is None else environ
        operator, reader = env.get(TOKEN_ENV) or None, env.get(READ_TOKEN_ENV) or None
        if not is_loopback(host) and operator is None:
            raise errors.UsageError(
                f"--bind {host}: a console reachable from other machines needs a token: set {TOKEN_ENV} "
                f"(and {READ_TOKEN_ENV} for views only), or bind to 127.0.0.1"
            )
        for name, value in ((TOKEN_ENV, operator), (READ_TOKEN_ENV, reader)):
            if value is not None and len(value) < 16:
                raise errors.UsageError(
                    f"{name}: give a token of at least 16 characters (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
                )
        return cls(operator, reader, read_only, secrets.token_urlsafe(32))

    @property
    def tokens_required(self) -> bool:
        return self.operator_token is not None

    def role_of(self, presented: str | None) -> str | None:
        """The role a presented token gives (None: refused). Without tokens every caller is the operator."""
        if not self.tokens_required:
            return READER if self.read_only else OPERATOR
        if presented is None:
            return None
        if hmac.compare_digest(presented.encode(), self.operator_token.encode()):  # type: ignore[union-attr]
            return READER if self.read_only else OPERATOR
        if self.read_token is not None and hmac.compare_digest(presented.encode(), self.read_token.encode()):
            return READER
        return None

    def csrf_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.csrf.encode())
