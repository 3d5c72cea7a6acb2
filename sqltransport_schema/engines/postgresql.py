"""PostgreSQL: the PostgreSQL transport's DDL (8.1+), reproduced as it ships.

Columns stay unquoted, as the transport writes them, so PostgreSQL folds them to
lower case; tables and schemas are always double-quoted. {table} is the quoted
qualified name, {table_literal} that text as a string literal.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import uuid
from datetime import timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import quote as urlquote

from sqlalchemy.dialects.postgresql.base import RESERVED_WORDS

from ..revisions import BLUEPRINT_TABLE
from ..schema import Correlation, Kind, SchemaName, TableName, TableSpec
from ..shapes import Column, IndexShape, TableShape, normalise_predicate, normalise_type, shape_columns
from ..statements import Statement, parameters_of
from ..versions import FEATURE_SINCE, Profile
from .base import Dialect, LockHolder
from .online import OnlineNames

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sqlalchemy.engine import URL, Connection

    from ..grants import GrantPlan
    from .pipeline import Table

MAX_TABLE_BYTES = 55  # the transport's own limit: room for the suffixes of derived names
MAX_IDENTIFIER_BYTES = 63
_BARE_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


class PostgreSQL(Dialect):
    name = "postgresql"
    sqlalchemy_name = "postgresql"
    drivers = ("psycopg", "psycopg2")
    default_schema = "public"
    ddl_savepoints = True

    # =====================================================================================
    # -- identifiers and names ------------------------------------------------------------
    # =====================================================================================
    def quote(self, identifier: str) -> str:
        return '"' + identifier.replace('"', '""') + '"'

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        schema = name.schema if name.schema is not None else self.default_schema
        return f"{self.quote(schema)}.{self.quote(name.table)}"

    def table_key(self, name: TableName) -> tuple:
        # The catalog is the database a connection opens; it does not qualify names.
        return (name.schema if name.schema is not None else self.default_schema, name.table)

    index_suffixes = {"delayed": ("_Due",)}

    def name_problems(self, name: TableName) -> list[tuple[str, str]]:
        problems = []
        size = len(name.table.encode("utf-8"))
        if size > MAX_TABLE_BYTES:
            problems.append(("table", f"is {size} bytes in UTF-8; PostgreSQL transport table names hold at most {MAX_TABLE_BYTES}"))
        if name.schema is not None and len(name.schema.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
            problems.append(("schema", f"is longer than PostgreSQL's {MAX_IDENTIFIER_BYTES}-byte identifier limit"))
        return problems

    # Every lock a transaction takes lives in one shared table sized for
    # max_locks_per_transaction * (max_connections + max_prepared_transactions) entries (the server
    # adds room for its background processes, so this is the safe side of its size).
    LOCK_CAPACITY = (
        "SELECT current_setting('max_locks_per_transaction')::int"
        " * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int)"
    )
    LOCK_TABLE_FULL = "53200"  # out_of_memory: "out of shared memory", hint max_locks_per_transaction
    LOCK_TABLE_SETTING = "max_locks_per_transaction"

    def lock_table_capacity(self, connection: Connection) -> int | None:
        return connection.exec_driver_sql(self.LOCK_CAPACITY).scalar()

    def lock_table_full(self, error: BaseException) -> str | None:
        if self.LOCK_TABLE_FULL not in (getattr(error, "sqlstate", None), getattr(error, "pgcode", None)):
            return None
        return self.LOCK_TABLE_SETTING

    # Bounded lock waits (docs/live-migrations.md): every statement of a migration gives up
    # waiting for a lock after lock_timeout (SQLSTATE 55P03, lock_not_available), so an ALTER
    # waiting behind a reader never queues the senders behind itself for longer than that.
    # set_config(..., false) is SET at session level, with the value bound.
    SET_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', @Timeout, false)"
    LOCK_NOT_AVAILABLE = "55P03"
    # A step that alters an existing table first takes its lock in short tries (migrate/locks.py,
    # take_lock): each try waits at most LOCK_TRY_MS in the table's lock queue, in a savepoint, so
    # senders queue behind a blocked migration for that long, not for the whole lock_timeout.
    SET_LOCAL_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', @Timeout, true)"
    # One migration of a database at a time (two `alembic upgrade` runs at once, from two deploys):
    # a session-level advisory lock, held across the transactions of an online rewrite, waited for
    # like any lock (lock_timeout, then the whole run is retried).
    ONE_MIGRATION_AT_A_TIME = "SELECT pg_advisory_lock(@Key)"
    MIGRATION_LOCK_NAME = "sqltransport-schema: alembic upgrade and downgrade"
    LOCK_TABLE = """\
DO {tag}
BEGIN
    IF to_regclass({table_literal}) IS NOT NULL THEN
        LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;
    END IF;
END
{tag}"""
    LOCK_TRY_MS = 50
    # Who holds the table (read from a second connection once the migration gave up its wait).
    LOCK_HOLDERS = """\
SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.state, ''), a.query_start, coalesce(a.query, ''), l.mode,
    extract(epoch FROM clock_timestamp() - a.xact_start)::float8
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.granted AND l.relation = to_regclass(@Table) AND l.pid <> pg_backend_pid()
ORDER BY a.xact_start NULLS LAST, a.pid"""

    @staticmethod
    def lock_timeout_setting(milliseconds: int) -> str:
        """A lock_timeout value as PostgreSQL (and a DBA) reads it: '2s', '500ms', '10min'."""
        if milliseconds and milliseconds % 60000 == 0:
            return f"{milliseconds // 60000}min"
        if milliseconds and milliseconds % 1000 == 0:
            return f"{milliseconds // 1000}s"
        return f"{milliseconds}ms"

    def _run(self, connection: Connection, template: str, **values: Any) -> Any:
        return self.execute(connection, Statement("migration", template, {}, parameters_of(template)), values)

    def set_lock_timeout(self, connection: Connection, milliseconds: int) -> None:
        self._run(connection, self.SET_LOCK_TIMEOUT, Timeout=self.lock_timeout_setting(milliseconds))

    def one_migration_at_a_time(self, connection: Connection) -> None:
        self._run(connection, self.ONE_MIGRATION_AT_A_TIME, Key=self.advisory_lock_id(self.MIGRATION_LOCK_NAME))

    def try_lock(self, connection: Connection, name: TableName, milliseconds: int) -> None:
        self.set_transaction_lock_timeout(connection, milliseconds)
        fields = self._fields(TableSpec(Kind.QUEUE, name))
        statement = self.LOCK_TABLE.format(tag=self.dollar_tag(*fields.values()), **fields)
        connection.execution_options(no_parameters=True).exec_driver_sql(statement)

    def set_transaction_lock_timeout(self, connection: Connection, milliseconds: int) -> None:
        self._run(connection, self.SET_LOCAL_LOCK_TIMEOUT, Timeout=self.lock_timeout_setting(milliseconds))

    def lock_timed_out(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == self.LOCK_NOT_AVAILABLE or getattr(error, "pgcode", None) == self.LOCK_NOT_AVAILABLE

    UNDEFINED_TABLE = "42P01"  # SQLSTATE undefined_table

    def undefined_table(self, error: BaseException) -> bool:
        return self.UNDEFINED_TABLE in (getattr(error, "sqlstate", None), getattr(error, "pgcode", None))

    def lock_holders(self, connection: Connection, name: TableName) -> list[LockHolder]:
        return [LockHolder(*row) for row in self._run(connection, self.LOCK_HOLDERS, Table=self.qualified(name))]

    def body_string_rewrite(self, profile: Profile) -> str | None:
        if not profile.postgresql_body_string:
            return None
        return "BodyString is a STORED generated column: adding it writes every row anew (a table rewrite)"

    def correlation_index_build(self) -> str | None:
        return "CREATE UNIQUE INDEX (not CONCURRENTLY, as SQL persistence's installer runs it) holds writers off for the whole build"

    def seq_type_rewrite(self, old: str, new: str) -> str | None:
        if self.SEQ_TYPES[old] == self.SEQ_TYPES[new]:
            return None
        return f"Seq {self.SEQ_TYPES[old]} -> {self.SEQ_TYPES[new]} rewrites every row and rebuilds the table's indexes"

    def unsupported(self, profile: Profile) -> str | None:
        if not profile.postgresql:
            return (
                f"the PostgreSQL transport starts at version {FEATURE_SINCE['postgresql']}; "
                f"transport version {profile.version} has no PostgreSQL layout"
            )
        return None

    def body_string_unsupported(self, profile: Profile) -> str | None:
        if profile.postgresql and not profile.postgresql_body_string:
            return (
                f"the PostgreSQL transport's BodyString script of {profile.version} never adds the column "
                "(it does from 8.1.13 and 9.0.2 on)"
            )
        return None

    @staticmethod
    def has_body_string(spec: TableSpec, profile: Profile) -> bool:
        """Whether the release's installer gives this queue or delayed table a BodyString column."""
        return spec.body_string and profile.postgresql_body_string

    # -- helpers -------------------------------------------------------------------------
    @staticmethod
    def dollar_tag(*bodies: str, first: str = "$sqlts$") -> str:
        """A dollar-quote tag that occurs in none of the texts it will enclose (`first` if it can)."""
        n = 0
        while True:
            tag = first if n == 0 else f"$sqlts{n}$"
            if not any(tag in body for body in bodies):
                return tag
            n += 1

    def _fields(self, spec: TableSpec) -> dict:
        table = self.qualified(spec.name)
        return {"table": table, "table_literal": self.literal(table)}

    def bare(self, identifier: str) -> str:
        """The identifier unquoted where that names the same object (the transport pastes some
        names raw, which folds them to lower case); quoted where a bare name would not."""
        if _BARE_IDENTIFIER.fullmatch(identifier) and identifier not in RESERVED_WORDS:
            return identifier
        return self.quote(identifier)

    @staticmethod
    def advisory_lock_id(qualified: str) -> int:
        """The transport's advisory lock id for a table: the first 8 bytes of SHA-256 over the
        UTF-16LE qualified name, as a little-endian signed 64-bit integer."""
        return int.from_bytes(hashlib.sha256(qualified.encode("utf-16-le")).digest()[:8], "little", signed=True)

    # =====================================================================================
    # -- columns of each table kind, and the shapes our DDL gives them (check) ------------
    # =====================================================================================
    # Types as format_type() prints them. Seq's type follows the topology's seq_type (SEQ_TYPES).
    COLUMNS = {
        Kind.QUEUE: (
            Column("Id", "uuid", False),
            Column("Expires", "timestamp without time zone", True),
            Column("Headers", "text", False),
            Column("Body", "bytea", True),
            Column("Seq", None, False),
        ),
        Kind.DELAYED: (
            Column("Id", "uuid", False),
            Column("Headers", "text", False),
            Column("Body", "bytea", True),
            Column("Due", "timestamp with time zone", False),
        ),
        Kind.SUBSCRIPTIONS: (
            Column("QueueAddress", "character varying(200)", False),
            Column("Endpoint", "character varying(200)", False),
            Column("Topic", "character varying(200)", False),
        ),
    }
    SEQ_TYPES = {"serial": "integer", "bigserial": "bigint"}
    BODY_STRING_COLUMN = ("text", True)  # GENERATED ALWAYS AS (encode(Body, 'escape')) STORED

    # -- expected shapes (check; the live side is Catalog.read_shapes) -------------------
    def expected_shape(self, spec: TableSpec, profile: Profile) -> TableShape:
        if spec.kind is Kind.QUEUE:
            columns = shape_columns(self.COLUMNS[Kind.QUEUE], seq=self.SEQ_TYPES[spec.seq_type])
            if self.has_body_string(spec, profile):
                columns["bodystring"] = self.BODY_STRING_COLUMN
            indexes = [IndexShape(("id",), unique=True), IndexShape(("seq",), unique=True)]
        elif spec.kind is Kind.DELAYED:
            columns = shape_columns(self.COLUMNS[Kind.DELAYED])
            if self.has_body_string(spec, profile):
                columns["bodystring"] = self.BODY_STRING_COLUMN
            due = self.index_names(spec)[0].table
            indexes = [IndexShape(("id",), unique=True), IndexShape(("due",), name=due)]
        elif spec.kind is Kind.SAGA:
            columns = dict(self.SAGA_SHAPE_COLUMNS)
            indexes = [IndexShape(("id",), unique=True)]
            for c in spec.correlations:
                column = self.correlation_column(c.name).lower()
                columns[column] = (self.SHAPE_CORRELATION_TYPES[c.type], True)
                indexes.append(IndexShape((column,), unique=True, name=self.correlation_index(spec, c.name)))
        else:
            columns = shape_columns(self.COLUMNS[Kind.SUBSCRIPTIONS])
            indexes = [IndexShape(("endpoint", "topic"), unique=True)]
        return TableShape(columns, indexes)

    # =====================================================================================
    # -- DDL ------------------------------------------------------------------------------
    # =====================================================================================
    CREATE_QUEUE = (
        "CREATE TABLE IF NOT EXISTS {table} (Id uuid NOT NULL PRIMARY KEY, Expires TIMESTAMP, "
        "Headers TEXT NOT NULL, Body BYTEA, Seq {seq_type} NOT NULL UNIQUE)"
    )
    CREATE_DELAYED = (
        "CREATE TABLE IF NOT EXISTS {table} (Id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY, "
        "Headers text NOT NULL, Body bytea, Due timestamptz NOT NULL) WITH (fillfactor=100)"
    )
    CREATE_DUE_INDEX = "CREATE INDEX IF NOT EXISTS {index} on {table}(Due)"
    CREATE_SUBSCRIPTIONS = (
        "CREATE TABLE IF NOT EXISTS {table} (QueueAddress VARCHAR(200) NOT NULL, Endpoint VARCHAR(200) NOT NULL, "
        "Topic VARCHAR(200) NOT NULL, PRIMARY KEY (Endpoint, Topic)) WITH (fillfactor=100)"
    )
    DROP_GUARDED = """\
DO {tag}
BEGIN
    -- nested, not AND: PL/pgSQL plans an expression whole, and the table may be gone already
    IF to_regclass({table_literal}) IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM {table}) THEN
            RAISE EXCEPTION USING MESSAGE = {message}, ERRCODE = 'object_in_use';
        END IF;
    END IF;
END
{tag}"""
    DROP_TABLE = "DROP TABLE IF EXISTS {table}"
    # A dropped queue's subscription rows: those whose address's table part (before the first '@')
    # is the queue and whose schema part (up to the next '@') names its schema; a catalog part does
    # not qualify names here (transport-facts §5, §7).
    DELETE_SUBSCRIBERS_OF = (
        "DELETE FROM {subscriptions} WHERE split_part(QueueAddress, '@', 1) = @Table AND split_part(QueueAddress, '@', 2) = ANY(@Schemas)"
    )
    HAS_TABLE = "SELECT to_regclass(@Name) IS NOT NULL"
    SCRIPT_IF_TABLE_EXISTS = """\
DO {tag}
BEGIN
    IF to_regclass({name}) IS NOT NULL THEN
        {statement};
    END IF;
END
{tag}"""
    # The transport's AddMessageBodyStringColumn as 8.1.13 and 9.0.2+ ship it (one anonymous
    # block, run after the queue's creation): it checks the table and the column, takes a
    # transaction-scoped advisory lock so concurrent installers add the column once, checks the
    # column again and adds it. {schema_literal}/{name_literal} are the raw schema and table as
    # string literals, {schema_bare} the schema unquoted where that means the same schema, {name}
    # the quoted table, {lock_id} advisory_lock_id() of the qualified name.
    ADD_BODY_STRING = """\
DO {tag}
BEGIN

IF NOT EXISTS (
   SELECT FROM information_schema.tables
   WHERE  table_schema = {schema_literal}
   AND    table_name   = {name_literal}
   )
THEN
    RETURN;
END IF;

IF EXISTS (
    SELECT FROM information_schema.columns
    WHERE  table_schema = {schema_literal}
    AND table_name={name_literal}
    AND column_name='bodystring'
    )
THEN
    RETURN;
END IF;

PERFORM pg_advisory_xact_lock('{lock_id}');

IF EXISTS (
    SELECT FROM information_schema.columns
    WHERE  table_schema = {schema_literal}
    AND table_name={name_literal}
    AND column_name='bodystring'
    )
THEN

    RETURN;
END IF;

ALTER TABLE {schema_bare}.{name}
ADD BodyString text GENERATED ALWAYS AS (encode(Body, 'escape')) STORED;

END
{tag}"""
    DROP_BODY_STRING = "ALTER TABLE {table} DROP COLUMN IF EXISTS BodyString"
    SEQ_COLUMN_TYPE = "ALTER TABLE {table} ALTER COLUMN Seq TYPE {column_type}"
    SEQ_SEQUENCE_TYPE = """\
DO {tag}
BEGIN
    EXECUTE format('ALTER SEQUENCE %s AS {column_type}', pg_get_serial_sequence({table_literal}, 'seq'));
END
{tag}"""
    RENAME_INDEX = "ALTER INDEX {index} RENAME TO {new}"
    CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"
    DROP_SCHEMA_IF_EMPTY = """\
DO {tag}
BEGIN
    DROP SCHEMA IF EXISTS {schema};
EXCEPTION WHEN dependent_objects_still_exist THEN
    NULL;
END
{tag}"""

    def create_queue(self, spec: TableSpec, profile: Profile) -> list[str]:
        batches = [self.CREATE_QUEUE.format(seq_type=spec.seq_type, **self._fields(spec))]
        if self.has_body_string(spec, profile):
            batches += self.add_body_string(spec, profile)
        return batches

    def add_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        schema = spec.name.schema if spec.name.schema is not None else self.default_schema
        fields = {
            "schema_literal": self.literal(schema),
            "name_literal": self.literal(spec.name.table),
            "schema_bare": self.bare(schema),
            "name": self.quote(spec.name.table),
        }
        tag = self.dollar_tag(*fields.values(), first="$$")
        return [self.ADD_BODY_STRING.format(tag=tag, lock_id=self.advisory_lock_id(self.qualified(spec.name)), **fields)]

    def drop_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.DROP_BODY_STRING.format(**self._fields(spec))]

    def create_delayed(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec)
        batches = [
            self.CREATE_DELAYED.format(**fields),
            self.CREATE_DUE_INDEX.format(index=self.quote(self.index_names(spec)[0].table), **fields),
        ]
        if self.has_body_string(spec, profile):  # the transport's option covers the delayed table too
            batches += self.add_body_string(spec, profile)
        return batches

    def create_subscriptions(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.CREATE_SUBSCRIPTIONS.format(**self._fields(spec))]

    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        fields = self._fields(spec)
        batches = []
        if not discard_messages:
            message = self.literal(self.refusal(spec))
            tag = self.dollar_tag(fields["table"], fields["table_literal"], message)
            batches.append(self.DROP_GUARDED.format(tag=tag, message=message, **fields))
        batches.append(self.DROP_TABLE.format(**fields))
        return batches

    def script_value(self, value: Any) -> str:
        if isinstance(value, list):  # an array, as the driver binds a list
            return "ARRAY[" + ", ".join(self.literal(item) for item in value) + "]::text[]"
        return super().script_value(value)

    def script_delete_subscribers_of(self, subscriptions: TableName, queue: TableName) -> list[str]:
        name = self.literal(self.qualified(subscriptions))
        statements = super().script_delete_subscribers_of(subscriptions, queue)
        return [self.SCRIPT_IF_TABLE_EXISTS.format(tag=self.dollar_tag(s, name), name=name, statement=s) for s in statements]

    def change_seq_type(self, spec: TableSpec, old: str, new: str) -> list[str]:
        column_type = self.SEQ_TYPES[new]
        fields = self._fields(spec)
        tag = self.dollar_tag(fields["table_literal"])
        return [
            self.SEQ_COLUMN_TYPE.format(column_type=column_type, **fields),
            self.SEQ_SEQUENCE_TYPE.format(column_type=column_type, tag=tag, **fields),
        ]

    def rename_index(self, table: TableName, old: str, new: str) -> list[str] | None:
        return [self.RENAME_INDEX.format(index=self.qualified(TableName(old, table.schema)), new=self.quote(new))]

    def create_schema(self, schema: SchemaName) -> list[str]:
        if schema.schema == self.default_schema:
            return []
        return [self.CREATE_SCHEMA.format(schema=self.quote(schema.schema))]

    def drop_schema(self, schema: SchemaName) -> list[str]:
        if schema.schema == self.default_schema:
            return []
        quoted = self.quote(schema.schema)
        return [self.DROP_SCHEMA_IF_EMPTY.format(schema=quoted, tag=self.dollar_tag(quoted))]

    # =====================================================================================
    # -- runtime statements (transport-facts §7) ------------------------------------------
    # =====================================================================================
    # {table} is the queue, {delayed} the endpoint's delayed table, {subscriptions} the
    # subscription table; @Name are parameters. Timestamps follow the transport: UTC as
    # timestamp without time zone (Due is timestamptz: store and move must share a
    # session time zone, as the transport's own endpoints do).
    SEND = (
        "INSERT INTO {table} (Id, Expires, Headers, Body) VALUES (@Id, "
        "(now() AT TIME ZONE 'UTC') + (@TimeToBeReceivedMs || ' ms')::INTERVAL, @Headers, @Body)"
    )
    # Do not rewrite with USING: LIMIT 1 could then return several rows.
    RECEIVE = (
        "DELETE FROM {table} rs WHERE rs.id = (SELECT id FROM {table} ORDER BY Seq LIMIT 1 FOR UPDATE SKIP LOCKED) "
        "RETURNING rs.id, CASE WHEN Expires IS NULL THEN 0 WHEN Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1 END Expired, "
        "rs.Headers, rs.Body"
    )
    # Beyond the transport: the batch is locked once (ARRAY(...) is an init plan, run once)
    # and its rows deleted by their tuple ids (a TID scan, no second walk of the primary key
    # per row), so no row can come back twice; our lock keeps each tuple where it is until
    # the statement ends. Seq restores FIFO order on the client.
    RECEIVE_BATCH = (
        "DELETE FROM {table} rs WHERE rs.ctid = ANY(ARRAY(SELECT ctid FROM {table} ORDER BY Seq LIMIT @BatchSize FOR UPDATE SKIP LOCKED)) "
        "RETURNING rs.id, CASE WHEN rs.Expires IS NULL THEN 0 WHEN rs.Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1 END Expired, "
        "rs.Headers, rs.Body, rs.Seq"
    )
    # Beyond the transport, for the pump's batches (docs/runtime.md): the batch is locked, not
    # taken; the handled messages are deleted by their Seq in one statement before the one commit,
    # and one whose handler failed is left where it is, so the commit puts it back at the head of
    # the queue.
    # SKIP LOCKED passes over the rows a competing batch holds, as RECEIVE does.
    LOCK_BATCH = (
        "SELECT id, CASE WHEN Expires IS NULL THEN 0 WHEN Expires > now() AT TIME ZONE 'UTC' THEN 0 ELSE 1 END Expired, "
        "Headers, Body, Seq FROM {table} ORDER BY Seq LIMIT @BatchSize FOR UPDATE SKIP LOCKED"
    )
    DELETE_LOCKED = "DELETE FROM {table} WHERE Seq = ANY(@Orders)"
    # One name for every message's savepoint: a new one hides the last, ROLLBACK TO goes back to
    # the newest, and all are released by the commit.
    SAVEPOINT = "SAVEPOINT sqltransport_message"
    ROLLBACK_TO_SAVEPOINT = "ROLLBACK TO SAVEPOINT sqltransport_message"
    PEEK = (
        "SELECT COALESCE(cast((SELECT seq FROM {table} ORDER BY seq DESC LIMIT 1 FOR UPDATE SKIP LOCKED) - "
        "(SELECT seq FROM {table} ORDER BY seq ASC LIMIT 1 FOR UPDATE SKIP LOCKED) + 1 AS int), 0)"
    )
    PEEK_UNLOCKED = "SELECT COALESCE(cast(max(seq) - min(seq) + 1 AS int), 0) Id FROM {table}"  # 8.1.0-8.1.4
    PURGE_EXPIRED = (
        "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE Expires < now() AT TIME ZONE 'UTC' "
        "LIMIT @BatchSize FOR UPDATE SKIP LOCKED)"
    )
    PURGE_ALL = "DELETE FROM {table}"
    # The delay arrives in the five parts of a .NET TimeSpan (days, hours, minutes, seconds,
    # milliseconds), each an interval added to now.
    STORE_DELAYED = """\
WITH params (DueDate) as (
   values (timestamptz (now() AT TIME ZONE 'UTC')
      + (@DueAfterDays || ' days ')::INTERVAL + (@DueAfterHours || ' hours ')::INTERVAL
      + (@DueAfterMinutes || ' mins ')::INTERVAL + (@DueAfterSeconds || ' s ')::INTERVAL
      + (@DueAfterMilliseconds || ' ms')::INTERVAL)
)
INSERT INTO {delayed} (Headers, Body, Due)
SELECT @Headers, @Body, DueDate
FROM params"""
    # No lock clause on the move: a competing mover blocks on the rows another one is deleting
    # and finds them gone once that commits, so each message is moved once.
    MOVE_DUE_DELAYED = (
        "WITH message as (DELETE FROM {delayed} WHERE id in (SELECT id from {delayed} WHERE {delayed}.Due < now() AT TIME ZONE 'UTC' "
        "LIMIT @BatchSize) RETURNING id, headers, body) "
        "INSERT into {table} (id, expires, headers, body) SELECT id, NULL, headers, body FROM message"
    )
    # The transport runs it with the move, as one command; SKIP LOCKED passes over a row a
    # competing mover is deleting.
    NEXT_DUE = "SELECT now() AT TIME ZONE 'UTC' as UtcNow, Due as NextDue FROM {delayed} ORDER BY Due LIMIT 1 FOR UPDATE SKIP LOCKED"
    SUBSCRIBE = (
        "INSERT INTO {subscriptions} (QueueAddress, Topic, Endpoint) VALUES (@QueueAddress, @Topic, @Endpoint) "
        "ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = @QueueAddress"
    )
    UNSUBSCRIBE = "DELETE FROM {subscriptions} WHERE Endpoint = @Endpoint AND Topic = @Topic"
    FIND_SUBSCRIBERS = "SELECT DISTINCT QueueAddress FROM {subscriptions} WHERE Topic IN ({topics})"
    TOPIC_PARAMETER = "Topic_{i}"
    RESULT_COLUMNS = {**Dialect.RESULT_COLUMNS, "next_due": ("UtcNow", "NextDue")}

    def runtime_statements(self, profile: Profile, queue: TableName, **options) -> dict[str, Statement]:
        """Dialect's set, with peek in the form of the release (8.1.0-8.1.4 without locks)."""
        out = super().runtime_statements(profile, queue, **options)
        if not profile.postgresql_peek_locked:
            out["peek"] = dataclasses.replace(out["peek"], template=self.PEEK_UNLOCKED)
        return out

    def list_parameter(self, values: list) -> Any:
        """An array: the driver binds a list as one (@Orders of delete_locked)."""
        return list(values)

    def runtime_cursor(self, dbapi_connection: Any) -> Any:
        """On psycopg 3, results come in binary (a body leaves the server as its bytes, not as hex
        text twice its size to encode and decode) and message ids as the text the API returns."""
        if type(dbapi_connection).__module__.partition(".")[0] != "psycopg":  # psycopg2: as it comes
            return dbapi_connection.cursor()
        cursor = dbapi_connection.cursor(binary=True)
        cursor.adapters.register_loader("uuid", _uuid_text_loader())  # this cursor only
        return cursor

    # =====================================================================================
    # -- sagas ----------------------------------------------------------------------------
    # =====================================================================================
    # -- saga tables (upstream-conformance §7): quoted, mixed-case columns ---------------------
    # As SQL persistence's installer leaves them: the version columns nullable, the primary key
    # a table constraint (PostgreSQL names it <table>_pkey), one unique btree index per
    # correlation column under the installer's name, so its own run finds it and adds none.
    CORRELATION_TYPES = {"string": "character varying(200)", "int": "integer", "guid": "uuid", "datetime": "timestamp"}
    CREATE_SAGA = """\
CREATE TABLE IF NOT EXISTS {table} (
    "Id" uuid NOT NULL,
    "Metadata" text NOT NULL,
    "Data" jsonb NOT NULL,
    "PersistenceVersion" character varying(23),
    "SagaTypeVersion" character varying(23),
    "Concurrency" int NOT NULL,
    PRIMARY KEY ("Id")
)"""
    ADD_CORRELATION = "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {column_type}"
    # The installer's check of an existing column (information_schema's data_type); it stops there.
    VERIFY_CORRELATION_TYPE = """\
DO {tag}
DECLARE
    found text;
BEGIN
    SELECT data_type INTO found FROM information_schema.columns
    WHERE table_schema = {schema_literal} AND table_name = {table_literal} AND column_name = {column_literal};
    IF found <> {expected} THEN
        RAISE EXCEPTION USING MESSAGE = {message_head} || found || {message_tail}, ERRCODE = 'datatype_mismatch';
    END IF;
END
{tag}"""
    # Unique indexes treat NULLs as distinct: sagas without a value never collide.
    CREATE_CORRELATION_INDEX = "CREATE UNIQUE INDEX IF NOT EXISTS {index_name} ON {table} USING btree ({column} ASC)"
    BACKFILL_GUARD = """\
DO {tag}
BEGIN
    IF EXISTS (SELECT 1 FROM {table} WHERE {require} IS NULL) THEN
        RAISE EXCEPTION USING MESSAGE = {message}, ERRCODE = 'not_null_violation';
    END IF;
END
{tag}"""
    DROP_CORRELATION_INDEX = "DROP INDEX IF EXISTS {index}"
    DROP_CORRELATION = "ALTER TABLE {table} DROP COLUMN IF EXISTS {column}"
    SAGA_GET_BY_ID = """\
SELECT "Id", "SagaTypeVersion", "Concurrency", "Metadata", "Data"
FROM {table}
WHERE "Id" = @Id
FOR UPDATE"""
    SAGA_FIND = """\
SELECT "Id", "SagaTypeVersion", "Concurrency", "Metadata", "Data"
FROM {table}
WHERE {correlation} = @propertyValue
FOR UPDATE"""
    SAGA_FIND_BY_TRANSITIONAL = """\
SELECT "Id", "SagaTypeVersion", "Concurrency", "Metadata", "Data"
FROM {table}
WHERE {transitional} = @TransitionalCorrelationId
FOR UPDATE"""
    SAGA_INSERT = """\
INSERT INTO {table} ("Id", "Metadata", "Data", "PersistenceVersion", "SagaTypeVersion", "Concurrency"{columns})
VALUES (@Id, @Metadata, @Data, @PersistenceVersion, @SagaTypeVersion, 1{values})"""
    SAGA_UPDATE = """\
UPDATE {table}
SET "Data" = @Data, "PersistenceVersion" = @PersistenceVersion, "SagaTypeVersion" = @SagaTypeVersion,
    "Concurrency" = @Concurrency + 1{set_transitional}
WHERE "Id" = @Id AND "Concurrency" = @Concurrency"""
    SAGA_COMPLETE = """\
DELETE FROM {table}
WHERE "Id" = @Id AND "Concurrency" = @Concurrency"""
    SAGA_SHAPE_COLUMNS = {
        "id": ("uuid", False),
        "metadata": ("text", False),
        "data": ("jsonb", False),
        "persistenceversion": ("character varying(23)", True),
        "sagatypeversion": ("character varying(23)", True),
        "concurrency": ("integer", False),
    }
    # information_schema.columns.data_type of each correlation type (the installer's check reads it)
    SHAPE_CORRELATION_TYPES = {
        "string": "character varying(200)",
        "int": "integer",
        "guid": "uuid",
        "datetime": "timestamp without time zone",
    }
    DATA_TYPES = {"string": "character varying", "int": "integer", "guid": "uuid", "datetime": "timestamp without time zone"}
    MAX_SAGA_PREFIX = 20  # the installer refuses a longer table prefix
    MAX_SAGA_SUFFIX = 43  # the script generator refuses a longer table suffix

    def correlation_index(self, spec: TableSpec, prop: str) -> str:
        """<table prefix>_i_<SHA-1 of '<suffix>/<property>' in UTF-8, 40 upper-case hex digits>,
        as SQL persistence names it (the prefix as configured: a longer one is refused)."""
        digest = hashlib.sha1(f"{self.saga_suffix(spec)}/{prop}".encode()).hexdigest().upper()
        return f"{spec.saga_prefix or ''}_i_{digest}"

    def saga_index_names(self, spec: TableSpec) -> list[TableName]:
        return [TableName(self.correlation_index(spec, c.name), spec.name.schema) for c in spec.correlations]

    def saga_name_problems(self, spec: TableSpec) -> list[str]:
        problems = []
        prefix, suffix = spec.saga_prefix or "", self.saga_suffix(spec)
        if len(prefix) > self.MAX_SAGA_PREFIX:
            problems.append(
                f"table prefix {prefix!r} is {len(prefix)} characters long; SQL persistence refuses a PostgreSQL "
                f"table prefix over {self.MAX_SAGA_PREFIX} (set table_prefix)"
            )
        if len(suffix) > self.MAX_SAGA_SUFFIX:
            problems.append(
                f"table suffix {suffix!r} is {len(suffix)} characters long; SQL persistence refuses a PostgreSQL "
                f"saga table suffix over {self.MAX_SAGA_SUFFIX} (set table_suffix)"
            )
        size = len(spec.name.table.encode("utf-8"))
        if size > MAX_IDENTIFIER_BYTES:
            problems.append(f"table name is {size} bytes in UTF-8; PostgreSQL names hold at most {MAX_IDENTIFIER_BYTES}")
        for c in spec.correlations:
            for what, value in (("column", self.correlation_column(c.name)), ("index", self.correlation_index(spec, c.name))):
                if len(value.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
                    problems.append(f"{what} {value!r} is longer than PostgreSQL's {MAX_IDENTIFIER_BYTES}-byte identifier limit")
        return problems

    def _saga_fields(self, spec: TableSpec, correlation: Correlation | None = None) -> dict:
        fields = {"table": self.qualified(spec.name)}
        if correlation is not None:
            column = self.correlation_column(correlation.name)
            index = TableName(self.correlation_index(spec, correlation.name), spec.name.schema)
            fields.update(
                column=self.quote(column),
                column_literal=self.literal(column),
                column_type=self.CORRELATION_TYPES[correlation.type],
                index=self.qualified(index),
                index_name=self.quote(index.table),
                schema_literal=self.literal(spec.name.schema if spec.name.schema is not None else self.default_schema),
                table_literal=self.literal(spec.name.table),
                expected=self.literal(self.DATA_TYPES[correlation.type]),
            )
        return fields

    def add_saga_correlation(self, spec: TableSpec, correlation: Correlation) -> list[str]:
        fields = self._saga_fields(spec, correlation)
        head, _, tail = self.wrong_type_message(spec, correlation, self.DATA_TYPES[correlation.type]).partition("{found}")
        verify = {**fields, "message_head": self.literal(head), "message_tail": self.literal(tail)}
        verify["tag"] = self.dollar_tag(*verify.values())
        return [
            self.ADD_CORRELATION.format(**fields),
            self.VERIFY_CORRELATION_TYPE.format(**verify),
            self.CREATE_CORRELATION_INDEX.format(**fields),
        ]

    def drop_saga_correlation(self, spec: TableSpec, correlation: Correlation, require: Correlation | None) -> list[str]:
        fields = self._saga_fields(spec, correlation)
        batches = []
        if require is not None:
            message = self.literal(self.backfill_refusal(spec, correlation, require))
            required = self.quote(self.correlation_column(require.name))
            tag = self.dollar_tag(fields["table"], required, message)
            batches.append(self.BACKFILL_GUARD.format(tag=tag, require=required, message=message, table=fields["table"]))
        return batches + [self.DROP_CORRELATION_INDEX.format(**fields), self.DROP_CORRELATION.format(**fields)]

    # =====================================================================================
    # -- catalog reads (check, adopt, autogenerate) ---------------------------------------
    # =====================================================================================
    class Catalog(Dialect.Catalog):
        """Live shapes from three bulk queries over pg_catalog (tables, columns, indexes)."""

        USER_SCHEMAS = "n.nspname NOT IN ('information_schema') AND n.nspname !~ '^pg_'"
        SHAPE_TABLES = (
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND " + USER_SCHEMAS
        )
        SHAPE_COLUMNS = (
            "SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped AND " + USER_SCHEMAS
        )
        SHAPE_INDEXES = (
            "SELECT n.nspname, t.relname, i.relname, ix.indisunique, pg_get_expr(ix.indpred, ix.indrelid), "
            "ARRAY(SELECT pg_get_indexdef(ix.indexrelid, k, true) FROM generate_series(1, ix.indnkeyatts) AS k) "
            "FROM pg_index ix JOIN pg_class t ON t.oid = ix.indrelid JOIN pg_class i ON i.oid = ix.indexrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE t.relkind IN ('r', 'p') AND " + USER_SCHEMAS
        )

        @staticmethod
        def _index_column(text: str) -> str:
            if len(text) >= 2 and text[0] == text[-1] == '"':
                return text[1:-1].replace('""', '"').lower()
            return text.lower()

        def read_shapes(self, connection: Connection, catalogs: Iterable[str] = ()) -> dict[tuple, tuple[TableName, TableShape]]:
            table_key = self.dialect.table_key
            out: dict[tuple, tuple[TableName, TableShape]] = {}
            for schema, table in connection.exec_driver_sql(self.SHAPE_TABLES):
                name = TableName(table, schema)
                out[table_key(name)] = (name, TableShape())
            for schema, table, column, type_, nullable in connection.exec_driver_sql(self.SHAPE_COLUMNS):
                entry = out.get(table_key(TableName(table, schema)))
                if entry is not None:
                    entry[1].columns[column.lower()] = (normalise_type(type_), bool(nullable))
            for schema, table, index, unique, predicate, columns in connection.exec_driver_sql(self.SHAPE_INDEXES):
                entry = out.get(table_key(TableName(table, schema)))
                if entry is not None:
                    shape = IndexShape(tuple(self._index_column(c) for c in columns), bool(unique), normalise_predicate(predicate), index)
                    entry[1].indexes.append(shape)
            return out

    # =====================================================================================
    # -- grants (sqltransport-schema grants) ----------------------------------------------
    # =====================================================================================
    class Grants(Dialect.Grants):
        """Schema usage, table privileges per need and the serial columns' sequences."""

        # Privileges per need, verified against the statements above on a real server:
        # receive/receive_batch/peek/purge_expired and next_due lock rows with SELECT ... FOR UPDATE
        # SKIP LOCKED, which needs UPDATE on at least one column (UPDATE (id) is enough, and lets no
        # payload change); DELETE ... WHERE/RETURNING needs SELECT; every INSERT into a queue draws
        # Seq from its serial sequence, which needs USAGE on that sequence.
        GRANT_PRIVILEGES = {
            "receive": "SELECT, INSERT, UPDATE (id), DELETE",
            "send": "INSERT",
            "delayed": "SELECT, INSERT, UPDATE (id), DELETE",
            "subscriptions": "SELECT, INSERT, UPDATE, DELETE",
            "saga": "SELECT, INSERT, UPDATE, DELETE",  # subscribe is INSERT ... ON CONFLICT DO UPDATE
        }
        GRANT_TABLE = "GRANT {privileges} ON TABLE {table} TO {role};"
        GRANT_SEQUENCE = "GRANT USAGE ON SEQUENCE {sequence} TO {role};"
        GRANT_SCHEMA_USAGE = "GRANT USAGE ON SCHEMA {schema} TO {role};"
        # The serial Seq column's sequence: <table>_seq_seq (table names stop at 55 bytes so this fits).
        SEQUENCE_NAME = "{table}_seq_seq"
        INSTALLER_DATABASE = (
            "DO {tag} BEGIN EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO %I', current_database(), {role_literal}); END {tag};"
        )
        GRANT_SCHEMA_CREATE = "GRANT USAGE, CREATE ON SCHEMA {schema} TO {role};"
        INSTALLER_NOTES = (
            "-- Ownership: ALTER TABLE, DROP TABLE and the queue upgrades need the tables' owner. The installer",
            "-- owns what it creates; tables created by another login must be handed over first:",
            "--   ALTER TABLE <table> OWNER TO {role};  (and ALTER SCHEMA <schema> OWNER TO {role})",
            "-- Runtime grants (sqltransport-schema grants --role ...) must be run by the owner (or a superuser)",
            "-- after each upgrade that creates tables.",
        )

        def _schema_of(self, schema: SchemaName | None) -> str:
            return self.dialect.quote(schema.schema if schema is not None else self.dialect.default_schema)

        def runtime(self, plan: GrantPlan, role: str) -> list[str]:
            role_q = self.dialect.quote(role)
            lines = [self.GRANT_SCHEMA_USAGE.format(schema=self._schema_of(s), role=role_q) for s in plan.schemas]
            # Transport.from_database reads which revision is deployed, and the blueprint the migrations stored
            lines += [
                self.GRANT_TABLE.format(privileges="SELECT", table=self.dialect.qualified(TableName(t)), role=role_q)
                for t in ("alembic_version", BLUEPRINT_TABLE)
            ]
            for grant in plan.tables:
                name = grant.table._replace(catalog=None)  # PostgreSQL does not qualify with a catalog
                lines.append(
                    self.GRANT_TABLE.format(privileges=self.GRANT_PRIVILEGES[grant.need], table=self.dialect.qualified(name), role=role_q)
                )
                if grant.serial:
                    sequence = name._replace(table=self.SEQUENCE_NAME.format(table=name.table))
                    lines.append(self.GRANT_SEQUENCE.format(sequence=self.dialect.qualified(sequence), role=role_q))
            return lines

        def installer(self, plan: GrantPlan, role: str) -> list[str]:
            role_q = self.dialect.quote(role)
            role_literal = self.dialect.literal(role)
            lines = [self.INSTALLER_DATABASE.format(role_literal=role_literal, tag=self.dialect.dollar_tag(role_literal))]
            schemas = [self.dialect.default_schema] + [
                s.schema for s in plan.schemas if s is not None and s.schema != self.dialect.default_schema
            ]
            lines.append(self.GRANT_SCHEMA_CREATE.format(schema=self.dialect.quote(self.dialect.default_schema), role=role_q))
            for schema in schemas[1:]:
                lines.append(f"-- schema {self.dialect.quote(schema)}: created (and owned) by the installer; if it exists already:")
                lines.append("-- " + self.GRANT_SCHEMA_CREATE.format(schema=self.dialect.quote(schema), role=role_q))
            lines.extend(note.format(role=role_q) for note in self.INSTALLER_NOTES)
            return lines

    # =====================================================================================
    # -- deployment scripts (sqltransport-schema script) ----------------------------------
    # =====================================================================================
    class Script(Dialect.Script):
        """Alembic's version stamping made repeatable: guarded stamps, CREATE TABLE IF NOT EXISTS."""

        ALEMBIC_FIRST_STAMP = r"^INSERT INTO alembic_version \(version_num\) VALUES \({rev}\) RETURNING alembic_version\.version_num;$"
        FIRST_STAMP = "INSERT INTO alembic_version (version_num) SELECT '{rev}'\n    WHERE NOT EXISTS (SELECT 1 FROM alembic_version);"
        RESTAMP = "UPDATE alembic_version SET version_num = '{new}' WHERE version_num = '{old}';"
        # How each file of a split script opens and closes its transaction (as Alembic's offline output does).
        SCRIPT_BEGIN = "BEGIN;\n\n"
        SCRIPT_COMMIT = "COMMIT;\n"
        # Each statement of the script waits at most this long for a lock; psql stops at the error
        # (ON_ERROR_STOP) and the transaction rolls back: run the script again (docs/live-migrations.md).
        LOCK_TIMEOUT = "SET lock_timeout = '{setting}';"
        RUN_STOPPING = "psql -v ON_ERROR_STOP=1 -f FILE"

        def lock_timeout(self, milliseconds: int) -> str | None:
            return self.LOCK_TIMEOUT.format(setting=self.dialect.lock_timeout_setting(milliseconds)) if milliseconds else None

        def guard_version_table(self, ddl: str) -> str:
            return ddl.replace("CREATE TABLE alembic_version", "CREATE TABLE IF NOT EXISTS alembic_version", 1)

    # =====================================================================================
    # -- the data pipeline (engines/pipeline.py): psycopg 3, binary COPY ------------------
    # =====================================================================================
    class Pipeline(Dialect.Pipeline):
        """psycopg 3 (%s placeholders). Queue partitions between PostgreSQL-layout tables stream
        server to server as binary COPY; other writes are binary COPY too; Seq values are reserved
        from the serial sequence, so partitions may commit in any order."""

        layout = "postgresql"
        jdbc_jar, jdbc_driver = "postgresql.jar", "org.postgresql.Driver"
        paramstyle = "format"
        takes_explicit_order = True
        stream_layout = "postgresql"
        backfills_sagas = True
        FRAGMENTS = {**Dialect.Pipeline.FRAGMENTS, "lock": " FOR UPDATE", "id_text": "CAST(Id AS text)"}

        DELETE_KEYS = "DELETE FROM {table} WHERE {key} = ANY(@Keys)"
        COPY = "COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)"
        COLUMN_TYPES = (
            "SELECT lower(a.attname), a.atttypid::int, format_type(a.atttypid, NULL) FROM pg_attribute a "
            "WHERE a.attrelid = @Table::regclass AND a.attnum > 0 AND NOT a.attisdropped"
        )
        # Senders take ROW EXCLUSIVE on the table before drawing a Seq: SHARE ROW EXCLUSIVE holds them off
        # for the instant the range is reserved, so no sender can be given a value inside it.
        RESERVE_LOCK = "LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"
        RESERVE_SEQUENCE = "SELECT pg_get_serial_sequence(@Table, @Column)"
        RESERVE_NEXT = "SELECT nextval(@Sequence::regclass), (SELECT coalesce(max({order}), 0) FROM {table})"
        RESERVE_SET = "SELECT setval(@Sequence::regclass, @Last)"
        INT4_MAX = 2**31 - 1
        # The fast path between two PostgreSQL-layout queues: the partition is deleted from the source in
        # the source's open transaction and its rows streamed, as binary COPY, into the destination, the
        # destination Seq computed by the source's statement. The delete commits only after the destination
        # (rows + ledger row) has; until then the rows are locked, so consumers (SKIP LOCKED) pass over them.
        DELETE_MOVED = (
            "WITH moved AS (DELETE FROM {table} WHERE {order} >= @Low AND {order} < @High AND {order} <= @Last "
            "RETURNING Id, Expires, Headers, Body, {order}) "
        )
        SELECT_MOVED = "SELECT Id, Expires, Headers, Body, CAST({order} - @SourceLow + @Base AS {order_type}) FROM moved ORDER BY {order}"
        COPY_OUT = "COPY ({statement}) TO STDOUT (FORMAT BINARY)"
        INSERT_INTO = "INSERT INTO {dest} ({columns}) "
        # what the destination transaction holds in the partition's reserved slot = the source keys moved
        MOVED_KEYS = "SELECT {order} - @Base + @SourceLow FROM {dest} WHERE {order} >= @From AND {order} < @To ORDER BY {order}"
        STREAM_CHUNK = 1 << 20
        # backfill of a saga's correlation column
        BACKFILL_COLUMN_TYPE = (
            "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = @Table::regclass AND a.attname = @Column AND NOT a.attisdropped"
        )
        BACKFILL_READ = "SELECT CAST({id} AS text) AS id, CAST({data} AS text) AS data, {concurrency} AS concurrency FROM {table}{where}"
        BACKFILL_UPDATE = (
            "UPDATE {table} SET {column} = CAST(@Value AS {type}) "
            "WHERE {id} = CAST(@Id AS uuid) AND {concurrency} = @Concurrency AND {guard}"
        )
        BACKFILL_NULL = "{column} IS NULL"  # the guard (and the read's filter) unless overwriting

        # -- connections ----------------------------------------------------------------------
        def connect(self, url: URL) -> Any:
            import psycopg
            from psycopg.conninfo import make_conninfo

            return psycopg.connect(make_conninfo(**self.libpq_parameters(url)))

        @staticmethod
        def libpq_parameters(url: URL) -> dict:
            """libpq connection parameters (make_conninfo quotes them: a password may hold ' or \\)."""
            parts = {
                "host": url.host or "127.0.0.1",
                "port": url.port or 5432,
                "dbname": url.database,
                "user": url.username,
                "password": url.password,
            }
            parts.update({k: v for k, v in url.query.items() if isinstance(v, str)})
            return {k: str(v) for k, v in parts.items() if v is not None}

        def jdbc_url(self, url: URL) -> str:
            """`stringtype=unspecified` (uuid columns) and `reWriteBatchedInserts=true`."""
            query = {"stringtype": "unspecified", "reWriteBatchedInserts": "true"}
            if url.username:
                query["user"] = url.username
            if url.password:
                query["password"] = url.password
            return f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/{url.database}?" + "&".join(
                f"{k}={urlquote(str(v))}" for k, v in query.items()
            )

        # -- source -----------------------------------------------------------------------------
        def delete_keys(self, conn: Any, table: Table, keys: list) -> int:
            if not keys:
                return 0
            if isinstance(keys[0], str):
                keys = [uuid.UUID(k) for k in keys]
            cur = self.execute(conn.cursor(), self._table("DELETE_KEYS", table, key=table.key), Keys=keys)
            return cur.rowcount

        def read_range(self, conn: Any, table: Table, lo: int, hi: int, high: int) -> Any:
            statement = self._table("READ_RANGE", table, columns=self.columns_text(table.columns), order=table.order)
            cur = conn.cursor()
            cur.execute(*self.bind(statement, {"Low": lo, "High": hi, "Last": high}), binary=True)
            return cur

        def stream_partition(
            self, src: Any, dst: Any, source: Table, dest: Table, lo: int, hi: int, high: int, low: int, base: int, checksum: Any
        ) -> list[int]:
            """Move one partition's rows PostgreSQL -> PostgreSQL without Python per row; returns the source keys.

            The source's DELETE ... RETURNING is left uncommitted (the caller commits it after the
            destination). The keys are read back from the partition's reserved slot in the destination,
            inside the destination's transaction: nobody else can write there. `checksum` receives the
            binary stream (a hash of exactly what was written).
            """
            order, dest_order = source.order, dest.order
            names = {
                "table": self.dialect.qualified(source.name),
                "dest": self.dialect.qualified(dest.name),
                "order": order,
                "columns": self.columns_text(dest.columns),
                "order_type": self.column_types(dst, dest)[dest_order.lower()][1],
            }
            values = {"Low": lo, "High": hi, "Last": high, "SourceLow": low, "Base": base}
            if src is dst:  # one database: the server moves the rows inside the partition's one transaction
                moved = self.statement("MOVE", self.DELETE_MOVED + self.INSERT_INTO + self.SELECT_MOVED, **names)
                self.execute(src.cursor(), moved, **values)
            else:
                copy_out = self.statement("COPY_OUT", self.COPY_OUT.replace("{statement}", self.DELETE_MOVED + self.SELECT_MOVED), **names)
                copy_in = self._table("COPY", dest, columns=names["columns"])
                with src.cursor().copy(*self.bind(copy_out, values)) as reader, dst.cursor().copy(self.bind(copy_in)[0]) as writer:
                    buffer, size = [], 0
                    for data in reader:  # one message per row: hand the writer ~1 MB at a time
                        buffer.append(data)
                        size += len(data)
                        if size >= self.STREAM_CHUNK:
                            chunk = b"".join(buffer)
                            checksum.update(chunk)
                            writer.write(chunk)
                            buffer, size = [], 0
                    if buffer:
                        chunk = b"".join(buffer)
                        checksum.update(chunk)
                        writer.write(chunk)
            keys_statement = self._table("MOVED_KEYS", dest, dest=names["dest"], order=dest_order)
            cur = self.execute(dst.cursor(), keys_statement, Base=base, SourceLow=low, From=base + lo - low, To=base + hi - low)
            keys = [row[0] for row in cur.fetchall()]
            if src is dst:
                checksum.update(b"".join(k.to_bytes(8, "little", signed=True) for k in keys))
            return keys

        # -- destination --------------------------------------------------------------------------
        def column_types(self, conn: Any, table: Table) -> dict[str, tuple[int, str]]:
            """lower-case column -> (type oid, type name)."""
            cur = self.execute(conn.cursor(), self.statement("COLUMN_TYPES"), Table=self.dialect.qualified(table.name))
            return {name: (oid, text) for name, oid, text in cur.fetchall()}

        @staticmethod
        def _converter(type_name: str) -> Callable[[Any], Any] | None:
            if type_name == "uuid":
                return lambda v: uuid.UUID(v) if isinstance(v, str) else v
            if type_name == "timestamp with time zone":
                return lambda v: v.replace(tzinfo=timezone.utc) if v is not None and v.tzinfo is None else v
            return None

        def write_rows(self, conn: Any, table: Table, columns: tuple[str, ...], rows: list[tuple]) -> None:
            """Binary COPY: the fastest way into PostgreSQL (values converted where the column needs it)."""
            if not rows:
                return
            types = self.column_types(conn, table)
            wanted = [types[c.lower()] for c in columns]
            converters = [(i, f) for i, f in enumerate(self._converter(t[1]) for t in wanted) if f is not None]
            copy_in = self._table("COPY", table, columns=self.columns_text(columns))
            with conn.cursor().copy(self.bind(copy_in)[0]) as copy:
                copy.set_types([t[0] for t in wanted])
                write = copy.write_row
                if not converters:
                    for row in rows:
                        write(row)
                    return
                for row in rows:
                    row = list(row)
                    for i, f in converters:
                        row[i] = f(row[i])
                    write(row)

        def reserve(self, conn: Any, table: Table, span: int) -> int:
            order, qualified = table.order, self.dialect.qualified(table.name)
            cur = conn.cursor()
            self.execute(cur, self._table("RESERVE_LOCK", table))
            sequence = self.execute(cur, self.statement("RESERVE_SEQUENCE"), Table=qualified, Column=order.lower()).fetchone()[0]
            if sequence is None:
                raise ValueError(f"{table.where}: column {order} has no sequence (not serial/bigserial)")
            nextval, current_max = self.execute(cur, self._table("RESERVE_NEXT", table, order=order), Sequence=sequence).fetchone()
            base = max(nextval, current_max + 1)
            last = base + max(span, 1) - 1
            if self.column_types(conn, table)[order.lower()][1] == "integer" and last > self.INT4_MAX:
                raise ValueError(
                    f"{table.where}: {order} is integer (serial) and the move needs values up to {last}; "
                    "switch the topology to postgresql: {seq_type: bigserial} first"
                )
            self.execute(cur, self.statement("RESERVE_SET"), Sequence=sequence, Last=last)
            return base

        # -- backfill of a saga's correlation column ---------------------------------------------------
        def saga_column_type(self, conn: Any, table: TableName, column: str) -> str | None:
            found = self.execute(
                conn.cursor(), self.statement("BACKFILL_COLUMN_TYPE"), Table=self.dialect.qualified(table), Column=column
            ).fetchone()
            return None if found is None else found[0]

        def _backfill_names(self, table: TableName, column: str) -> dict:
            q = self.dialect.quote
            return {
                "table": self.dialect.qualified(table),
                "column": q(column),
                "id": q("Id"),
                "data": q("Data"),
                "concurrency": q("Concurrency"),
            }

        def backfill_read(self, table: TableName, column: str, overwrite: bool) -> str:
            """The rows to fill (id, data, concurrency): a subquery for Spark's JDBC reader, no parameters."""
            template = self.BACKFILL_READ.replace("{where}", "" if overwrite else " WHERE " + self.BACKFILL_NULL)
            return self.statement("BACKFILL_READ", template, **self._backfill_names(table, column)).sql

        def backfill_update(self, table: TableName, column: str, column_type: str, overwrite: bool) -> str:
            """The driver text of the guarded update; its parameters, in order: value, id, concurrency."""
            template = self.BACKFILL_UPDATE.replace("{guard}", "TRUE" if overwrite else self.BACKFILL_NULL)
            statement = self.statement("BACKFILL_UPDATE", template, type=column_type, **self._backfill_names(table, column))
            text, names = statement.native(self.paramstyle)
            if names != ("Value", "Id", "Concurrency"):
                raise AssertionError(f"BACKFILL_UPDATE binds {names}")
            return text

    # =====================================================================================
    # -- online rewrites of queue tables (engines/online.py, migrate/online.py) -----------
    # =====================================================================================
    class Online(Dialect.Online):
        """A queue rewritten beside the live table: the shadow gets the changed DDL (the transport's
        own CREATE_QUEUE and BodyString script), a row trigger on the live table repeats every
        insert and delete there, and the backlog is copied newest first in batches that share-lock
        the rows they read, so a receiver's delete of a row being copied waits for that copy's
        commit (and the trigger then deletes the copy). The swap locks both tables, repairs any
        difference (none is expected: it is the "tail" of the move), carries the sequence over,
        drops the live table and gives the shadow its name, index names, owner and grants.
        {table}, {shadow}, {mirror} are quoted qualified names; @Table and @Shadow the same as text."""

        supported = True
        SHADOW_SUFFIX = "__online"
        MIRROR_SUFFIX = "__online_mirror"
        TRIGGER = "sqltransport_online_mirror"
        TRUNCATE_TRIGGER = "sqltransport_online_truncate"
        SEQ_TYPES = {"integer": "serial", "bigint": "bigserial"}

        # -- reading the live table ------------------------------------------------------
        CURRENT = """\
SELECT format_type(seq.atttypid, seq.atttypmod),
    EXISTS (SELECT FROM pg_attribute b WHERE b.attrelid = c.oid AND b.attname = 'bodystring' AND NOT b.attisdropped)
FROM pg_class AS c
JOIN pg_attribute AS seq ON seq.attrelid = c.oid AND seq.attname = 'seq' AND NOT seq.attisdropped
WHERE c.oid = to_regclass(@Table)"""
        ROWS_ESTIMATED = "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass(@Table)"

        # -- step 1, one short transaction: the shadow, its mirror function, the triggers -------
        MIRROR = """\
CREATE OR REPLACE FUNCTION {mirror}() RETURNS trigger LANGUAGE plpgsql AS {tag}
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE {shadow};
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        DELETE FROM {shadow} WHERE Seq = OLD.Seq;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO {shadow} (Id, Expires, Headers, Body, Seq)
        VALUES (NEW.Id, NEW.Expires, NEW.Headers, NEW.Body, NEW.Seq)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
{tag}"""
        DROP_SHADOW = "DROP TABLE IF EXISTS {shadow}"  # one a killed run left for another change
        DROP_TRIGGER = "DROP TRIGGER IF EXISTS {trigger} ON {table}"
        CREATE_TRIGGER = "CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION {mirror}()"
        CREATE_TRUNCATE_TRIGGER = "CREATE TRIGGER {trigger} AFTER TRUNCATE ON {table} FOR EACH STATEMENT EXECUTE FUNCTION {mirror}()"

        # -- step 2, many short transactions: the backlog, newest first ------------------------
        # Where the copy goes on from: everything below the lowest Seq the shadow holds is still
        # to copy (rows the trigger added are newer than every row of the backlog).
        COPY_FROM = "SELECT min(Seq) FROM {shadow}"
        COPY_BATCH = """\
WITH batch AS (
    SELECT Id, Expires, Headers, Body, Seq FROM {table}
    WHERE Seq < @Below
    ORDER BY Seq DESC
    LIMIT @BatchSize
    FOR SHARE
), copied AS (
    INSERT INTO {shadow} (Id, Expires, Headers, Body, Seq)
    SELECT Id, Expires, Headers, Body, Seq FROM batch
    ON CONFLICT DO NOTHING
)
SELECT count(*), min(Seq) FROM batch"""

        # -- step 3, one short transaction: the swap -------------------------------------------
        LOCK_BOTH = "LOCK TABLE {table}, {shadow} IN ACCESS EXCLUSIVE MODE"
        COUNTS = "SELECT (SELECT count(*) FROM {table}), (SELECT count(*) FROM {shadow})"
        REPAIR_MISSING = """\
INSERT INTO {shadow} (Id, Expires, Headers, Body, Seq)
SELECT Id, Expires, Headers, Body, Seq FROM {table} AS t
WHERE NOT EXISTS (SELECT FROM {shadow} AS s WHERE s.Seq = t.Seq)
ON CONFLICT DO NOTHING"""
        REPAIR_EXTRA = "DELETE FROM {shadow} AS s WHERE NOT EXISTS (SELECT FROM {table} AS t WHERE t.Seq = s.Seq)"
        # the shadow's sequence goes on from the live one's (the trigger wrote Seq as it came)
        CARRY_SEQUENCE = """\
SELECT setval(pg_get_serial_sequence(@Shadow, 'seq'), greatest(coalesce(last, 0), coalesce(top, 0), 1), last IS NOT NULL OR top IS NOT NULL)
FROM (
    SELECT pg_sequence_last_value(to_regclass(pg_get_serial_sequence(@Table, 'seq'))) AS last, (SELECT max(Seq) FROM {shadow}) AS top
) AS s"""
        SEQUENCE_NAME = "SELECT relname FROM pg_class WHERE oid = to_regclass(pg_get_serial_sequence(@Table, 'seq'))"
        INDEXES = """\
SELECT i.relname, string_agg(a.attname, ',' ORDER BY k.n)
FROM pg_index AS ix
JOIN pg_class AS i ON i.oid = ix.indexrelid
CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute AS a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum
WHERE ix.indrelid = to_regclass(@Table)
GROUP BY i.relname"""
        OWNER = "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass(@Table)"
        GRANTS = """\
SELECT CASE WHEN g.grantee = 0 THEN NULL ELSE pg_get_userbyid(g.grantee) END, g.privilege_type, g.is_grantable
FROM pg_class AS c, aclexplode(c.relacl) AS g
WHERE c.oid = to_regclass(@Table) AND g.grantee <> c.relowner
ORDER BY 1, 2"""
        DROP_LIVE = "DROP TABLE {table}"
        RENAME_TABLE = "ALTER TABLE {shadow} RENAME TO {name}"
        RENAME_SEQUENCE = "ALTER SEQUENCE {sequence} RENAME TO {new}"
        SET_OWNER = "ALTER TABLE {table} OWNER TO {role}"
        GRANT = "GRANT {privilege} ON {table} TO {role}{option}"
        DROP_MIRROR = "DROP FUNCTION IF EXISTS {mirror}()"
        ANALYZE = "ANALYZE {table}"  # the new table has no statistics yet (after the swap, outside its lock)
        PRIVILEGES = frozenset(("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER", "MAINTAIN"))

        def _fit(self, table: str, suffix: str) -> str:
            """table + suffix within PostgreSQL's 63 bytes (a long name is cut and told apart by a hash)."""
            name = table + suffix
            if len(name.encode("utf-8")) <= MAX_IDENTIFIER_BYTES:
                return name
            room = MAX_IDENTIFIER_BYTES - len(suffix.encode("utf-8")) - 9
            cut = table.encode("utf-8")[:room].decode("utf-8", "ignore")
            return f"{cut}_{hashlib.sha256(table.encode('utf-8')).hexdigest()[:8]}{suffix}"

        def names(self, table: TableName) -> OnlineNames:
            return OnlineNames(
                TableName(self._fit(table.table, self.SHADOW_SUFFIX), table.schema, table.catalog),
                TableName(self._fit(table.table, self.MIRROR_SUFFIX), table.schema, table.catalog),
            )

        def _identifiers(self, table: TableName) -> dict[str, str]:
            names, q = self.names(table), self.dialect.qualified
            return {"table": q(table), "shadow": q(names.shadow), "mirror": q(names.mirror)}

        def run(self, connection: Connection, template: str, table: TableName, **values: Any) -> Any:
            """A statement of this section for one table's rewrite: names formatted in, values bound
            (@Table and @Shadow are the two tables' qualified names as text)."""
            identifiers = self._identifiers(table)
            params = parameters_of(template)
            if not params:  # the driver gets the text as is, so a '%' in a quoted name stays literal
                return connection.execution_options(no_parameters=True).exec_driver_sql(template.format(**identifiers))
            sql, order = Statement("online", template, identifiers, params).native("format")
            bound = {"Table": identifiers["table"], "Shadow": identifiers["shadow"], **values}
            return connection.exec_driver_sql(sql, tuple(bound[name] for name in order))

        def current_spec(self, connection: Connection, table: TableName) -> TableSpec | None:
            row = self.run(connection, self.CURRENT, table).first()
            if row is None or row[0] not in self.SEQ_TYPES:
                return None
            return TableSpec(Kind.QUEUE, table, body_string=bool(row[1]), seq_type=self.SEQ_TYPES[row[0]])

        def create_shadow(self, target: TableSpec, profile: Profile, stale: bool) -> list[str]:
            """The shadow's DDL: the transport's queue DDL of the changed table, under the shadow's name
            (after dropping a stale one)."""
            drop = [self.DROP_SHADOW.format(**self._identifiers(target.name))] if stale else []
            return drop + self.dialect.create_queue(target._replace(name=self.names(target.name).shadow), profile)

        def mirror(self, table: TableName) -> list[str]:
            """The mirror function and the live table's triggers (replaced if a killed run left them)."""
            fields = self._identifiers(table)
            tag = self.dialect.dollar_tag(*fields.values())
            trigger, truncate = self.dialect.quote(self.TRIGGER), self.dialect.quote(self.TRUNCATE_TRIGGER)
            return [
                self.MIRROR.format(tag=tag, **fields),
                self.DROP_TRIGGER.format(trigger=trigger, **fields),
                self.DROP_TRIGGER.format(trigger=truncate, **fields),
                self.CREATE_TRIGGER.format(trigger=trigger, **fields),
                self.CREATE_TRUNCATE_TRIGGER.format(trigger=truncate, **fields),
            ]

        def finish(self, connection: Connection, table: TableName) -> list[str]:
            """The swap's last statements, read from the catalog under the swap's lock: drop the live
            table, give the shadow its name, its indexes and sequence the live ones' names, the live
            table's owner and grants, and drop the mirror function."""
            d = self.dialect
            names = self.names(table)
            q = d.qualified
            schema = table.schema
            live_indexes = {cols: name for name, cols in self.run(connection, self.INDEXES, table)}
            shadow_indexes = {cols: name for name, cols in d._run(connection, self.INDEXES, Table=q(names.shadow))}
            live_sequence = self.run(connection, self.SEQUENCE_NAME, table).scalar()
            shadow_sequence = d._run(connection, self.SEQUENCE_NAME, Table=q(names.shadow)).scalar()
            owner = self.run(connection, self.OWNER, table).scalar()
            grants = list(self.run(connection, self.GRANTS, table))
            statements = [
                self.DROP_LIVE.format(table=q(table)),
                self.RENAME_TABLE.format(shadow=q(names.shadow), name=d.quote(table.table)),
            ]
            for cols, name in sorted(shadow_indexes.items()):
                new = live_indexes.get(cols)
                if new is not None and new != name:
                    statements += d.rename_index(table, name, new)
            if live_sequence and shadow_sequence and live_sequence != shadow_sequence:
                statements.append(self.RENAME_SEQUENCE.format(sequence=q(TableName(shadow_sequence, schema)), new=d.quote(live_sequence)))
            if owner is not None:
                statements.append(self.SET_OWNER.format(table=q(table), role=d.quote(owner)))
            for role, privilege, grantable in grants:
                if privilege not in self.PRIVILEGES:
                    continue  # a privilege this release does not know: not pasted into SQL
                grantee = "PUBLIC" if role is None else d.quote(role)
                option = " WITH GRANT OPTION" if grantable else ""
                statements.append(self.GRANT.format(privilege=privilege, table=q(table), role=grantee, option=option))
            statements.append(self.DROP_MIRROR.format(mirror=q(names.mirror)))
            return statements

    # =====================================================================================
    # -- status and retry (engines/operations.py) -----------------------------------------
    # =====================================================================================
    class Operations(Dialect.Operations):
        """Exact figures in one scan per table (count and the expired count together), the head by
        Seq's index; estimates from the statistics collector (pg_stat_user_tables.n_live_tup, kept
        as rows are written), else pg_class.reltuples (set by VACUUM and ANALYZE).

        On a new connection most of a status is the server loading each table's and index's catalog
        entries while planning (a session's own, on one core), so the figures go out on two
        connections, in batches of 50 (planning time grows faster than the arms above that); the
        statements are prepared at their first run (a repeated status is not planned again). A queue
        the statistics say is empty is counted without planning its head read (QUEUE_COUNT_ARM)."""

        supported = True
        batch = 50
        connections = 2
        prepare = True
        order = "Seq"
        QUEUE_ARM = (
            "SELECT {index} AS i, count(*) AS depth, "
            "count(*) FILTER (WHERE Expires < now() AT TIME ZONE 'UTC') AS expired, "
            "(SELECT Headers FROM {table} ORDER BY {order} LIMIT 1) AS head, CAST(NULL AS timestamptz) AS due FROM {table}"
        )
        QUEUE_COUNT_ARM = (
            "SELECT {index} AS i, count(*) AS depth, "
            "count(*) FILTER (WHERE Expires < now() AT TIME ZONE 'UTC') AS expired, "
            "CAST(NULL AS text) AS head, CAST(NULL AS timestamptz) AS due FROM {table}"
        )
        # the head as the arm's own FROM (no row for an empty queue): planned in about half the time
        # of a scalar subquery, whose cost per arm grows with the arms of the statement
        QUEUE_ESTIMATE_ARM = (
            "(SELECT {index}, CAST(NULL AS bigint), CAST(NULL AS bigint), Headers, CAST(NULL AS timestamptz) "
            "FROM {table} ORDER BY {order} LIMIT 1)"
        )
        # due as the transport's move compares it (Due < now() AT TIME ZONE 'UTC'): what its next move takes
        DELAYED_ARM = (
            "SELECT {index}, count(*), count(*) FILTER (WHERE Due < now() AT TIME ZONE 'UTC'), CAST(NULL AS text), min(Due) FROM {table}"
        )
        COUNT_ARM = "SELECT {index}, count(*), CAST(NULL AS bigint), CAST(NULL AS text), CAST(NULL AS timestamptz) FROM {table}"
        # Seq's sequence (serial or bigserial), NULL before its first nextval
        HIGH_WATER_ARM = "SELECT {index}, pg_sequence_last_value(CAST(pg_get_serial_sequence(@Name, 'seq') AS regclass))"
        TABLES = """\
SELECT CAST(NULL AS text), n.nspname, c.relname, CAST(NULL AS real)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')"""
        # the collector's live-row count straight from its function (the pg_stat_user_tables view
        # computes every figure of every table), else reltuples (-1: never vacuumed nor analyzed)
        TABLES_ESTIMATED = """\
SELECT CAST(NULL AS text), n.nspname, c.relname,
    CASE WHEN pg_stat_get_live_tuples(c.oid) > 0 OR c.reltuples < 0 THEN pg_stat_get_live_tuples(c.oid) ELSE c.reltuples END
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')"""
        # The header's value, cut out by a pattern of a JSON string (only JSON's escapes) and read as JSON
        # by the server (so \/ is /); NULL where a message names none or its headers are not JSON.
        JSON_STRING = r'"((?:[^"\\]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{{4}}))*)"'  # a JSON string's body, captured
        FAILED_Q_COUNTS = (
            r"""SELECT FailedQ, count(*) AS Messages FROM (
    SELECT ('"' || substring(Headers FROM '"NServiceBus\.FailedQ"\s*:\s*"""
            + JSON_STRING
            + """') || '"')::json #>> '{{}}' AS FailedQ
    FROM {table}
) AS failed
GROUP BY FailedQ ORDER BY FailedQ"""
        )
        # FOR UPDATE, not SKIP LOCKED: a message another transaction holds is waited for, never passed over
        ERROR_BATCH = "SELECT {order}, Id, Headers, Body FROM {table} WHERE {order} > @After ORDER BY {order} LIMIT @BatchSize FOR UPDATE"
        ERROR_SCAN = "SELECT {order}, Id, Headers, NULL FROM {table} WHERE {order} > @After ORDER BY {order} LIMIT @BatchSize"


@functools.cache
def _uuid_text_loader() -> type:
    """A psycopg loader of binary uuid values straight to their canonical text (no UUID object)."""
    from psycopg import adapt, pq

    class UuidText(adapt.Loader):
        format = pq.Format.BINARY

        def load(self, data: bytes | bytearray | memoryview) -> str:
            h = bytes(data).hex()
            return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    return UuidText
