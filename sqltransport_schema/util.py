"""Small helpers shared by the pure core."""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector around allocation-heavy, cycle-free work.

    Loading and compiling a 10,000-endpoint topology allocates a few hundred thousand
    small objects that live until the end; the collector would rescan them again and
    again (half the time of a large compile) and find nothing to free.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d)\s*")


def duration_ms(text: str) -> int | None:
    """`2s`, `500ms`, `10m` (or `10min`), `1h`, `7d` as milliseconds, `0` alone as 0; None: not a duration
    (each option that takes one says so in its own words)."""
    if text.strip() == "0":
        return 0
    match = _DURATION.fullmatch(text)
    return None if match is None else round(float(match.group(1)) * _UNITS[match.group(2)])


def parse_duration(text: str, option: str, *, zero: bool, meaning_of_zero: str = "") -> float:
    """A command-line duration as seconds: `5s`, `500ms`, `1m`; 0 only where `zero` allows it."""
    from .errors import UsageError

    milliseconds = duration_ms(text)
    if milliseconds is None or (milliseconds == 0 and not zero):
        allowed = f" (0: {meaning_of_zero})" if zero else ", above 0"
        raise UsageError(f"{option} {text}: give a duration with its unit, e.g. 500ms, 5s or 1m{allowed}")
    return milliseconds / 1000


def process_alive(pid: int) -> bool:
    """Whether a process of this pid exists (one of another user's counts: it cannot be signalled, but lives)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


DISTRIBUTION = "sqltransport-schema"


def package_version() -> str:
    """The installed package's version, from its metadata (pyproject.toml holds the one version)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"
