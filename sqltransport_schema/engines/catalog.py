"""The catalog side of an engine: the neutral base of each engine's nested `Catalog`.

An engine's catalog section (`PostgreSQL.Catalog`, `MSSQL.Catalog`, ...; the instance is
`dialect.catalog`) reads what a database holds, for `check`, `adopt`, autogenerate and the
runtime's start-up checks: every table's columns (`existing_columns`), every table's live shape
(`read_shapes`, a few bulk catalog queries whatever the number of tables) and what the transport
would warn of at start-up (`warnings`). The expected side (`Dialect.expected_shape`,
`Dialect.expected_columns`) stays on the dialect: it derives from the dialect's COLUMNS and DDL,
and reads no database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import errors
from ..schema import TableName

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.engine import Connection

    from ..shapes import TableShape
    from ..versions import Profile
    from .base import Dialect


class Catalog:
    """What every engine's catalog section provides."""

    EXISTING_COLUMNS = (
        "SELECT table_schema, table_name, column_name FROM information_schema.columns "
        "WHERE table_schema NOT IN ('information_schema', 'pg_catalog', 'sys')"
    )

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def existing_columns(self, connection: Connection) -> dict[tuple, set[str]]:
        """table_key -> lower-case column names of every table, in one query."""
        out: dict[tuple, set[str]] = {}
        table_key = self.dialect.table_key
        for schema, table, column in connection.exec_driver_sql(self.EXISTING_COLUMNS):
            out.setdefault(table_key(TableName(table, schema)), set()).add(column.lower())
        return out

    # (schema, table) of every table that exists, whatever the login may use (a catalog with no
    # privilege filter); None where the engine's catalog shows a login only what it holds a
    # privilege on (information_schema, SQL Server's sys views, MySQL's), so "missing" cannot be
    # told from "not visible to this login".
    ALL_TABLES: str | None = None

    def all_tables(self, connection: Connection) -> set[tuple] | None:
        """table_key of every table that exists, visible to this login or not (None: cannot tell)."""
        if self.ALL_TABLES is None:
            return None
        table_key = self.dialect.table_key
        return {table_key(TableName(table, schema)) for schema, table in connection.exec_driver_sql(self.ALL_TABLES)}

    ROW_COUNT = "SELECT count(*) FROM {table}"

    def row_counts(self, connection: Connection, names: Iterable[TableName]) -> dict[tuple, int]:
        """table_key -> rows, for each of the tables that exists (what a rewrite of it would move)."""
        existing = self.existing_columns(connection)
        table_key = self.dialect.table_key
        return {
            table_key(name): connection.exec_driver_sql(self.ROW_COUNT.format(table=self.dialect.qualified(name))).scalar()
            for name in names
            if table_key(name) in existing
        }

    def read_shapes(self, connection: Connection, catalogs: Iterable[str] = ()) -> dict[tuple, tuple[TableName, TableShape]]:
        """table_key -> (name, live shape) of every user table, in a few bulk catalog queries."""
        raise errors.Unsupported(f"check does not support {self.dialect.name} yet")

    def warnings(self, connection: Connection, queues: list[TableName], profile: Profile, purges_expired: bool = False) -> list[str]:
        """What the transport would warn of at start-up (a missing expiry index, non-Unicode headers);
        `purges_expired`: whether this process purges expired messages (Profile.checks_expires_index)."""
        return []
