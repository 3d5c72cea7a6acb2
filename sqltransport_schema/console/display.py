"""How the console's pages and API show a message's values and times: escaped and marked where no
page can show a character as it is, cut with a notice, times relative with the exact UTC on hover.
Pure functions of a value (no web framework: importable without the console extra); console/app.py's
pages use them."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from markupsafe import Markup, escape

from ..errorqueue import as_time

SHOWN = 300  # characters of a value a list shows (a message's page shows app.SHOWN_WHOLE)


# characters no page shows as they are: controls but tab and newlines, and lone surrogates
_UNSHOWN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def shown(value: Any, limit: int | None = SHOWN) -> Markup:
    """A value of a message as a page shows it: escaped as HTML; each character no page shows as it
    is (a NUL, a control, a lone surrogate) as its \\u escape, marked; cut after `limit` characters
    with a notice saying how many more there are."""
    if value is None:
        return Markup("")
    text = str(value)
    more = len(text) - limit if limit is not None and len(text) > limit else 0
    if more:
        text = text[:limit]
    parts: list[Any] = []
    last = 0
    for found in _UNSHOWN.finditer(text):
        parts.append(escape(text[last : found.start()]))
        parts.append(Markup('<mark class="escaped" title="a character no page shows as it is">%s</mark>') % f"\\u{ord(found.group()):04x}")
        last = found.end()
    parts.append(escape(text[last:]))
    if more:
        parts.append(Markup('<span class="cut">… cut: %s more characters (the JSON API gives them whole)</span>') % f"{more:,}")
    return Markup("").join(parts)


_UNITS = (("year", 365 * 86400), ("month", 30 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def ago(at: datetime, now: datetime | None = None) -> str:
    """`at` relative to now, in the largest whole unit: "3 minutes ago", "in 2 hours", "just now"."""
    seconds = ((now or datetime.now(timezone.utc)) - at).total_seconds()
    if abs(seconds) < 5:
        return "just now"
    for unit, size in _UNITS:
        if abs(seconds) >= size:
            n = int(abs(seconds) // size)
            text = f"{n} {unit}{'' if n == 1 else 's'}"
            return f"{text} ago" if seconds > 0 else f"in {text}"
    return "just now"


def when(value: Any) -> Markup:
    """A time as a page shows it: relative ("3 minutes ago") in a <time> whose datetime and title
    (shown on hover) are the exact time in UTC; a value that is no time as `shown` shows it."""
    at = as_time(value)
    if at is None:
        return shown(value)
    exact = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return Markup('<time datetime="%s" title="%s">%s</time>') % (at.isoformat(), exact, ago(at))
