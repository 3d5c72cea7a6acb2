"""PostgreSQL: the PostgreSQL transport's DDL (8.1+), reproduced as it ships.

Columns stay unquoted, as the transport writes them, so PostgreSQL folds them to
lower case; tables and schemas are always double-quoted. {table} is the quoted
qualified name, {table_literal} that text as a string literal.

The class is put together from its sections: identifiers, names, limits and lock waits here; the
DDL (ddl.py), the runtime statements (runtime.py) and the saga tables (sagas.py) as mixins; the
nested sections one module each (catalog.py, grants.py, script.py, pipeline.py, online.py,
operations.py).
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import TYPE_CHECKING, Any

from ...schema import Kind, TableName, TableSpec
from ...statements import Statement, parameters_of, run_on
from ...versions import FEATURE_SINCE, Profile
from ..base import Dialect, LockHolder
from . import catalog, grants, live_bus, online, pipeline, script
from .ddl import DDL
from .runtime import Runtime
from .sagas import Sagas

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

_BARE_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


@functools.cache
def _reserved_words() -> frozenset[str]:
    """PostgreSQL's reserved words, as SQLAlchemy lists them (imported when first needed: naming the
    engines, as the command line's parser does, imports no SQLAlchemy)."""
    from sqlalchemy.dialects.postgresql.base import RESERVED_WORDS

    return frozenset(RESERVED_WORDS)


class PostgreSQL(DDL, Runtime, Sagas, Dialect):
    name = "postgresql"
    sqlalchemy_name = "postgresql"
    drivers = ("psycopg", "psycopg2")
    default_schema = "public"
    has_catalogs = False  # the PostgreSQL transport's addresses are table@schema: a catalog is the database connected to
    ddl_savepoints = True
    MAX_TABLE_BYTES = 55  # the transport's own limit: room for the suffixes of derived names
    MAX_IDENTIFIER_BYTES = 63

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

    index_suffixes = {"delayed": ("_Due",), "archive": ("_ArchivedAt",)}

    def name_problems(self, name: TableName) -> list[tuple[str, str]]:
        problems = []
        size = len(name.table.encode("utf-8"))
        if size > self.MAX_TABLE_BYTES:
            problems.append(("table", f"is {size} bytes in UTF-8; PostgreSQL transport table names hold at most {self.MAX_TABLE_BYTES}"))
        if name.schema is not None and len(name.schema.encode("utf-8")) > self.MAX_IDENTIFIER_BYTES:
            problems.append(("schema", f"is longer than PostgreSQL's {self.MAX_IDENTIFIER_BYTES}-byte identifier limit"))
        return problems

    # Every lock a transaction takes lives in one shared table sized for
    # max_locks_per_transaction * (max_connections + max_prepared_transactions) entries (the server
    # adds room for its background processes, so this is the safe side of its size).
    LOCK_CAPACITY = (
        "SELECT current_setting('max_locks_per_transaction')::int"
        " * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int)"
    )
    # max_locks_per_transaction 64 * (max_connections 100 + max_prepared_transactions 0), the defaults
    DEFAULT_LOCK_TABLE_CAPACITY = 64 * (100 + 0)
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
        return run_on(connection, Statement("migration", template, {}, parameters_of(template)), values)

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

    GUARD_ERROR_CODES = frozenset({"55006", "42804", "23502"})  # guards' ERRCODEs: object_in_use, datatype_mismatch, not_null_violation
    PERMISSION_DENIED_CODES = frozenset({"42501"})  # SQLSTATE insufficient_privilege

    def lock_timed_out(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == self.LOCK_NOT_AVAILABLE or getattr(error, "pgcode", None) == self.LOCK_NOT_AVAILABLE

    CONNECT_TIMEOUT_PARAM = "connect_timeout"  # libpq: whole seconds

    def bounded_connect(self, cparams: dict[str, Any], seconds: float) -> None:
        """libpq's connect_timeout, and the session's statement and lock timeouts set by the connection
        itself (libpq's options: no statement, no round trip more per target)."""
        super().bounded_connect(cparams, seconds)
        ms = int(seconds * 1000)
        cparams["options"] = " ".join(filter(None, [cparams.get("options"), f"-c statement_timeout={ms} -c lock_timeout={ms}"]))

    MAINTENANCE_DATABASE = "postgres"
    DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = @Name"
    CREATE_DATABASE = "CREATE DATABASE {name}"
    DUPLICATE_DATABASE = "42P04"  # SQLSTATE duplicate_database
    UNDEFINED_TABLE = "42P01"  # SQLSTATE undefined_table
    # feature_not_supported: "cached plan must not change result type", a prepared statement (psycopg
    # prepares one run five times) whose table was swapped by an online rewrite for one whose columns
    # differ in type; the rollback deallocates the connection's prepared statements (psycopg 3).
    STALE_PLAN_CODES = frozenset({"0A000"})

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
        if _BARE_IDENTIFIER.fullmatch(identifier) and identifier not in _reserved_words():
            return identifier
        return self.quote(identifier)

    @staticmethod
    def advisory_lock_id(qualified: str) -> int:
        """The transport's advisory lock id for a table: the first 8 bytes of SHA-256 over the
        UTF-16LE qualified name, as a little-endian signed 64-bit integer."""
        return int.from_bytes(hashlib.sha256(qualified.encode("utf-16-le")).digest()[:8], "little", signed=True)

    # =====================================================================================
    # -- nested sections, one module each (reached as dialect.catalog, dialect.grants, ...)
    # =====================================================================================
    Catalog = catalog.Catalog
    Grants = grants.Grants
    Script = script.Script
    Pipeline = pipeline.Pipeline
    Online = online.Online
    LiveBus = live_bus.LiveBus


__all__ = ["PostgreSQL"]
