"""The operator console (`sqltransport-schema console`): the live bus in a browser, read straight
from the transport's tables: status's figures, the error queue grouped, a message's headers and
body, retries back to each message's failed queue, the error queue's archive, and an action log.

failed.py reads the error queue (groups, keyset pages, one message), actions.py retries and logs,
archive.py moves messages into the archive table and back and purges it,
security.py holds the operators and their tokens, the sessions, CSRF, the Origin and Host checks
and the bind rule, app.py is the Starlette application (pages
and /api). Starlette, uvicorn and Jinja2 are the `console` extra. See docs/console.md.
"""

from __future__ import annotations

from typing import Any

from .. import errors

EXTRA = "console"  # pip install 'sqltransport-schema[console]'


def require() -> Any:
    """Import the web stack, or Unavailable naming the extra to install."""
    try:
        import jinja2  # noqa: F401
        import python_multipart  # noqa: F401  (Starlette's form reading)
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise errors.Unavailable(f"the console needs the {EXTRA} extra: pip install 'sqltransport-schema[{EXTRA}]' ({exc})") from exc
    return uvicorn
