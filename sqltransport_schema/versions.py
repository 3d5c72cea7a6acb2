"""Transport version -> profile: what the tables and statements of that release look like.

Every version boundary (transport-facts §1 and §4) is one row of BOUNDARIES, here and
nowhere else; DDL, drift checks, adoption and the runtime read the profile, never the
version number itself. A new boundary is a new row; a new kind of difference is a Profile
field (its 1.0 value as default) plus its rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from enum import Enum
from functools import cache

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


class PeekForm(str, Enum):
    """How the SQL Server transport's peek counts the messages it could receive."""

    COUNT = "count"  # a plain count: 4.0's form, the earliest transport-facts §4 records
    TOP = "top"  # counts at most N rows (SELECT TOP n)
    ROWVERSION_RANGE = "rowversion_range"  # reads the RowVersion range


# Field metadata: the fact changes what tables a release makes (adopt tells releases apart by it).
SHAPE = {"shape": True}


@dataclass(frozen=True)
class Profile:
    """What one release's tables and statements look like.

    A field holds its default (the 1.0 value) until a row of BOUNDARIES changes it.
    """

    version: str
    headers_unicode: bool = field(default=False, metadata=SHAPE)
    rowversion_clustered: bool = field(default=True, metadata=SHAPE)
    expires_index: ExpiresIndex = field(default=ExpiresIndex.NONE, metadata=SHAPE)
    script_style: ScriptStyle = ScriptStyle.IF_NOT_EXISTS
    three_part_names: bool = False
    delayed_delivery: bool = field(default=False, metadata=SHAPE)
    body_string: bool = field(default=False, metadata=SHAPE)
    subscriptions: bool = field(default=False, metadata=SHAPE)
    postgresql: bool = field(default=False, metadata=SHAPE)
    # SQL Server runtime statements (transport-facts §4)
    receive_correlation: bool = True  # receive returns CorrelationId and ReplyToAddress
    peek: PeekForm = PeekForm.COUNT
    send_correlation: bool = True  # send fills CorrelationId/ReplyToAddress and always writes Recoverable
    # PostgreSQL transport (upstream-conformance §6)
    postgresql_body_string: bool = field(default=False, metadata=SHAPE)  # its BodyString script adds the column
    postgresql_peek_locked: bool = False  # peek reads max/min Seq through FOR UPDATE SKIP LOCKED subqueries

    @property
    def queue_shape(self) -> tuple:
        """The parts of a queue table that differ between versions."""
        return (self.headers_unicode, self.rowversion_clustered, self.expires_index)


