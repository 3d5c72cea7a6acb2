"""PostgreSQL's saga tables (upstream-conformance §7) as SQL persistence's installer leaves
them, their correlation columns and indexes, and the saga statements.

A mixin of `PostgreSQL` (engines/postgresql/__init__.py).
"""

from __future__ import annotations

import hashlib
import textwrap

from ...schema import Correlation, Kind, TableName, TableSpec
from ...shapes import outbox_columns, saga_shape_columns
from ..base import Dialect

# The installer leaves these nullable on PostgreSQL (upstream-conformance §7, §8).
_NULLABLE_VERSIONS = frozenset({"persistenceversion", "sagatypeversion"})
_NULLABLE_OUTBOX = frozenset({"DispatchedAt", "PersistenceVersion"})


class Sagas:
    """Saga tables: their DDL, their names' limits and the templates of the saga statements."""

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
    # The identifiers CREATE_SAGA quotes (lower case -> as written): the saga statements quote them too.
    SAGA_IDENTIFIERS = {name.lower(): name for name in ("Id", "Metadata", "Data", "PersistenceVersion", "SagaTypeVersion", "Concurrency")}
    SAGA_SHAPE_COLUMNS = saga_shape_columns(
        "uuid", "text", "jsonb", "character varying(23)", "character varying(23)", "integer", nullable=_NULLABLE_VERSIONS
    )
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

    # -- outbox tables (upstream-conformance §8) ----------------------------------------------
    # The installer's index names are not prefixed: they share the schema's namespace, so a second
    # outbox table in the same schema gets none (IF NOT EXISTS), as with the installer.
    OUTBOX_COLUMNS = outbox_columns(
        "character varying(200)", "boolean", "timestamp without time zone", "character varying(23)", "jsonb", nullable=_NULLABLE_OUTBOX
    )
    OUTBOX_DEFAULTS = {"dispatched": "false"}  # as pg_get_expr prints CREATE_OUTBOX's DEFAULT
    CREATE_OUTBOX = """\
CREATE TABLE IF NOT EXISTS {table} (
    "MessageId" character varying(200) PRIMARY KEY,
    "Dispatched" boolean NOT NULL DEFAULT false,
    "DispatchedAt" timestamp,
    "PersistenceVersion" character varying(23),
    "Operations" jsonb NOT NULL
)"""
    CREATE_OUTBOX_INDEXES = tuple(
        f'CREATE INDEX IF NOT EXISTS "{index}" ON {{table}} USING btree ("{column}" ASC NULLS LAST)'
        for index, column in Dialect.OUTBOX_INDEXES.items()
    )
    OUTBOX_UNDISPATCHED = '"Dispatched" = false'
    # The outbox's statements (docs/outbox.md): quoted columns; the cleanup deletes one batch by ctid.
    OUTBOX_STORE = """\
INSERT INTO {table} ("MessageId", "Operations", "PersistenceVersion")
VALUES (@MessageId, @Operations, @PersistenceVersion)"""
    OUTBOX_GET = """\
SELECT "Dispatched", "Operations"
FROM {table}
WHERE "MessageId" = @MessageId"""
    OUTBOX_SET_AS_DISPATCHED = """\
UPDATE {table}
SET "Dispatched" = true, "DispatchedAt" = @DispatchedAt, "Operations" = '[]'
WHERE "MessageId" = @MessageId"""
    # The pump's batch forms: the batch's ids as one array (list_parameter).
    OUTBOX_GET_BATCH = """\
SELECT "MessageId", "Dispatched", "Operations"
FROM {table}
WHERE "MessageId" = ANY(@MessageIds)"""
    OUTBOX_SET_AS_DISPATCHED_BATCH = """\
UPDATE {table}
SET "Dispatched" = true, "DispatchedAt" = @DispatchedAt, "Operations" = '[]'
WHERE "MessageId" = ANY(@MessageIds)"""
    # The lock's rows as they come (the pump orders them by Seq), each outer-joined with its row by
    # the primary key: the queue's uuid Id as text is the MessageId the pump stores.
    OUTBOX_LOCK_BATCH = """\
SELECT q.*, o."Dispatched", o."Operations"
FROM ({lock}) q
LEFT JOIN {table} o ON o."MessageId" = q.id::text"""
    # The take's own DELETE after the rows' UPDATE, which a WITH runs once, whole, in the same
    # snapshot (the two touch different tables); the statement's row count is the take's.
    OUTBOX_TAKE_BATCH = "WITH dispatched AS (\n" + textwrap.indent(OUTBOX_SET_AS_DISPATCHED_BATCH, "    ") + "\n)\n{take}"
    OUTBOX_CLEANUP = """\
DELETE FROM {table}
WHERE ctid IN (
    SELECT ctid FROM {table}
    WHERE "Dispatched" = true AND "DispatchedAt" < @DispatchedBefore
    LIMIT @BatchSize
)"""

    def correlation_index(self, spec: TableSpec, prop: str) -> str:
        """<table prefix>_i_<SHA-1 of '<suffix>/<property>' in UTF-8, 40 upper-case hex digits>,
        as SQL persistence names it (the prefix as configured: a longer one is refused)."""
        digest = hashlib.sha1(f"{self.saga_suffix(spec)}/{prop}".encode()).hexdigest().upper()
        return f"{spec.saga_prefix or ''}_i_{digest}"

    def saga_index_names(self, spec: TableSpec) -> list[TableName]:
        if spec.kind is Kind.OUTBOX:  # the installer's unprefixed names: two outboxes in one schema would share them
            return [TableName(index, spec.name.schema) for index in self.OUTBOX_INDEXES]
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
        if size > self.MAX_IDENTIFIER_BYTES:
            problems.append(f"table name is {size} bytes in UTF-8; PostgreSQL names hold at most {self.MAX_IDENTIFIER_BYTES}")
        for c in spec.correlations:
            for what, value in (("column", self.correlation_column(c.name)), ("index", self.correlation_index(spec, c.name))):
                if len(value.encode("utf-8")) > self.MAX_IDENTIFIER_BYTES:
                    problems.append(f"{what} {value!r} is longer than PostgreSQL's {self.MAX_IDENTIFIER_BYTES}-byte identifier limit")
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
