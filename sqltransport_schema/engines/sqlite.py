"""SQLite: the embedded default. Same logical columns as the SQL Server queue table,
FIFO by an AUTOINCREMENT RowVersion (never reused), a partial index on Expires.

SQLite has no schemas or catalogs here: a table is known by its name alone, and
names compare without case. One statement per batch (sqlite3 runs one at a time).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..schema import Correlation, Kind, TableName, TableSpec
from ..shapes import (
    Column,
    IndexShape,
    TableShape,
    normalise_predicate,
    normalise_type,
    outbox_columns,
    saga_shape_columns,
    shape_columns,
    where_clause,
)
from ..versions import ExpiresIndex, Profile
from .base import Dialect

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.engine import URL, Connection

    from .pipeline import Table


_CLOSERS = {'"': '"', "'": "'", "`": "`", "[": "]"}
_TABLE_CONSTRAINTS = frozenset({"constraint", "primary", "unique", "check", "foreign"})


def _past_quoted(sql: str, i: int) -> int:
    """The index after the quoted name or string that starts at i (a doubled quote escapes it)."""
    end, j = _CLOSERS[sql[i]], i + 1
    while j < len(sql):
        if sql[j] == end:
            if end != "]" and sql[j + 1 : j + 2] == end:
                j += 2
                continue
            return j + 1
        j += 1
    return j


def _tokens(sql: str) -> list[str]:
    """SQL text as tokens: quoted names and strings whole, a parenthesised group whole, words, punctuation."""
    out, i, n = [], 0, len(sql)
    while i < n:
        ch, start = sql[i], i
        if ch.isspace():
            i += 1
            continue
        if ch in _CLOSERS:
            i = _past_quoted(sql, i)
        elif ch == "(":
            depth = 0
            while i < n:
                if sql[i] in _CLOSERS:
                    i = _past_quoted(sql, i)
                    continue
                depth += {"(": 1, ")": -1}.get(sql[i], 0)
                i += 1
                if depth == 0:
                    break
        elif ch.isalnum() or ch == "_":
            while i < n and (sql[i].isalnum() or sql[i] in "_$"):
                i += 1
        else:
            i += 1
        out.append(sql[start:i])
    return out


def _unquote(token: str) -> str:
    if token[:1] in _CLOSERS and len(token) >= 2:
        end = _CLOSERS[token[0]]
        return token[1:-1] if end == "]" else token[1:-1].replace(end * 2, end)
    return token


def column_clauses(create_table: str) -> dict[str, dict[str, str]]:
    """Lower-case column name -> what its definition in a CREATE TABLE statement says beyond the
    type: "defaults" (the DEFAULT expression), "generated" (`<expression> virtual|stored`),
    "collations" (the COLLATE name), "autoincrement". SQLite keeps these in the statement alone."""
    tokens = _tokens(create_table)
    body = next((t for t in tokens if t.startswith("(")), None)
    if body is None:  # CREATE TABLE ... AS SELECT: no column definitions
        return {}
    definitions, current = [], []
    for token in _tokens(body[1:-1]):
        if token == ",":
            definitions.append(current)
            current = []
        else:
            current.append(token)
    definitions.append(current)
    out: dict[str, dict[str, str]] = {}
    for words in definitions:
        if not words or words[0].lower() in _TABLE_CONSTRAINTS:
            continue
        found: dict[str, str] = {}
        lowered = [w.lower() for w in words]
        for i, word in enumerate(lowered):
            following = words[i + 1] if i + 1 < len(words) else ""
            if word == "default" and following:
                if following in ("-", "+") and i + 2 < len(words):  # a signed number
                    following += words[i + 2]
                found["defaults"] = following[1:-1].strip() if following.startswith("(") else following
            elif word == "collate" and following:
                found["collations"] = _unquote(following)
            elif word == "as" and following.startswith("(") and i > 0:
                storage = "stored" if "stored" in lowered[i + 2 : i + 3] else "virtual"
                found["generated"] = f"{following[1:-1].strip()} {storage}"
            elif word == "autoincrement":
                found["autoincrement"] = "autoincrement"
        out[_unquote(words[0]).lower()] = found
    return out


class SQLite(Dialect):
    name = "sqlite"
    sqlalchemy_name = "sqlite"
    drivers = ("sqlite3",)
    default_schema = None
    has_schemas = False
    ddl_savepoints = True
    case_insensitive_names = True
    database_file = True

    def bounded_connect(self, cparams: dict[str, Any], seconds: float) -> None:
        cparams["timeout"] = seconds  # sqlite3: how long a statement waits for another connection's lock

    # a connection's busy timeout, set again where an engine's own listener raised it (wait_for_locks)
    READ_TIMEOUT_STATEMENTS = ("PRAGMA busy_timeout = {ms}",)

    explicit_begin = True  # sqlite3 begins before the first write and commits before DDL

    # =====================================================================================
    # -- identifiers and names ------------------------------------------------------------
    # =====================================================================================
    def quote(self, identifier: str) -> str:
        return '"' + identifier.replace('"', '""') + '"'

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        return self.quote(name.table)

    def table_key(self, name: TableName) -> tuple:
        return (name.table.casefold(),)

    index_suffixes = {"queue": ("_Expires",), "delayed": ("_Due",), "archive": ("_ArchivedAt",)}

    def _index(self, spec: TableSpec) -> str:
        return self.index_names(spec)[0].table

    # =====================================================================================
    # -- columns of each table kind, and the shapes our DDL gives them (check) ------------
    # =====================================================================================
    # The SQL Server transport's columns (the pipeline's "mssql" layout) in SQLite's declared types,
    # lower case. INTEGER PRIMARY KEY (the rowid) is never null.
    QUEUE_COLUMNS = (
        Column("Id", "text", False),
        Column("CorrelationId", "text", True),
        Column("ReplyToAddress", "text", True),
        Column("Recoverable", "integer", False),
        Column("Expires", "datetime", True),
        Column("Headers", "text", False),
        Column("Body", "blob", True),
        Column("RowVersion", "integer", False),
    )
    COLUMNS = {
        Kind.QUEUE: QUEUE_COLUMNS,
        Kind.DELAYED: (
            Column("Headers", "text", False),
            Column("Body", "blob", True),
            Column("Due", "datetime", False),
            Column("RowVersion", "integer", False),
        ),
        Kind.SUBSCRIPTIONS: (
            Column("QueueAddress", "text", False),
            Column("Endpoint", "text", False),
            Column("Topic", "text", False),
        ),
        # the queue's columns, RowVersion the archive's own key, then when, why and who archived
        Kind.ARCHIVE: QUEUE_COLUMNS
        + (Column("ArchivedAt", "datetime", False), Column("ArchivedWhy", "text", False), Column("ArchivedBy", "text", False)),
        Kind.ACTION_LOG: (
            Column("Id", "integer", False),
            Column("At", "datetime", False),
            Column("Who", "text", False),
            Column("Action", "text", False),
            Column("Target", "text", False),
            Column("Messages", "integer", False),
        ),
    }

    # -- expected shapes (check; the live side is Catalog.read_shapes) -------------------
    BODY_STRING_EXPRESSION = "CAST(Body AS TEXT) virtual"  # BODY_STRING_COLUMN's, as column_clauses reads it back
    OUTBOX_DEFAULTS = {"dispatched": "0"}  # CREATE_OUTBOX's DEFAULT

    def expected_shape(self, spec: TableSpec, profile: Profile) -> TableShape:
        indexes = []
        defaults: dict[str, str] = {}
        numbering: dict[str, str] = {}
        if spec.kind is Kind.QUEUE:
            columns = shape_columns(self.COLUMNS[Kind.QUEUE])
            if spec.body_string:
                columns["bodystring"] = ("text", True)
            if profile.expires_index is not ExpiresIndex.NONE:
                predicate = "expiresisnotnull" if profile.expires_index is ExpiresIndex.FILTERED else None
                indexes.append(IndexShape(("expires",), predicate=predicate, name=self._index(spec)))
            numbering = {"rowversion": self.Catalog.AUTOINCREMENT}
        elif spec.kind is Kind.DELAYED:
            columns = shape_columns(self.COLUMNS[Kind.DELAYED])
            if spec.body_string:
                columns["bodystring"] = ("text", True)
            indexes.append(IndexShape(("due",), name=self._index(spec)))
            numbering = {"rowversion": self.Catalog.AUTOINCREMENT}
        elif spec.kind is Kind.SAGA:
            columns = dict(self.SAGA_SHAPE_COLUMNS)
            indexes.append(IndexShape(("id",), unique=True))  # the primary key's automatic index
            for c in spec.correlations:
                column = self.correlation_column(c.name).lower()
                columns[column] = (self.CORRELATION_TYPES[c.type].lower(), True)
                predicate = normalise_predicate(f"{column} IS NOT NULL")
                indexes.append(IndexShape((column,), unique=True, predicate=predicate, name=self.correlation_index(spec, c.name)))
        elif spec.kind is Kind.OUTBOX:
            columns = shape_columns(self.OUTBOX_COLUMNS)
            indexes.append(IndexShape(("messageid",), unique=True))  # the primary key's automatic index
            indexes += [IndexShape((column.lower(),), name=f"{spec.name.table}_{index}") for index, column in self.OUTBOX_INDEXES.items()]
            defaults = dict(self.OUTBOX_DEFAULTS)
        elif spec.kind is Kind.ARCHIVE:
            columns = shape_columns(self.COLUMNS[Kind.ARCHIVE])
            indexes.append(IndexShape(("archivedat",), name=self._index(spec)))
            numbering = {"rowversion": self.Catalog.AUTOINCREMENT}
        elif spec.kind is Kind.ACTION_LOG:
            columns = shape_columns(self.COLUMNS[Kind.ACTION_LOG])
            numbering = {"id": self.Catalog.AUTOINCREMENT}
        else:
            columns = shape_columns(self.COLUMNS[Kind.SUBSCRIPTIONS])
            indexes.append(IndexShape(("endpoint", "topic"), unique=True))
        generated = {"bodystring": self.BODY_STRING_EXPRESSION} if "bodystring" in columns else {}
        return TableShape(columns, indexes, defaults=defaults, numbering=numbering, generated=generated)

    # =====================================================================================
    # -- DDL ------------------------------------------------------------------------------
    # =====================================================================================
    # QUEUE_COLUMNS as declared: CREATE_QUEUE's column list, and CREATE_ARCHIVE's before its own three
    QUEUE_COLUMN_LIST = """\
    Id TEXT NOT NULL,
    CorrelationId TEXT,
    ReplyToAddress TEXT,
    Recoverable INTEGER NOT NULL,
    Expires DATETIME,
    Headers TEXT NOT NULL,
    Body BLOB,
    RowVersion INTEGER PRIMARY KEY AUTOINCREMENT"""
    CREATE_QUEUE = "CREATE TABLE IF NOT EXISTS {table} (\n" + QUEUE_COLUMN_LIST + "{body_string}\n)"
    BODY_STRING_COLUMN = "BodyString TEXT GENERATED ALWAYS AS (CAST(Body AS TEXT)) VIRTUAL"
    CREATE_EXPIRES_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} (Expires){filter}"
    DROP_INDEX = "DROP INDEX IF EXISTS {index}"
    CREATE_DELAYED = """\
