"""The online-rewrite side of an engine: the neutral base of each engine's nested `Online`.

A change that rewrites a queue table (PostgreSQL's Seq serial -> bigserial, a stored BodyString)
holds the table's exclusive lock for the whole rewrite when run in place. Run online
(docs/live-migrations.md, "Online rewrites"), migrate/online.py instead builds the changed table
beside the live one, keeps it current by a trigger while it copies the backlog in short
transactions, and swaps the two in one short transaction. An engine's section holds the
statements of those steps; migrate/online.py runs them. Engines that keep this base have no
online path: their rewrites run in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from ..schema import TableName, TableSpec
    from ..versions import Profile
    from .base import Dialect


class OnlineNames(NamedTuple):
    """The objects an online rewrite of one table adds beside it until its swap."""

    shadow: TableName  # the changed table, built beside the live one
    mirror: TableName  # the trigger function that keeps the shadow current


class Online:
    """What every engine's online section provides (migrate/online.py runs it). Statements are
    templates of this section run through `run`: {table}, {shadow}, {mirror} the quoted names."""

    supported = False

    COPY_FROM = ""  # the lowest key the shadow holds: the copy goes on below it
    ROWS_ESTIMATED = ""  # the live table's rows as the statistics have them (progress)
    COPY_BATCH = ""  # @Below, @BatchSize -> (rows copied, lowest key copied)
    WRITERS = ""  # the transactions writing to the live table now
    WRITERS_LEFT = ""  # @Writers -> how many of them are still running
    SETTLE = ""  # delete the copies of messages no longer in the live table
    LOCK_BOTH = ""
    COUNTS = ""  # (live rows, shadow rows)
    REPAIR_MISSING = ""
    REPAIR_EXTRA = ""
    CARRY_SEQUENCE = ""
    ANALYZE = ""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def names(self, table: TableName) -> OnlineNames:
        raise NotImplementedError

    def run(self, connection: Connection, template: str, table: TableName, **values: Any) -> Any:
        """One of this section's statements for the rewrite of `table`: names formatted in, values bound."""
        raise NotImplementedError

    def current_spec(self, connection: Connection, table: TableName) -> TableSpec | None:
        """The live queue table as a spec (its Seq type, whether it has BodyString); None if it is
        not there or is not a queue table."""
        raise NotImplementedError

    def create_shadow(self, target: TableSpec, profile: Profile, stale: bool) -> list[str]:
        raise NotImplementedError

    def mirror(self, table: TableName) -> list[str]:
        raise NotImplementedError

    def finish(self, connection: Connection, table: TableName) -> list[str]:
        """The swap's statements after the repair (read from the catalog under the swap's lock)."""
        raise NotImplementedError
