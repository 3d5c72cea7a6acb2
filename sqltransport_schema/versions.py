"""Transport version -> profile: what the queue schema of that release looks like.

The table in transport-facts §1 is encoded here once; DDL, drift checks and the
runtime all read the profile, never the version number itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

VersionTuple = tuple[int, int, int]

LATEST = "9.1"
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


class UnknownVersion(ValueError):
    pass


class ExpiresIndex(str, Enum):
    NONE = "none"
    PLAIN = "plain"  # NONCLUSTERED (Expires) INCLUDE (Id, RowVersion), no filter
    FILTERED = "filtered"  # the same, WHERE Expires IS NOT NULL


class ScriptStyle(str, Enum):
    """How a SQL Server creation script guards itself against concurrent installers."""

    IF_NOT_EXISTS = "if_not_exists"  # 1.x-2.x
    APPLOCK = "applock"  # 3.0-6.3.0
    APPLOCK_TRY_CATCH = "applock_try_catch"  # 6.3.1+


@dataclass(frozen=True)
class Profile:
    version: str
    headers_unicode: bool
    rowversion_clustered: bool
    expires_index: ExpiresIndex
    script_style: ScriptStyle
    three_part_names: bool
    delayed_delivery: bool
    body_string: bool
    subscriptions: bool
    postgresql: bool

    @property
    def queue_shape(self) -> tuple:
        """The parts of a queue table that differ between versions."""
        return (self.headers_unicode, self.rowversion_clustered, self.expires_index)


def parse_version(text: str) -> VersionTuple:
    match = _VERSION_RE.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise UnknownVersion(
            f"transport version {text!r} is not of the form MAJOR.MINOR or MAJOR.MINOR.PATCH (e.g. \"9.1\")"
        )
    major, minor, patch = (int(part) if part else 0 for part in match.groups())
    if not 1 <= major <= 9:
        raise UnknownVersion(
            f"transport version {text!r} is unknown: the SQL transport has versions 1.x to 9.x (latest {LATEST})"
        )
    return major, minor, patch


def _nonclustered_rowversion(v: VersionTuple) -> bool:
    # The fix shipped in three maintenance lines at once: 4.3.2, 5.0.3 and 6.0.1.
    if v >= (6, 0, 1):
        return True
    if (5, 0, 3) <= v < (6, 0, 0):
        return True
    return (4, 3, 2) <= v < (5, 0, 0)


@lru_cache(maxsize=None)
def profile(version: str) -> Profile:
    v = parse_version(version)
    if v < (2, 2, 3):
        expires = ExpiresIndex.NONE
    elif v < (3, 1, 0):
        expires = ExpiresIndex.PLAIN
    else:
        expires = ExpiresIndex.FILTERED
    if v < (3, 0, 0):
        style = ScriptStyle.IF_NOT_EXISTS
    elif v < (6, 3, 1):
        style = ScriptStyle.APPLOCK
    else:
        style = ScriptStyle.APPLOCK_TRY_CATCH
    return Profile(
        version=version,
        headers_unicode=v >= (2, 2, 6),
        rowversion_clustered=not _nonclustered_rowversion(v),
        expires_index=expires,
        script_style=style,
        three_part_names=v >= (3, 1, 0),
        delayed_delivery=v >= (3, 1, 0),
        body_string=v >= (4, 1, 0),
        subscriptions=v >= (5, 0, 0),
        postgresql=v >= (8, 1, 0),
    )


# What each optional feature needs, for validation messages.
FEATURE_SINCE = {
    "delayed_delivery": "3.1",
    "catalog": "3.1",
    "body_string": "4.1",
    "subscriptions": "5.0",
    "postgresql": "8.1",
}
