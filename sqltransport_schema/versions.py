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

from . import errors

VersionTuple = tuple[int, int, int]

LATEST = "9.1"
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


class UnknownVersion(errors.UsageError):
    """A transport version the tool has no profile for."""


class ExpiresIndex(str, Enum):
    NONE = "none"
    PLAIN = "plain"  # NONCLUSTERED (Expires) INCLUDE (Id, RowVersion), no filter
    FILTERED = "filtered"  # the same, WHERE Expires IS NOT NULL


class ScriptStyle(str, Enum):
    """How a SQL Server creation script guards itself against concurrent installers."""

    IF_NOT_EXISTS = "if_not_exists"  # 1.x-2.x
    NESTED_APPLOCK = "nested_applock"  # 3.0.x: IF NOT EXISTS ... BEGIN, the applock inside
    APPLOCK = "applock"  # 3.1-6.3.0
    APPLOCK_TRY_CATCH = "applock_try_catch"  # 6.3.1+


class PeekForm(str, Enum):
    """How the SQL Server transport's peek counts the messages it could receive."""

    COUNT = "count"  # a plain count
    TOP = "top"  # counts at most N rows (SELECT TOP n)
    ROWVERSION_RANGE = "rowversion_range"  # reads the RowVersion range


class PumpPurge(str, Enum):
    """When the transport's message pump purges expired messages from its input queue."""

    CONFIGURED = "configured"  # only when the endpoint configures it (6.1.2+; none before 3.1 here)
    PERIODIC = "periodic"  # 3.1.x: from its start, then every PurgeTaskDelay (5 minutes)
    AT_START = "at_start"  # 4.0.0-6.1.1: once as it starts, before it receives


class DueForm(str, Enum):
    """How the SQL Server transport's store of a delayed message gives its due time."""

    ABSOLUTE = "absolute"  # @Due, a UTC datetime the sender computed
    AFTER_MS = "after_ms"  # DATEADD(ms, @DueAfterMs, GETUTCDATE())
    PARTS = "parts"  # @DueAfter built from five int parts (ms, s, n, hh, d)


class IndexCheck(str, Enum):
    """How a SQL Server start-up check finds an index of the queue."""

    NONE = "none"  # the release does not check
    BY_NAME = "by_name"  # sys.indexes by the index's name
    BY_KEY = "by_key"  # any index whose first key column is the column


class CheckRuns(str, Enum):
    """When the transport's start-up check for the Expires index runs (it helps the purge of expired messages)."""

    ALWAYS = "always"  # up to 6.1.1
    UNLESS_PURGING = "unless_purging"  # 6.1.2-6.3.1: upstream tests its purge setting the wrong way round
    WHEN_PURGING = "when_purging"  # 6.3.2+: only when expired messages are purged


