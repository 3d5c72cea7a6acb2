"""Oracle: saga tables of SQL persistence only, as an offline script (`alembic upgrade --sql`).

Named as SQL persistence names them (upstream-conformance §7), so its runtime finds them:
the table is the saga's table suffix in upper case, without the endpoint's prefix (at most
27 ASCII characters); its primary key is "<TABLE>_PK"; columns CORR_<PROPERTY> (cut to 30
characters); index names SAGAIDX_ and the first 22 hex digits of SHA-1 over the UTF-8 bytes
of '<TABLE>/<Property>'. Oracle B-tree indexes store no entry whose key is all NULL, so a
plain unique index already ignores sagas without a value. Batches end with `/` (SQL*Plus, SQLcl).
"""

from __future__ import annotations

import hashlib

from ..schema import Correlation, Kind, TableName, TableSpec
from ..shapes import Column
from ..versions import Profile
from .base import Dialect

MAX_IDENTIFIER = 30
MAX_SAGA_SUFFIX = 27  # room for _PK in the primary key's name
MAX_TABLE_PREFIX = 25  # SQL persistence's limit (its other Oracle tables append a code to the prefix)


class Oracle(Dialect):
    name = "oracle"
    sqlalchemy_name = "oracle"
    drivers = ("oracledb",)
    default_schema = None
    saga_only = True
    GUARD_ERROR_CODES = frozenset({20001})  # ORA-20001: the guards' RAISE_APPLICATION_ERROR(-20001, ...)
    PERMISSION_DENIED_CODES = frozenset({1031})  # ORA-01031: insufficient privileges

    # =====================================================================================
    # -- identifiers and names ------------------------------------------------------------
    # =====================================================================================
    def quote(self, identifier: str) -> str:
        return '"' + identifier.upper() + '"'  # a '"' in a name is refused by name_problems

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        if name.schema is not None:
            return f"{self.quote(name.schema)}.{self.quote(name.table)}"
        return self.quote(name.table)

    def table_key(self, name: TableName) -> tuple:
        return (name.schema.upper() if name.schema else None, name.table.upper())

    def name_problems(self, name: TableName) -> list[tuple[str, str]]:
        problems = []
        for part, value in (("table", name.table), ("schema", name.schema)):
            if value is None:
                continue
            if len(value.encode("utf-8")) > MAX_IDENTIFIER:
                problems.append((part, f"is {len(value.encode('utf-8'))} bytes long; Oracle names hold at most {MAX_IDENTIFIER}"))
            if '"' in value:
                problems.append((part, "contains '\"', which Oracle names cannot hold"))
        return problems

    # =====================================================================================
    # -- columns --------------------------------------------------------------------------
    # =====================================================================================
    # None of the transport's (saga-only); `check` does not read Oracle (expected_shape is the base's).

    # =====================================================================================
    # -- DDL (saga tables only: queue, delayed and subscription operations emit nothing) ---
    # =====================================================================================
    def create_table(self, spec: TableSpec, profile: Profile) -> list[str]:
        return super().create_table(spec, profile) if self.holds(spec.kind) else []

    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        if not self.holds(spec.kind):
            return []
        table = self._saga_fields(spec)["table"]
        batches = []
        if not discard_messages:
            condition = self.OUTBOX_UNDISPATCHED if spec.kind is Kind.OUTBOX else "1 = 1"
            batches.append(self.GUARD.format(table=table, condition=condition, message=self.literal(self.refusal(spec))))
        return batches + [self.DROP_TABLE.format(table=table)]

    # =====================================================================================
    # -- runtime statements ---------------------------------------------------------------
    # =====================================================================================
    # None of the transport's (saga-only); a saga table's statements are Dialect.saga_statements'.

    # =====================================================================================
    # -- sagas ----------------------------------------------------------------------------
    # =====================================================================================
    CORRELATION_TYPES = {"string": "NVARCHAR2(200)", "datetime": "TIMESTAMP", "int": "NUMBER(19)", "guid": "VARCHAR2(38)"}
    CREATE_SAGA = """\
CREATE TABLE {table} (
    ID VARCHAR2(38) NOT NULL,
    METADATA CLOB NOT NULL,
    DATA CLOB NOT NULL,
    PERSISTENCEVERSION VARCHAR2(23) NOT NULL,
    SAGATYPEVERSION VARCHAR2(23) NOT NULL,
    CONCURRENCY NUMBER(9) NOT NULL,
    CONSTRAINT {primary_key} PRIMARY KEY (ID) ENABLE
)"""
    ADD_CORRELATION = "ALTER TABLE {table} ADD ({column} {column_type})"
    CREATE_CORRELATION_INDEX = "CREATE UNIQUE INDEX {index} ON {table} ({column} ASC)"
    GUARD = """\
DECLARE
    pending NUMBER;
BEGIN
    SELECT COUNT(*) INTO pending FROM {table} WHERE {condition} AND ROWNUM = 1;
    IF pending > 0 THEN
        RAISE_APPLICATION_ERROR(-20001, {message});
    END IF;
END;"""
    DROP_CORRELATION_INDEX = "DROP INDEX {index}"
    DROP_CORRELATION = "ALTER TABLE {table} DROP COLUMN {column}"
    DROP_TABLE = "DROP TABLE {table}"
    # SQL persistence's runtime locks what it reads with FOR UPDATE. A driver binds :Name
    # (oracledb's named style), which is how upstream writes these parameters.
    SAGA_GET_BY_ID = Dialect.SAGA_GET_BY_ID + "\nFOR UPDATE"
    SAGA_FIND = Dialect.SAGA_FIND + "\nFOR UPDATE"
    SAGA_FIND_BY_TRANSITIONAL = Dialect.SAGA_FIND_BY_TRANSITIONAL + "\nFOR UPDATE"

    # -- outbox tables (upstream-conformance §8): <PREFIX>OD, its key "<T>_PK", its index "<T>_IX" ---
    OUTBOX_COLUMNS = (
        Column("MESSAGEID", "NVARCHAR2(200)", False),
        Column("DISPATCHED", "NUMBER(1,0)", False),
        Column("DISPATCHEDAT", "TIMESTAMP", True),
        Column("OPERATIONS", "CLOB", False),
        Column("PERSISTENCEVERSION", "VARCHAR2(23)", False),
    )
    CREATE_OUTBOX = """\
CREATE TABLE {table} (
    MESSAGEID NVARCHAR2(200) NOT NULL,
    DISPATCHED NUMBER(1,0) DEFAULT 0 NOT NULL CHECK (DISPATCHED IN (0, 1)),
    DISPATCHEDAT TIMESTAMP,
    OPERATIONS CLOB NOT NULL,
    PERSISTENCEVERSION VARCHAR2(23) NOT NULL,
    CONSTRAINT {primary_key} PRIMARY KEY (MESSAGEID) ENABLE
)"""
    CREATE_OUTBOX_INDEX = "CREATE INDEX {index} ON {table} (DISPATCHED, DISPATCHEDAT)"
    # The outbox's cleanup: the batch as a ROWNUM bound (the other statements are the defaults).
    OUTBOX_CLEANUP = """\
DELETE FROM {table}
WHERE Dispatched = 1 AND DispatchedAt < @DispatchedBefore AND ROWNUM <= @BatchSize"""

    def create_outbox(self, spec: TableSpec, profile: Profile | None = None) -> list[str]:
        fields = self._saga_fields(spec)
        index = self.qualified(TableName(self.persistence_table(spec).table + "_IX", spec.name.schema))
        return [self.CREATE_OUTBOX.format(**fields), self.CREATE_OUTBOX_INDEX.format(index=index, **fields)]

    def outbox_name_problems(self, spec: TableSpec) -> list[str]:
        """SQL persistence's Oracle limit: a table prefix of at most 25 ASCII characters (<PREFIX>OD_PK fits 30)."""
        problems = [f"schema name {problem}" for part, problem in self.name_problems(spec.name) if part == "schema"]
        prefix = spec.saga_prefix or ""
        if len(prefix) > MAX_TABLE_PREFIX or not prefix.isascii() or '"' in prefix:
            problems.append(f"table prefix {prefix!r} must be at most {MAX_TABLE_PREFIX} ASCII characters for SQL persistence on Oracle")
        return problems

    def persistence_table(self, spec: TableSpec) -> TableName:
        if spec.kind is Kind.OUTBOX:
            return TableName((spec.saga_prefix or "").upper() + "OD", spec.name.schema)
        return TableName(self.saga_suffix(spec).upper(), spec.name.schema)

    def correlation_column(self, prop: str) -> str:
        return ("CORR_" + prop.upper())[:MAX_IDENTIFIER]

    def correlation_index(self, spec: TableSpec, prop: str) -> str:
        digest = hashlib.sha1(f"{self.persistence_table(spec).table}/{prop}".encode()).hexdigest()
        return "SAGAIDX_" + digest[:22].upper()

    def saga_index_names(self, spec: TableSpec) -> list[TableName]:
        return [TableName(self.correlation_index(spec, c.name), spec.name.schema) for c in spec.correlations]

    def saga_name_problems(self, spec: TableSpec) -> list[str]:
        """SQL persistence's Oracle limits: a suffix of at most 27 ASCII characters, a prefix of at most 25."""
        problems = [f"schema name {problem}" for part, problem in self.name_problems(spec.name) if part == "schema"]
        suffix, prefix = self.saga_suffix(spec), spec.saga_prefix or ""
        if len(suffix) > MAX_SAGA_SUFFIX or not suffix.isascii() or '"' in suffix:
            problems.append(
                f"table suffix {suffix!r} must be at most {MAX_SAGA_SUFFIX} ASCII characters without '\"' "
                "(SQL persistence names the Oracle table from it alone; set table_suffix)"
            )
        if len(prefix) > MAX_TABLE_PREFIX or not prefix.isascii():
            problems.append(f"table prefix {prefix!r} must be at most {MAX_TABLE_PREFIX} ASCII characters for SQL persistence on Oracle")
        columns = [self.correlation_column(c.name) for c in spec.correlations]
        if len(columns) == 2 and columns[0] == columns[1]:
            problems.append(f"both correlation properties become column {columns[0]!r} (cut to {MAX_IDENTIFIER} characters)")
        problems += [f"column {column!r} contains '\"', which Oracle names cannot hold" for column in columns if '"' in column]
        return problems

    def _saga_fields(self, spec: TableSpec, correlation: Correlation | None = None) -> dict:
        table = self.persistence_table(spec)
        fields = {"table": self.qualified(table), "primary_key": self.quote(table.table + "_PK")}
        if correlation is not None:
            fields.update(
                column=self.quote(self.correlation_column(correlation.name)),
                column_type=self.CORRELATION_TYPES[correlation.type],
                index=self.qualified(TableName(self.correlation_index(spec, correlation.name), spec.name.schema)),
            )
        return fields

    def drop_saga_correlation(self, spec: TableSpec, correlation: Correlation, require: Correlation | None) -> list[str]:
        fields = self._saga_fields(spec, correlation)
        batches = []
        if require is not None:
            condition = self.quote(self.correlation_column(require.name)) + " IS NULL"
            message = self.literal(self.backfill_refusal(spec, correlation, require))
            batches.append(self.GUARD.format(table=fields["table"], condition=condition, message=message))
        return batches + [self.DROP_CORRELATION_INDEX.format(**fields), self.DROP_CORRELATION.format(**fields)]

    # =====================================================================================
    # -- grants (sqltransport-schema grants) ----------------------------------------------
    # =====================================================================================
    class Grants(Dialect.Grants):
        unsupported = "grants are not generated for Oracle; grant SELECT, INSERT, UPDATE, DELETE on the saga tables"
        unsupported_monitor = "grants are not generated for Oracle; a monitoring login needs SELECT on the saga tables, nothing more"
