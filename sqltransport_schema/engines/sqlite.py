"""SQLite: the embedded default. Same logical columns as the SQL Server queue table,
FIFO by an AUTOINCREMENT RowVersion (never reused), a partial index on Expires.

SQLite has no schemas or catalogs here: a table is known by its name alone, and
names compare without case. One statement per batch (sqlite3 runs one at a time).
"""

from __future__ import annotations

from ..schema import Kind, TableName, TableSpec
from ..versions import ExpiresIndex, Profile
from .base import Engine


class SQLite(Engine):
    name = "sqlite"
    dialect = "sqlite"
    default_schema = None
    case_insensitive_names = True

    CREATE_QUEUE = """\
CREATE TABLE IF NOT EXISTS {table} (
    Id TEXT NOT NULL,
    CorrelationId TEXT,
    ReplyToAddress TEXT,
    Recoverable INTEGER NOT NULL,
    Expires DATETIME,
    Headers TEXT NOT NULL,
    Body BLOB,
    RowVersion INTEGER PRIMARY KEY AUTOINCREMENT{body_string}
)"""
    BODY_STRING_COLUMN = "BodyString TEXT GENERATED ALWAYS AS (CAST(Body AS TEXT)) VIRTUAL"
    CREATE_EXPIRES_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} (Expires){filter}"
    DROP_INDEX = "DROP INDEX IF EXISTS {index}"
    CREATE_DELAYED = """\
CREATE TABLE IF NOT EXISTS {table} (
    Headers TEXT NOT NULL,
    Body BLOB,
    Due DATETIME NOT NULL,
    RowVersion INTEGER PRIMARY KEY AUTOINCREMENT
)"""
    CREATE_DUE_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} (Due)"
    CREATE_SUBSCRIPTIONS = """\
CREATE TABLE IF NOT EXISTS {table} (
    QueueAddress TEXT NOT NULL,
    Endpoint TEXT NOT NULL,
    Topic TEXT NOT NULL,
    PRIMARY KEY (Endpoint, Topic)
)"""
    ADD_BODY_STRING = "ALTER TABLE {table} ADD COLUMN " + BODY_STRING_COLUMN
    DROP_BODY_STRING = "ALTER TABLE {table} DROP COLUMN BodyString"
    # SQLite has no procedural code: a named CHECK constraint makes the database
    # itself refuse, with the refusal as the constraint's name in the error.
    GUARD_RESET = 'DROP TABLE IF EXISTS temp."sqltransport_drop_guard"'
    GUARD_CREATE = 'CREATE TEMP TABLE "sqltransport_drop_guard" (queue TEXT CONSTRAINT {message} CHECK (queue IS NULL))'
    GUARD_PROBE = 'INSERT INTO temp."sqltransport_drop_guard" SELECT \'nonempty\' FROM {table} LIMIT 1'
    DROP_TABLE = "DROP TABLE IF EXISTS {table}"

    expected = {
        "queue": frozenset({"id", "correlationid", "replytoaddress", "recoverable", "expires", "headers", "body", "rowversion"}),
        "delayed": frozenset({"headers", "body", "due", "rowversion"}),
        "subscriptions": frozenset({"queueaddress", "endpoint", "topic"}),
    }
    EXISTING_COLUMNS = (
        "SELECT NULL, m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p WHERE m.type = 'table'"
    )

    def quote(self, identifier: str) -> str:
        return '"' + identifier.replace('"', '""') + '"'

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        return self.quote(name.table)

    def table_key(self, name: TableName) -> tuple:
        return (name.table.casefold(),)

    index_suffixes = {"queue": ("_Expires",), "delayed": ("_Due",)}

    def _index(self, spec: TableSpec) -> str:
        return self.index_names(spec)[0].table

    def create_queue(self, spec: TableSpec, profile: Profile) -> list[str]:
        table = self.qualified(spec.name)
        body_string = ",\n    " + self.BODY_STRING_COLUMN if spec.body_string else ""
        return [self.CREATE_QUEUE.format(table=table, body_string=body_string)] + self._expires_index(
            spec, profile.expires_index
        )

    def _expires_index(self, spec: TableSpec, kind: ExpiresIndex) -> list[str]:
        if kind is ExpiresIndex.NONE:
            return []
        filter_ = " WHERE Expires IS NOT NULL" if kind is ExpiresIndex.FILTERED else ""
        return [
            self.CREATE_EXPIRES_INDEX.format(
                index=self.quote(self._index(spec)), table=self.qualified(spec.name), filter=filter_
            )
        ]

    def create_delayed(self, spec: TableSpec, profile: Profile) -> list[str]:
        table = self.qualified(spec.name)
        return [
            self.CREATE_DELAYED.format(table=table),
            self.CREATE_DUE_INDEX.format(index=self.quote(self._index(spec)), table=table),
        ]

    def create_subscriptions(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.CREATE_SUBSCRIPTIONS.format(table=self.qualified(spec.name))]

    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        table = self.qualified(spec.name)
        batches = []
        if not discard_messages:
            batches += [
                self.GUARD_RESET,
                self.GUARD_CREATE.format(message=self.quote(self.refusal(spec))),
                self.GUARD_PROBE.format(table=table),
                self.GUARD_RESET,
            ]
        return batches + [self.DROP_TABLE.format(table=table)]

    def change_queue_version(self, spec: TableSpec, old: Profile, new: Profile) -> list[str]:
        if old.expires_index == new.expires_index:
            return []
        return [self.DROP_INDEX.format(index=self.quote(self._index(spec)))] + self._expires_index(
            spec, new.expires_index
        )

    def add_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.ADD_BODY_STRING.format(table=self.qualified(spec.name))]

    def drop_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.DROP_BODY_STRING.format(table=self.qualified(spec.name))]