class RecoverableCheck(str, Enum):
    """How the SQL Server transport (7.0+) learns whether a queue still has its Recoverable column."""

    NONE = "none"  # before 7.0: every send writes Recoverable
    COLUMNS = "columns"  # SELECT TOP (0) *, then the result's column names
    COUNT_RAW_CATALOG = "count_raw_catalog"  # count in sys.columns of the catalog, written unbracketed
    COUNT = "count"  # the same count, the catalog in brackets


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
    # SQL Server runtime statements (upstream-conformance §3, §5)
    bracketed_runtime: bool = False  # 3.0.x: Sql.cs's texts, every column in brackets (see MSSQL's *_3_0)
    receive_correlation: bool = True  # receive returns CorrelationId and ReplyToAddress
    receive_recoverable: bool = True  # receive returns Recoverable
    filters_expired: bool = True  # receive and peek skip expired rows in the query (no expired flag)
    peek: PeekForm = PeekForm.COUNT
    pump_purge: PumpPurge = PumpPurge.CONFIGURED  # when the pump purges expired messages unasked
    peek_readcommittedlock: bool = False  # the RowVersion-range peek reads WITH (READPAST, READCOMMITTEDLOCK), not nolock
    purge_expired_readpast: bool = False  # the purge of expired messages reads WITH (READPAST), not NOLOCK
    send_correlation: bool = True  # send fills CorrelationId/ReplyToAddress and always writes Recoverable
    send_recoverable_parameter: bool = True  # send writes Recoverable from @Recoverable, not the literal 1
    store_delayed: DueForm = DueForm.ABSOLUTE
    move_due_returns_next: bool = False  # the move of due messages also returns (UtcNow, NextDue)
    move_due_next_readpast: bool = False  # ... reading the delayed table WITH (READPAST) for it
    move_due_column_list: bool = False  # ... and inserts INTO the queue with a column list
    expires_check: IndexCheck = IndexCheck.BY_NAME
    expires_check_runs: CheckRuns = CheckRuns.ALWAYS
    rowversion_check: IndexCheck = IndexCheck.NONE  # the start-up check for a nonclustered RowVersion index
    recoverable_check: RecoverableCheck = RecoverableCheck.NONE
    subscriptions_endpoint_not_null: bool = False  # the subscription table declares Endpoint NOT NULL
    # PostgreSQL transport (upstream-conformance §6)
    postgresql_body_string: bool = field(default=False, metadata=SHAPE)  # its BodyString script adds the column
    postgresql_peek_locked: bool = False  # peek reads max/min Seq through FOR UPDATE SKIP LOCKED subqueries

    def checks_expires_index(self, purges_expired: bool) -> bool:
        """Whether the release's start-up checks look for the Expires index, given whether this
        process purges expired messages (6.1.2+ tie the check to that setting)."""
        if self.expires_index is ExpiresIndex.NONE:
            return False
        if self.expires_check_runs is CheckRuns.UNLESS_PURGING:
            return not purges_expired
        if self.expires_check_runs is CheckRuns.WHEN_PURGING:
            return purges_expired
        return True

    @property
    def queue_shape(self) -> tuple:
        """The parts of a queue table that differ between versions."""
        return (self.headers_unicode, self.rowversion_clustered, self.expires_index)