CREATE TABLE IF NOT EXISTS {table} (
    Headers TEXT NOT NULL,
    Body BLOB,
    Due DATETIME NOT NULL,
    RowVersion INTEGER PRIMARY KEY AUTOINCREMENT{body_string}
)"""
    CREATE_DUE_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} (Due)"
    CREATE_SUBSCRIPTIONS = """\
CREATE TABLE IF NOT EXISTS {table} (
    QueueAddress TEXT NOT NULL,
    Endpoint TEXT NOT NULL,
    Topic TEXT NOT NULL,
    PRIMARY KEY (Endpoint, Topic)
)"""
    CREATE_ARCHIVE = (
        "CREATE TABLE IF NOT EXISTS {table} (\n"
        + QUEUE_COLUMN_LIST
        + """,
    ArchivedAt DATETIME NOT NULL,
    ArchivedWhy TEXT NOT NULL,
    ArchivedBy TEXT NOT NULL
)"""
    )
    CREATE_ARCHIVED_AT_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} (ArchivedAt)"
    CREATE_ACTION_LOG = """\
CREATE TABLE IF NOT EXISTS {table} (
    Id INTEGER PRIMARY KEY AUTOINCREMENT,
    At DATETIME NOT NULL,
    Who TEXT NOT NULL,
    Action TEXT NOT NULL,
    Target TEXT NOT NULL,
    Messages INTEGER NOT NULL
)"""
    ADD_BODY_STRING = "ALTER TABLE {table} ADD COLUMN " + BODY_STRING_COLUMN
    DROP_BODY_STRING = "ALTER TABLE {table} DROP COLUMN BodyString"
    # SQLite has no procedural code: a named CHECK constraint makes the database
    # itself refuse, with the refusal as the constraint's name in the error.
    GUARD_RESET = 'DROP TABLE IF EXISTS temp."sqltransport_drop_guard"'
    GUARD_CREATE = 'CREATE TEMP TABLE "sqltransport_drop_guard" (queue TEXT CONSTRAINT {message} CHECK (queue IS NULL))'
    GUARD_PROBE = 'INSERT INTO temp."sqltransport_drop_guard" SELECT \'nonempty\' FROM {table}{where} LIMIT 1'
    DROP_TABLE = "DROP TABLE IF EXISTS {table}"

    def create_queue(self, spec: TableSpec, profile: Profile) -> list[str]:
        table = self.qualified(spec.name)
        return [self.CREATE_QUEUE.format(table=table, body_string=self._body_string(spec))] + self._expires_index(
            spec, profile.expires_index
        )

    def _body_string(self, spec: TableSpec) -> str:
        return ",\n    " + self.BODY_STRING_COLUMN if spec.body_string else ""

    def _expires_index(self, spec: TableSpec, kind: ExpiresIndex) -> list[str]:
        if kind is ExpiresIndex.NONE:
            return []
        filter_ = " WHERE Expires IS NOT NULL" if kind is ExpiresIndex.FILTERED else ""
        return [self.CREATE_EXPIRES_INDEX.format(index=self.quote(self._index(spec)), table=self.qualified(spec.name), filter=filter_)]

    def create_delayed(self, spec: TableSpec, profile: Profile) -> list[str]:
        table = self.qualified(spec.name)
        return [
            self.CREATE_DELAYED.format(table=table, body_string=self._body_string(spec)),
            self.CREATE_DUE_INDEX.format(index=self.quote(self._index(spec)), table=table),
        ]

    def create_subscriptions(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.CREATE_SUBSCRIPTIONS.format(table=self.qualified(spec.name))]

    def create_archive(self, spec: TableSpec, profile: Profile) -> list[str]:
        table = self.qualified(spec.name)
        return [
            self.CREATE_ARCHIVE.format(table=table),
            self.CREATE_ARCHIVED_AT_INDEX.format(index=self.quote(self._index(spec)), table=table),
        ]

    def create_action_log(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.CREATE_ACTION_LOG.format(table=self.qualified(spec.name))]

    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        table = self.qualified(spec.name)
        batches = []
        if not discard_messages:
            batches += [
                self.GUARD_RESET,
                self.GUARD_CREATE.format(message=self.quote(self.refusal(spec))),
                self.GUARD_PROBE.format(table=table, where=self.drop_guard_where(spec)),
                self.GUARD_RESET,
            ]
        return batches + [self.DROP_TABLE.format(table=table)]

    # A dropped queue's subscription rows: those whose address's table part (before the first '@')
    # is the queue. One namespace: any schema or catalog part names the same table. An offline
    # script cannot guard it (SQLite has no IF); it runs where the subscription table exists.
    DELETE_SUBSCRIBERS_OF = (
        "DELETE FROM {subscriptions} WHERE substr(QueueAddress, 1, instr(QueueAddress || '@', '@') - 1) = @Table COLLATE NOCASE"
    )
    HAS_TABLE = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = @Name COLLATE NOCASE"

    def version_change_effects(self, old: Profile, new: Profile) -> list[str]:
        # Headers is TEXT in every release: only the index on Expires follows the version.
        return self.expires_index_effect(old, new, "the index on Expires")

    def change_queue_version(self, spec: TableSpec, old: Profile, new: Profile) -> list[str]:
        if old.expires_index == new.expires_index:
            return []
        return [self.DROP_INDEX.format(index=self.quote(self._index(spec)))] + self._expires_index(spec, new.expires_index)

    def add_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.ADD_BODY_STRING.format(table=self.qualified(spec.name))]

    def drop_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.DROP_BODY_STRING.format(table=self.qualified(spec.name))]

    # =====================================================================================
    # -- runtime statements ---------------------------------------------------------------
    # =====================================================================================
    # -- waiting for the database lock ---------------------------------------------------
    # SQLite has one writer at a time. A transaction begun as a reader (BEGIN, or sqlite3's implicit
    # BEGIN) that later writes while another process holds the write lock fails at once with
    # "database is locked": waiting could deadlock, so the busy timeout does not apply. Begun as a
    # writer (BEGIN IMMEDIATE) it waits for the lock, up to the busy timeout, like any other.
    BEGIN_WRITER = "BEGIN IMMEDIATE"
    BEGIN_READER = "BEGIN"
    BUSY_TIMEOUT_MS = 30000
    BUSY_TIMEOUT = "PRAGMA busy_timeout"
    # WAL: readers no longer wait for a writer, and a commit writes to the -wal file only.
    PAGE_COUNT = "PRAGMA page_count"
    JOURNAL_MODE_WAL = "PRAGMA journal_mode = WAL"

    def wait_for_locks(self, dbapi_connection: Any) -> None:
        """A busy timeout of at least BUSY_TIMEOUT_MS on a sqlite3 connection (a longer one is kept)."""
        if dbapi_connection.execute(self.BUSY_TIMEOUT).fetchone()[0] < self.BUSY_TIMEOUT_MS:
            dbapi_connection.execute(f"{self.BUSY_TIMEOUT} = {self.BUSY_TIMEOUT_MS}")

    def set_lock_timeout(self, connection: Connection, milliseconds: int) -> None:
        """SQLite has no lock queue: a migration's busy timeout bounds how long it waits for the
        database's write lock (0: as long as BUSY_TIMEOUT_MS). Set on the driver's connection:
        a statement through SQLAlchemy would first begin a writer's transaction and wait for it."""
        dbapi_connection = connection.connection.dbapi_connection
        dbapi_connection.execute(f"{self.BUSY_TIMEOUT} = {int(milliseconds) or self.BUSY_TIMEOUT_MS}")

    GUARD_ERROR_CODES = frozenset({275})  # SQLITE_CONSTRAINT_CHECK: a guard's CHECK constraint failed

    def lock_timed_out(self, error: BaseException) -> bool:
        return type(error).__name__ == "OperationalError" and "database is locked" in str(error)

    def undefined_table(self, error: BaseException) -> bool:
        # sqlite3 has no error codes for it before Python 3.11's sqlite_errorname, which says SQLITE_ERROR
        return type(error).__name__ == "OperationalError" and str(error).startswith("no such table")

    def bind_runtime_connection(self, dbapi_connection: Any) -> None:
        """A caller's sqlite3 connection for the driver path: waits for locks, and sqlite3's implicit
        BEGIN (before the first write of a transaction) begins a writer. A connection in autocommit
        mode (isolation_level None) is left to its caller, who begins transactions with BEGIN_WRITER."""
        self.wait_for_locks(dbapi_connection)
        if dbapi_connection.isolation_level is not None and dbapi_connection.isolation_level.upper() in ("", "DEFERRED"):
            dbapi_connection.isolation_level = "IMMEDIATE"

    def new_database_in_wal(self, dbapi_connection: Any) -> bool:
        """Switch a database the migrations are about to create (an empty file) to WAL; True if switched.
        An existing database keeps the journal mode it has. Outside any transaction (SQLite's rule)."""
        if dbapi_connection.execute(self.PAGE_COUNT).fetchone()[0] != 0:
            return False
        return dbapi_connection.execute(self.JOURNAL_MODE_WAL).fetchone()[0].lower() == "wal"

    # Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', which compares in time order. Writers
    # serialise on the database lock, so a receive's DELETE ... RETURNING is exclusive.
    NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

    @staticmethod
    def now_plus_ms(milliseconds: str) -> str:
        """The UTC time text `milliseconds` (an expression) from now, as NOW writes times."""
        return f"strftime('%Y-%m-%d %H:%M:%f', 'now', ({milliseconds} / 1000.0) || ' seconds')"

    SEND = (
        "INSERT INTO {table} (Id, Recoverable, Expires, Headers, Body) VALUES (@Id, 1, "
        "CASE WHEN @TimeToBeReceivedMs IS NOT NULL THEN " + now_plus_ms("@TimeToBeReceivedMs") + " END, @Headers, @Body)"
    )
    # Not `Expires IS NULL`: SQLite 3.40 evaluates that wrongly in a DELETE's RETURNING when
    # the partial index (WHERE Expires IS NOT NULL) exists; coalesce is read correctly.
    EXPIRED = "CASE WHEN coalesce(Expires, '9999') > " + NOW + " THEN 0 ELSE 1 END"
    RECEIVE = "DELETE FROM {table} WHERE RowVersion = (SELECT min(RowVersion) FROM {table}) RETURNING Id, " + EXPIRED + ", Headers, Body"
    RECEIVE_BATCH = (
        "DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT @BatchSize) "
        "RETURNING Id, " + EXPIRED + ", Headers, Body, RowVersion"
    )
    # The pump's batches (docs/runtime.md): the transaction is a writer (BEGIN IMMEDIATE), so the
    # rows it reads are its own until the commit; handled ones are deleted by RowVersion
    # in one statement (@Orders: a JSON array).
    LOCK_BATCH = "SELECT Id, " + EXPIRED + ", Headers, Body, RowVersion FROM {table} ORDER BY RowVersion LIMIT @BatchSize"
    DELETE_LOCKED = "DELETE FROM {table} WHERE RowVersion IN (SELECT value FROM json_each(@Orders))"
    SAVEPOINT = "SAVEPOINT sqltransport_message"
    ROLLBACK_TO_SAVEPOINT = "ROLLBACK TO SAVEPOINT sqltransport_message"
    PEEK = "SELECT COALESCE(max(RowVersion) - min(RowVersion) + 1, 0) FROM {table}"
    PURGE_EXPIRED = "DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM {table} WHERE Expires < " + NOW + " LIMIT @BatchSize)"
    PURGE_ALL = "DELETE FROM {table}"
    STORE_DELAYED = "INSERT INTO {delayed} (Headers, Body, Due) VALUES (@Headers, @Body, " + now_plus_ms("@DueAfterMs") + ")"
    # Two statements under one write lock and one cut-off (@Now), so they see the same rows.
    DUE = "SELECT RowVersion FROM {delayed} WHERE Due < @Now ORDER BY Due, RowVersion LIMIT @BatchSize"
    MOVE_DUE_DELAYED = (
        "INSERT INTO {table} (Id, Recoverable, Expires, Headers, Body) "
        "SELECT lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-' || "
        "substr('89ab', 1 + (abs(random()) % 4), 1) || substr(h, 18, 3) || '-' || substr(h, 21, 12)), 1, NULL, Headers, Body "
        "FROM (SELECT hex(randomblob(16)) AS h, Headers, Body, Due, RowVersion FROM {delayed} WHERE RowVersion IN (" + DUE + ") "
        "ORDER BY Due, RowVersion)"
    )
    DELETE_MOVED_DELAYED = "DELETE FROM {delayed} WHERE RowVersion IN (" + DUE + ")"
    NEXT_DUE = "SELECT Due FROM {delayed} ORDER BY Due LIMIT 1"
    DELAYED_STATEMENTS = {
        **Dialect.DELAYED_STATEMENTS,
        "move_due_delayed": ("MOVE_DUE_DELAYED", "copy due messages into the input queue"),
        "delete_moved_delayed": ("DELETE_MOVED_DELAYED", "delete what move_due_delayed copied"),
    }
    SUBSCRIBE = (
        "INSERT INTO {subscriptions} (QueueAddress, Topic, Endpoint) VALUES (@QueueAddress, @Topic, @Endpoint) "
        "ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = excluded.QueueAddress"
    )
    UNSUBSCRIBE = "DELETE FROM {subscriptions} WHERE Endpoint = @Endpoint AND Topic = @Topic"
    FIND_SUBSCRIBERS = "SELECT DISTINCT QueueAddress FROM {subscriptions} WHERE Topic IN ({topics})"

    def now_parameter(self) -> str:
        from datetime import datetime, timezone

        return self.outbox_time(datetime.now(timezone.utc))

    def outbox_time(self, moment: Any) -> str:
        """SQLite keeps times as text: the text NOW produces, so they compare as times do."""
        from datetime import timezone

        return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    # =====================================================================================
    # -- sagas ----------------------------------------------------------------------------
    # =====================================================================================
    # -- saga tables: SQL persistence's columns in SQLite's types ------------------------------
    CORRELATION_TYPES = {"string": "TEXT", "int": "INTEGER", "guid": "TEXT", "datetime": "DATETIME", "datetimeoffset": "TEXT"}
    CREATE_SAGA = """\
CREATE TABLE IF NOT EXISTS {table} (
    Id TEXT NOT NULL PRIMARY KEY,
    Metadata TEXT NOT NULL,
    Data TEXT NOT NULL,
    PersistenceVersion TEXT NOT NULL,
    SagaTypeVersion TEXT NOT NULL,
    Concurrency INTEGER NOT NULL
)"""
    ADD_CORRELATION = "ALTER TABLE {table} ADD COLUMN {column} {column_type}"
    CREATE_CORRELATION_INDEX = "CREATE UNIQUE INDEX IF NOT EXISTS {index} ON {table} ({column}) WHERE {column} IS NOT NULL"
    BACKFILL_PROBE = 'INSERT INTO temp."sqltransport_drop_guard" SELECT \'null\' FROM {table} WHERE {require} IS NULL LIMIT 1'
    DROP_CORRELATION = "ALTER TABLE {table} DROP COLUMN {column}"
    SAGA_SHAPE_COLUMNS = saga_shape_columns("text", "text", "text", "text", "text", "integer")

    # -- outbox tables: SQL persistence's columns (upstream-conformance §8) in SQLite's types;
    # index names carry the table's (one namespace for every index of the database) --------------
    OUTBOX_COLUMNS = outbox_columns("text", "integer", "datetime", "text", "text")
    CREATE_OUTBOX = """\
CREATE TABLE IF NOT EXISTS {table} (
    MessageId TEXT NOT NULL PRIMARY KEY,
    Dispatched INTEGER NOT NULL DEFAULT 0,
    DispatchedAt DATETIME,
    PersistenceVersion TEXT NOT NULL,
    Operations TEXT NOT NULL
)"""
    CREATE_OUTBOX_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} ({column})"
    # The pump's batch forms: the batch's ids as one JSON array (list_parameter).
    OUTBOX_GET_BATCH = """\
SELECT MessageId, Dispatched, Operations
FROM {table}
WHERE MessageId IN (SELECT value FROM json_each(@MessageIds))"""
    OUTBOX_SET_AS_DISPATCHED_BATCH = """\
UPDATE {table}
SET Dispatched = 1, DispatchedAt = @DispatchedAt, Operations = '[]'
WHERE MessageId IN (SELECT value FROM json_each(@MessageIds))"""

    def create_outbox(self, spec: TableSpec, profile: Profile | None = None) -> list[str]:
        table = self.qualified(spec.name)
        indexes = [
            self.CREATE_OUTBOX_INDEX.format(index=self.quote(f"{spec.name.table}_{index}"), table=table, column=self.quote(column))
            for index, column in self.OUTBOX_INDEXES.items()
        ]
        return [self.CREATE_OUTBOX.format(table=table)] + indexes

    def correlation_index(self, spec: TableSpec, prop: str) -> str:
        # one namespace for every index of the database: the table name keeps it apart
        return f"{spec.name.table}_Index_Correlation_{prop}"

    def saga_index_names(self, spec: TableSpec) -> list[TableName]:
        return [TableName(self.correlation_index(spec, c.name)) for c in spec.correlations]

    def _saga_fields(self, spec: TableSpec, correlation: Correlation | None = None) -> dict:
        if correlation is None:
            return {"table": self.qualified(spec.name)}
        column = self.quote(self.correlation_column(correlation.name))
        return {
            "table": self.qualified(spec.name),
            "column": column,
            "column_type": self.CORRELATION_TYPES[correlation.type],
            "index": self.quote(self.correlation_index(spec, correlation.name)),
        }

    def drop_saga_correlation(self, spec: TableSpec, correlation: Correlation, require: Correlation | None) -> list[str]:
        fields = self._saga_fields(spec, correlation)
        batches = []
        if require is not None:
            # the trick of the guarded queue drop: a CHECK constraint named with the refusal
            batches += [
                self.GUARD_RESET,
                self.GUARD_CREATE.format(message=self.quote(self.backfill_refusal(spec, correlation, require))),
                self.BACKFILL_PROBE.format(table=fields["table"], require=self.quote(self.correlation_column(require.name))),
                self.GUARD_RESET,
            ]
        return batches + [self.DROP_INDEX.format(**fields), self.DROP_CORRELATION.format(**fields)]

    # =====================================================================================
    # -- catalog reads (check, adopt, autogenerate, the runtime's start-up checks) --------
    # =====================================================================================
    class Catalog(Dialect.Catalog):
        """Columns and live shapes from sqlite_master and the table pragmas, and the transport's
        missing-index warning."""

        EXISTING_COLUMNS = "SELECT NULL, m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p WHERE m.type = 'table'"

        USER_TABLES = "m.type = 'table' AND substr(m.name, 1, 7) <> 'sqlite_'"
        # the CREATE TABLE text too: defaults, collations, generated expressions and AUTOINCREMENT
        # are in no pragma, only in the statement SQLite keeps (ALTER TABLE ADD COLUMN edits it)
        SHAPE_TABLES = "SELECT m.name, m.sql FROM sqlite_master AS m WHERE " + USER_TABLES
        # hidden 1 marks virtual-table columns; generated columns (2, 3) are real columns here
        SHAPE_COLUMNS = (
            'SELECT m.name, p.name, p.type, p."notnull", p.pk FROM sqlite_master AS m '
            "JOIN pragma_table_xinfo(m.name) AS p WHERE p.hidden <> 1 AND " + USER_TABLES
        )
        SHAPE_INDEXES = (
            'SELECT m.name, il.name, il."unique", ii.name, s.sql, ii."desc" FROM sqlite_master AS m '
            "JOIN pragma_index_list(m.name) AS il JOIN pragma_index_xinfo(il.name) AS ii "
            "LEFT JOIN sqlite_master AS s ON s.type = 'index' AND s.name = il.name "
            "WHERE ii.key = 1 AND " + USER_TABLES + " ORDER BY m.name, il.name, ii.seqno"
        )
        SHAPE_TRIGGERS = "SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger'"
        # How the rowid alias numbers rows: AUTOINCREMENT never reuses an id; a bare INTEGER PRIMARY
        # KEY reuses the highest after a delete (the queue's FIFO order breaks).
        AUTOINCREMENT = "INTEGER PRIMARY KEY AUTOINCREMENT"
        ROWID = "INTEGER PRIMARY KEY without AUTOINCREMENT (ids reused after a delete)"

        def read_shapes(self, connection: Connection, catalogs: Iterable[str] = ()) -> dict[tuple, tuple[TableName, TableShape]]:
            table_key = self.dialect.table_key
            out: dict[tuple, tuple[TableName, TableShape]] = {}
            clauses: dict[tuple, dict[str, dict[str, str]]] = {}
            for table, sql in connection.exec_driver_sql(self.SHAPE_TABLES):
                name = TableName(table)
                out[table_key(name)] = (name, TableShape())
                clauses[table_key(name)] = column_clauses(sql or "")
            keys: dict[tuple, list[tuple[str, str]]] = {}  # table key -> (column, declared type) of the primary key
            for table, column, type_, notnull, pk in connection.exec_driver_sql(self.SHAPE_COLUMNS):
                key = table_key(TableName(table))
                entry = out.get(key)
                if entry is None:
                    continue
                shape, lower = entry[1], column.lower()
                shape.columns[lower] = (normalise_type(type_ or ""), not notnull and not pk)
                if pk:
                    keys.setdefault(key, []).append((lower, (type_ or "").strip().upper()))
                found = clauses[key].get(lower, {})
                for attribute in ("defaults", "generated", "collations"):
                    if attribute in found:
                        getattr(shape, attribute)[lower] = found[attribute]
            for key, pk in keys.items():
                if len(pk) == 1 and pk[0][1] == "INTEGER":  # the rowid alias (a WITHOUT ROWID table's would not be)
                    column = pk[0][0]
                    autoincrement = "autoincrement" in clauses[key].get(column, {})
                    out[key][1].numbering[column] = self.AUTOINCREMENT if autoincrement else self.ROWID
            found_indexes: dict[tuple, dict] = {}  # (table key, index) -> parts
            for table, index, unique, column, sql, descending in connection.exec_driver_sql(self.SHAPE_INDEXES):
                parts = found_indexes.setdefault((table_key(TableName(table)), index), {"unique": bool(unique), "sql": sql, "columns": []})
                parts["columns"].append((column or "<expression>").lower() + (" desc" if descending else ""))
            for (key, index), parts in found_indexes.items():
                if key in out:
                    predicate = normalise_predicate(where_clause(parts["sql"]))
                    out[key][1].indexes.append(IndexShape(tuple(parts["columns"]), parts["unique"], predicate, index))
            for table, trigger in connection.exec_driver_sql(self.SHAPE_TRIGGERS):
                entry = out.get(table_key(TableName(table)))
                if entry is not None:
                    entry[1].triggers = tuple(sorted((*entry[1].triggers, trigger)))
            return out

        MISSING_INDEX = (
            "Table {table} does not contain index {index}. Adding this index will speed up the process of purging "
            "expired messages from the queue. Run `alembic upgrade head`, or create it as the migrations do."
        )

        def warnings(self, connection: Connection, queues: list[TableName], profile: Profile, purges_expired: bool = False) -> list[str]:
            if not profile.checks_expires_index(purges_expired):
                return []
            indexes = {row[0].casefold() for row in connection.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'index'")}
            warnings = []
            for name in queues:
                index = self.dialect._index(TableSpec(Kind.QUEUE, name))
                if index.casefold() not in indexes:
                    warnings.append(self.MISSING_INDEX.format(table=self.dialect.qualified(name), index=self.dialect.quote(index)))
            return warnings

    # =====================================================================================
    # -- grants (sqltransport-schema grants) ----------------------------------------------
    # =====================================================================================
    class Grants(Dialect.Grants):
        unsupported = (
            "SQLite has no logins or permissions: whoever can open the database file can do everything; "
            "restrict access with file-system permissions instead. Nothing to grant."
        )

    # =====================================================================================
    # -- the data pipeline (engines/pipeline.py): sqlite3 ---------------------------------
    # =====================================================================================
    class Pipeline(Dialect.Pipeline):
        """sqlite3 in autocommit, transactions begun explicitly (BEGIN IMMEDIATE for writes: the read and
        the delete of a partition see the same rows). Times are text; RowVersion is AUTOINCREMENT,
        whose sqlite_sequence entry can be moved past a reserved range."""

        layout = "mssql"
        jdbc_jar, jdbc_driver = "sqlite-jdbc.jar", "org.sqlite.JDBC"
        takes_explicit_order = True
        text_times = True
        FRAGMENTS = {
            **Dialect.Pipeline.FRAGMENTS,
            "text": "TEXT",
            "time": "DATETIME",
            "blob": "BLOB",
            "expires_read": "CAST(Expires AS TEXT)",  # the JDBC driver would read DATETIME as a date only
        }
        RESERVE_MAX = "SELECT coalesce(max({order}), 0) FROM {table}"
        RESERVE_SEQUENCE = "SELECT seq FROM sqlite_sequence WHERE name = @Table COLLATE NOCASE"
        RESERVE_UPDATE = "UPDATE sqlite_sequence SET seq = @Last WHERE name = @Table COLLATE NOCASE"
        RESERVE_INSERT = "INSERT INTO sqlite_sequence (name, seq) VALUES (@Table, @Last)"
        BUSY_TIMEOUT = "PRAGMA busy_timeout = 60000"

        def connect_arguments(self, url: URL, timeout: float) -> tuple[Any, list, dict]:
            """A file opens at once; its writers wait for each other's lock up to 60 s (BUSY_TIMEOUT)."""
            import sqlite3

            return sqlite3, [url.database or ":memory:"], {"isolation_level": None, "timeout": 60, "check_same_thread": False}

        def opened(self, connection: Any) -> None:
            connection.execute(self.BUSY_TIMEOUT)

        def jdbc_url(self, url: URL) -> str:
            return f"jdbc:sqlite:{os.path.abspath(url.database)}"

        def database_key(self, url: URL) -> tuple:
            return (os.path.realpath(url.database or ""),)

        def begin(self, conn: Any, write: bool = False) -> None:
            if not conn.in_transaction:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

        def reserve(self, conn: Any, table: Table, span: int) -> int:
            # The caller holds BEGIN IMMEDIATE: no other writer can insert meanwhile.
            cur = conn.cursor()
            current_max = self.execute(cur, self._table("RESERVE_MAX", table, order=table.order)).fetchone()[0]
            found = self.execute(cur, self.statement("RESERVE_SEQUENCE"), Table=table.name.table).fetchone()
            base = max(current_max, found[0] if found else 0) + 1
            last = base + max(span, 1) - 1
            self.execute(cur, self.statement("RESERVE_UPDATE" if found else "RESERVE_INSERT"), Table=table.name.table, Last=last)
            return base

    # =====================================================================================
    # -- status and retry (engines/live_bus.py) -----------------------------------------
    # =====================================================================================
    class LiveBus(Dialect.LiveBus):
        """Times compare as the runtime's text (NOW); estimates are the transport's peek (the span of
        RowVersion, two probes of the rowid): SQLite keeps no row counts. A retry batch is read
        under the write lock its transaction begins with (BEGIN IMMEDIATE)."""

        supported = True
        order = "RowVersion"
        NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"  # SQLite.NOW
        QUEUE_ARM = (
            "SELECT {index} AS i, count(*) AS depth, count(CASE WHEN Expires < " + NOW + " THEN 1 END) AS expired, "
            "(SELECT Headers FROM {table} ORDER BY {order} LIMIT 1) AS head, NULL AS due FROM {table}"
        )
        QUEUE_ESTIMATE_ARM = (
            "SELECT {index}, (SELECT COALESCE(max({order}) - min({order}) + 1, 0) FROM {table}), NULL, "
            "(SELECT Headers FROM {table} ORDER BY {order} LIMIT 1), NULL"
        )
        DELAYED_ARM = "SELECT {index}, count(*), count(CASE WHEN Due < " + NOW + " THEN 1 END), NULL, min(Due) FROM {table}"
        COUNT_ARM = "SELECT {index}, count(*), NULL, NULL, NULL FROM {table}"
        OUTBOX_ARM = "SELECT {index}, count(*), count(CASE WHEN Dispatched = 0 THEN 1 END), NULL, min(DispatchedAt) FROM {table}"
        # RowVersion is AUTOINCREMENT: sqlite_sequence keeps the last one given, by table name
        HIGH_WATER_ARM = "SELECT {index}, (SELECT seq FROM sqlite_sequence WHERE name = @Name)"

        def high_water_name(self, name: TableName, profile: Profile) -> str:
            return name.table

        TABLES = "SELECT NULL, NULL, name, NULL FROM sqlite_master WHERE type = 'table'"

        @staticmethod
        def _unread(header: str) -> str:
            """Whether the header's JSON string escapes a NUL or a surrogate (operations.ESCAPED_VALUE):
            its text as written (the -> operator keeps the escapes) matched."""
            written = f"(Headers -> '$.\"{header}\"')"
            escapes = f"({written} GLOB '*\\u0000*' OR {written} GLOB '*\\u[dD][89a-fA-F]*')"
            return f"instr(Headers, '\\u') > 0 AND json_type(Headers, '$.\"{header}\"') = 'text' AND {escapes}"

        FAILED_Q_COUNTS = (
            """\
SELECT FailedQ, count(*) AS Messages FROM (
    SELECT CASE WHEN json_valid(Headers) AND NOT ("""
            + _unread("NServiceBus.FailedQ")
            + """) THEN json_extract(Headers, '$."NServiceBus.FailedQ"') END AS FailedQ
    FROM {table}
) AS failed
GROUP BY FailedQ ORDER BY FailedQ"""
        )
        ERROR_BATCH = "SELECT {order}, Id, Headers, Body FROM {table} WHERE {order} > @After ORDER BY {order} LIMIT @BatchSize"
        ACTION_LOG_INSERT = (
            "INSERT INTO {table} (At, Who, Action, Target, Messages) VALUES (" + NOW + ", @Who, @Action, @Target, @Messages)"
        )
        # A transaction holds SQLite's one writer lock from its first write: the copy and the delete
        # of a message run with no other writer between them, each a lookup of the rowid (RowVersion).
        _COPIED = "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body"
        ARCHIVE_KEYS = "SELECT {order}, Id FROM {queue} WHERE Id IN (SELECT value FROM json_each(@Ids))"
        ARCHIVE_MOVES = (
            "INSERT INTO {archive} ("
            + _COPIED
            + ", ArchivedAt, ArchivedWhy, ArchivedBy) SELECT "
            + _COPIED
            + ", "
            + NOW
            + ", @Why, @By FROM {queue} WHERE {order} = @Key",
            "DELETE FROM {queue} WHERE {order} = @Key",
        )
        RESTORE_MOVES = (
            "INSERT INTO {queue} (" + _COPIED + ") SELECT " + _COPIED + " FROM {archive} WHERE RowVersion = @Key",
            "DELETE FROM {archive} WHERE RowVersion = @Key",
        )
        ARCHIVE_PURGE = (
            "DELETE FROM {archive} WHERE RowVersion IN (SELECT RowVersion FROM {archive} "
            "WHERE ArchivedAt < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || @Seconds || ' seconds') ORDER BY RowVersion LIMIT @BatchSize)"
        )

        def header_value(self, header: str) -> str:
            """json_extract's value; where it holds an escape no text holds, ESCAPED_VALUE and the JSON string as written."""
            return (
                f"CASE WHEN NOT json_valid(Headers) THEN NULL WHEN {self._unread(header)} "
                f"THEN char(1) || (Headers -> '$.\"{header}\"') ELSE json_extract(Headers, '$.\"{header}\"') END"
            )

        ERROR_SCAN = "SELECT {order}, Id, Headers, NULL FROM {table} WHERE {order} > @After ORDER BY {order} LIMIT @BatchSize"
