"""The operator console (`sqltransport-schema console`): the live bus in a browser, read straight
from the transport's tables: status's figures, the error queue grouped, a message's headers and
body, retries back to each message's failed queue, the error queue's archive, and an action log.

The error queue is read and acted on by its model (sqltransport_schema/errorqueue/, `ErrorQueue`:
groups, keyset pages, one message, retry, archive, restore, purge, the action log), which the command
line calls too; the console keeps routes, templates and jobs: actions.py runs the model's actions as
jobs, display.py shows values and times, security.py holds the operators and their tokens, the sessions, CSRF, the Origin and Host checks
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