# Every version boundary, one row each: the first release of the new form, the Profile field
# it changes and the field's value from that release on (until a later row of the same field).
BOUNDARIES: tuple[tuple[str, str, object], ...] = (
    # Queue, delayed and subscription tables (transport-facts §1).
    ("2.2.3", "expires_index", ExpiresIndex.PLAIN),
    ("2.2.6", "headers_unicode", True),
    ("3.1", "expires_index", ExpiresIndex.FILTERED),
    ("3.1", "three_part_names", True),
    ("3.1", "delayed_delivery", True),
    ("4.1", "body_string", True),
    # RowVersion stopped being the clustered index in three maintenance lines at once:
    # 4.3.2, 5.0.3 and 6.0.1 (5.0.0-5.0.2 and 6.0.0 still cluster on it).
    ("4.3.2", "rowversion_clustered", False),
    ("5.0", "rowversion_clustered", True),
    ("5.0.3", "rowversion_clustered", False),
    ("6.0", "rowversion_clustered", True),
    ("6.0.1", "rowversion_clustered", False),
    ("5.0", "subscriptions", True),
    ("8.1", "postgresql", True),
    # SQL Server creation scripts: how they guard against concurrent installers.
    ("3.0", "script_style", ScriptStyle.APPLOCK),
    ("6.3.1", "script_style", ScriptStyle.APPLOCK_TRY_CATCH),
    # SQL Server runtime statements (transport-facts §4).
    # 4.1: receive stops returning CorrelationId/ReplyToAddress ("4.1+ no longer outputs ...").
    # Before 4.1 every version gets seed 003's form: 3.0 - 4.0 used it; the 1.x/2.x texts
    # (client-side expiry check, milliseconds to expiry) are not recorded, and the seed's
    # expired flag gives the same guarantee on their tables (expired rows are deleted and
    # flagged, never handled). 3.0's `WHERE Expires IS NULL OR Expires > GETUTCDATE()`
    # filter is not reproduced: it left expired rows behind for the purge.
    ("4.1", "receive_correlation", False),
    # 4.1.2: peek counts at most N rows ("4.1.2-6.0 used the TOP {n} count form"); before
    # it the plain count of 4.0, the earliest peek §4 records, for every older version too.
    ("4.1.2", "peek", PeekForm.TOP),
    # 6.1: peek reads the RowVersion range ("4.1.2-6.0" is the TOP form, so 6.0.x included).
    ("6.1", "peek", PeekForm.ROWVERSION_RANGE),
    # 7.0: send writes only Id, Recoverable, Expires, Headers, Body, and copes with a dropped
    # Recoverable column (§1: "7.x - 9.x send copes with a table whose Recoverable column was
    # dropped"). 1.x - 6.x send fills CorrelationId/ReplyToAddress as in seed 003.
    ("7.0", "send_correlation", False),
    # PostgreSQL transport (upstream-conformance §6). Its BodyString script tested the table's
    # existence and a misnamed column the wrong way round and never reached its ALTER until
    # 8.1.13; the 9.0 line started from the broken text and was fixed in 9.0.2.
    ("8.1.13", "postgresql_body_string", True),
    ("9.0", "postgresql_body_string", False),
    ("9.0.2", "postgresql_body_string", True),
    # 8.1.5: peek's max and min Seq come from two locking subqueries (before: plain aggregates).
    ("8.1.5", "postgresql_peek_locked", True),
)


def parse_version(text: str) -> VersionTuple:
    match = _VERSION_RE.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise UnknownVersion(f"transport version {text!r} is not of the form MAJOR.MINOR or MAJOR.MINOR.PATCH (e.g. \"9.1\")")
    major, minor, patch = (int(part) if part else 0 for part in match.groups())
    if not 1 <= major <= 9:
        raise UnknownVersion(f"transport version {text!r} is unknown: the SQL transport has versions 1.x to 9.x (latest {LATEST})")
    return major, minor, patch


def _checked_rows() -> list[tuple[VersionTuple, str, object]]:
    """BOUNDARIES oldest first (a stable sort: the table's order within a release)."""
    names = {f.name for f in fields(Profile)} - {"version"}
    for since, name, _ in BOUNDARIES:
        if name not in names:
            raise ValueError(f"version boundary {since} names {name!r}, which is not a Profile field")
    return sorted(((parse_version(since), name, value) for since, name, value in BOUNDARIES), key=lambda row: row[0])


_ROWS = _checked_rows()


@cache
def profile(version: str) -> Profile:
    """The release's profile: each field's default, changed by every boundary at or before it."""
    v = parse_version(version)
    return Profile(version, **{name: value for since, name, value in _ROWS if since <= v})


def first_release(name: str) -> str:
    """The first release whose profile differs from 1.0's in the field `name` (for messages)."""
    return min((since for since, field_name, _ in BOUNDARIES if field_name == name), key=parse_version)


FIRST = "1.0"

# What each optional feature needs, for validation messages.
FEATURE_SINCE = {
    "delayed_delivery": first_release("delayed_delivery"),
    "catalog": first_release("three_part_names"),
    "body_string": first_release("body_string"),
    "subscriptions": first_release("subscriptions"),
    "postgresql": first_release("postgresql"),
}

_SHAPE_FIELDS = {f.name for f in fields(Profile) if f.metadata.get("shape")}

# One release per distinct table shape, oldest first: the first release, each boundary of a
# SHAPE field, and the latest release (which names the current layout).
SHAPE_RELEASES: tuple[str, ...] = tuple(
    sorted(
        {FIRST, LATEST} | {since for since, name, _ in BOUNDARIES if name in _SHAPE_FIELDS},
        key=parse_version,
    )
)