# Every version boundary, one row each: the first release of the new form, the Profile field
# it changes and the field's value from that release on (until a later row of the same field).
BOUNDARIES: tuple[tuple[str, str, object], ...] = (
    # Queue, delayed and subscription tables (transport-facts §1, upstream-conformance §4, §5).
    # Index_Expires (and the purge of expired messages) appear at 2.2.2 (upstream-conformance §9).
    ("2.2.2", "expires_index", ExpiresIndex.PLAIN),
    # Headers: nvarchar at 2.2.6, varchar again in 3.0.0-3.0.2, nvarchar from 3.0.3 on.
    ("2.2.6", "headers_unicode", True),
    ("3.0", "headers_unicode", False),
    ("3.0.3", "headers_unicode", True),
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
    ("7.0", "subscriptions_endpoint_not_null", True),
    ("8.1", "postgresql", True),
    # SQL Server creation scripts: how they guard against concurrent installers.
    ("3.0", "script_style", ScriptStyle.NESTED_APPLOCK),
    ("3.1", "script_style", ScriptStyle.APPLOCK),
    ("6.3.1", "script_style", ScriptStyle.APPLOCK_TRY_CATCH),
    # SQL Server runtime statements (upstream-conformance §2-§3; fixes of parallel maintenance
    # lines appear at several places in version order).
    # 3.0.x wrote its runtime texts in one file (Sql.cs) with bracketed column names; 3.1 moved
    # them to SqlConstants with the forms below.
    ("3.0", "bracketed_runtime", True),
    ("3.1", "bracketed_runtime", False),
    # send: @Recoverable until 4.0.0, the literal 1 from 4.1.0; 7.0 writes only Id, Recoverable,
    # Expires, Headers, Body, and copes with a dropped Recoverable column.
    ("4.1", "send_recoverable_parameter", False),
    ("7.0", "send_correlation", False),
    # receive and peek: 3.x skip expired rows in the query; 4.0.0 flags them instead, still
    # returning Recoverable; 4.1 stops returning Recoverable; 7.0 CorrelationId/ReplyToAddress.
    ("4.0", "filters_expired", False),
    ("4.1", "receive_recoverable", False),
    ("7.0", "receive_correlation", False),
    # peek: count (3.1.0-3.1.5), at most N (3.1.6), count (4.0.0-4.1.1), at most N (4.1.2-6.0.1),
    # the RowVersion range (6.1.1+), read with nolock until 6.3.6 and 7.0.4.
    # the pump's purge of expired messages (ExpiredMessagesPurger): every 5 minutes from its start
    # (3.1.x), once at its start (4.0.0-6.1.1), only when configured (6.1.2+, NoOpExpiredMessagesPurger).
    ("3.1", "pump_purge", PumpPurge.PERIODIC),
    ("4.0", "pump_purge", PumpPurge.AT_START),
    ("6.1.2", "pump_purge", PumpPurge.CONFIGURED),
    ("3.1.6", "peek", PeekForm.TOP),
    ("4.0", "peek", PeekForm.COUNT),
    ("4.1.2", "peek", PeekForm.TOP),
    ("6.1", "peek", PeekForm.ROWVERSION_RANGE),
    ("6.3.7", "peek_readcommittedlock", True),
    ("7.0", "peek_readcommittedlock", False),
    ("7.0.5", "peek_readcommittedlock", True),
    ("4.0", "purge_expired_readpast", True),
    # store of a delayed message: @Due (3.1.0-4.1.4), @DueAfterMs (4.3.0), five parts (4.3.1+).
    ("4.3", "store_delayed", DueForm.AFTER_MS),
    ("4.3.1", "store_delayed", DueForm.PARTS),
    # move of due delayed messages: NOCOUNT-wrapped and silent until 6.2.0; from 6.3.1 it returns
    # when the next falls due, reading it WITH (READPAST) from 6.3.4 and 7.0.0, and inserts with a
    # column list from 6.3.6 and 7.0.4.
    ("6.3.1", "move_due_returns_next", True),
    ("6.3.4", "move_due_next_readpast", True),
    ("6.3.6", "move_due_column_list", True),
    ("7.0", "move_due_column_list", False),
    ("7.0.4", "move_due_column_list", True),
    # start-up checks: Index_Expires by name, from 7.0 any index keyed on Expires; a nonclustered
    # RowVersion index checked by name in 4.3.2, 5.0.3, 6.0.1-6.3.8, by key column from 7.0.
    ("7.0", "expires_check", IndexCheck.BY_KEY),
    # ... and runs from 6.1.2 only as the purge of expired messages is configured: 6.1.2-6.3.1
    # when it is off (upstream reads its own setting inverted), from 6.3.2 when it is on.
    ("6.1.2", "expires_check_runs", CheckRuns.UNLESS_PURGING),
    ("6.3.2", "expires_check_runs", CheckRuns.WHEN_PURGING),
    ("4.3.2", "rowversion_check", IndexCheck.BY_NAME),
    ("5.0", "rowversion_check", IndexCheck.NONE),
    ("5.0.3", "rowversion_check", IndexCheck.BY_NAME),
    ("6.0", "rowversion_check", IndexCheck.NONE),
    ("6.0.1", "rowversion_check", IndexCheck.BY_NAME),
    ("7.0", "rowversion_check", IndexCheck.BY_KEY),
    # whether a queue has its Recoverable column (7.0+): the result's columns, then a count in
    # the catalog's sys.columns (7.0.7 and 8.1.5 write the catalog raw, later releases bracket it).
    ("7.0", "recoverable_check", RecoverableCheck.COLUMNS),
    ("7.0.7", "recoverable_check", RecoverableCheck.COUNT_RAW_CATALOG),
    ("7.0.8", "recoverable_check", RecoverableCheck.COUNT),
    ("8.0", "recoverable_check", RecoverableCheck.COLUMNS),
    ("8.1.5", "recoverable_check", RecoverableCheck.COUNT_RAW_CATALOG),
    ("8.1.6", "recoverable_check", RecoverableCheck.COUNT),
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
    if (major, minor, patch) > _LATEST:  # a release this tool does not know the tables and statements of
        raise UnknownVersion(
            f'transport version {text!r} is past the latest release this tool knows, {LATEST}: write "{LATEST}" or an earlier one'
        )
    return major, minor, patch


_LATEST = tuple(int(part) for part in f"{LATEST}.0".split(".")[:3])


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


def lowers(old: str, new: str) -> bool:
    """Whether going from release `old` to `new` goes back to an earlier release."""
    return parse_version(new) < parse_version(old)


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
