"""SQL Server's saga tables (SQL persistence's installer) and their runtime statements (the `Sagas` part of `MSSQL`)."""

from __future__ import annotations

from ...schema import Correlation, TableSpec
from ...shapes import outbox_columns, saga_shape_columns
from ...versions import Profile


class Sagas:
    """Mixin of `MSSQL`: saga DDL, each step its own catalog-guarded batch, and the locking reads."""

    # -- saga tables (upstream-conformance §7) ---------------------------------------------------
    # Each step its own batch, guarded by the catalog, so a re-run skips what exists (a column
    # added in a batch is visible to the next batch's CREATE INDEX, not to the same batch's).
    CORRELATION_TYPES = {
        "string": "nvarchar(200)",
        "datetime": "datetime",
        "datetimeoffset": "datetimeoffset",
        "int": "bigint",
        "guid": "uniqueidentifier",
    }
    CREATE_SAGA = """\
IF OBJECT_ID(N'{name}', N'U') IS NULL
BEGIN
    CREATE TABLE {table} (
        Id uniqueidentifier NOT NULL PRIMARY KEY,
        Metadata nvarchar(max) NOT NULL,
        Data nvarchar(max) NOT NULL,
        PersistenceVersion varchar(23) NOT NULL,
        SagaTypeVersion varchar(23) NOT NULL,
        Concurrency int NOT NULL
    );
END;"""
    ADD_CORRELATION = """\
IF NOT EXISTS (SELECT * FROM {sys}.columns WHERE object_id = OBJECT_ID(N'{name}') AND name = N'{column_name}')
    ALTER TABLE {table} ADD {column} {column_type} NULL;"""
    CREATE_CORRELATION_INDEX = """\
IF NOT EXISTS (SELECT * FROM {sys}.indexes WHERE object_id = OBJECT_ID(N'{name}') AND name = N'{index_name}')
    CREATE UNIQUE NONCLUSTERED INDEX {index} ON {table} ({column})
    WHERE {column} IS NOT NULL;"""
    DROP_CORRELATION = """\
IF EXISTS (SELECT * FROM {sys}.columns WHERE object_id = OBJECT_ID(N'{name}') AND name = N'{column_name}')
BEGIN{guard}
    IF EXISTS (SELECT * FROM {sys}.indexes WHERE object_id = OBJECT_ID(N'{name}') AND name = N'{index_name}')
        DROP INDEX {index} ON {table};
    ALTER TABLE {table} DROP COLUMN {column};
END;"""
    BACKFILL_GUARD = """
    IF EXISTS (SELECT * FROM {table} WHERE {require} IS NULL)
        THROW 50000, N'{message}', 1;"""
    # The installer's check of an existing column: INFORMATION_SCHEMA's DATA_TYPE, where it stops.
    # INFORMATION_SCHEMA's names in their exact (upper) case: a case-sensitive database knows no other.
    VERIFY_CORRELATION_TYPE = """\
DECLARE @found sysname = (
    SELECT DATA_TYPE FROM {information_schema}.COLUMNS
    WHERE TABLE_SCHEMA = N'{schema_name}' AND TABLE_NAME = N'{table_name}' AND COLUMN_NAME = N'{column_name}'
);
IF @found <> N'{data_type}'
BEGIN
    DECLARE @refusal nvarchar(2048) = N'{message_head}' + @found + N'{message_tail}';
    THROW 50000, @refusal, 1;
END;"""
    # data_type as INFORMATION_SCHEMA.COLUMNS reports each correlation type
    DATA_TYPES = {
        "string": "nvarchar",
        "datetime": "datetime",
        "datetimeoffset": "datetimeoffset",
        "int": "bigint",
        "guid": "uniqueidentifier",
    }
    # SQL persistence's runtime statements lock what they read with UPDLOCK.
    SAGA_GET_BY_ID = """\
SELECT Id, SagaTypeVersion, Concurrency, Metadata, Data
FROM {table} WITH (UPDLOCK)
WHERE Id = @Id"""
    SAGA_FIND = """\
SELECT Id, SagaTypeVersion, Concurrency, Metadata, Data
FROM {table} WITH (UPDLOCK)
WHERE {correlation} = @propertyValue"""
    SAGA_FIND_BY_TRANSITIONAL = """\
SELECT Id, SagaTypeVersion, Concurrency, Metadata, Data
FROM {table} WITH (UPDLOCK)
WHERE {transitional} = @TransitionalCorrelationId"""
    SAGA_SHAPE_COLUMNS = saga_shape_columns("uniqueidentifier", "nvarchar(max)", "nvarchar(max)", "varchar(23)", "varchar(23)", "int")

    # -- outbox tables (upstream-conformance §8): each step its own catalog-guarded batch -------------
    OUTBOX_COLUMNS = outbox_columns("nvarchar(200)", "bit", "datetime", "varchar(23)", "nvarchar(max)")
    CREATE_OUTBOX = """\
IF OBJECT_ID(N'{name}', N'U') IS NULL
BEGIN
    CREATE TABLE {table} (
        MessageId nvarchar(200) NOT NULL PRIMARY KEY NONCLUSTERED,
        Dispatched bit NOT NULL DEFAULT 0,
        DispatchedAt datetime,
        PersistenceVersion varchar(23) NOT NULL,
        Operations nvarchar(max) NOT NULL
    );
END;"""
    OUTBOX_INDEX = "Index_DispatchedAt"  # dispatched rows by age: what the cleanup deletes
    OUTBOX_INDEX_PREDICATE = "Dispatched = 1"
    CREATE_OUTBOX_INDEXES = (
        f"""\
IF NOT EXISTS (SELECT * FROM {{sys}}.indexes WHERE object_id = OBJECT_ID(N'{{name}}') AND name = N'{OUTBOX_INDEX}')
    CREATE INDEX {OUTBOX_INDEX} ON {{table}} (DispatchedAt)
    WHERE {OUTBOX_INDEX_PREDICATE};""",
    )
    # The outbox's cleanup: one batch of old dispatched rows, skipping rows another session locks.
    OUTBOX_CLEANUP = """\
DELETE TOP (@BatchSize) FROM {table} WITH (ROWLOCK, READPAST)
WHERE Dispatched = 1 AND DispatchedAt < @DispatchedBefore
OPTION (MAXDOP 1)"""

    def saga_name_problems(self, spec: TableSpec) -> list[str]:
        problems = super().saga_name_problems(spec)
        for c in spec.correlations:
            for what, value in (("column", self.correlation_column(c.name)), ("index", self.correlation_index(spec, c.name))):
                if len(value) > self.MAX_IDENTIFIER:
                    problems.append(
                        f"{what} {value!r} is {len(value)} characters long; SQL Server names hold at most {self.MAX_IDENTIFIER}"
                    )
        return problems

    def _outbox_fields(self, spec: TableSpec, profile: Profile | None = None) -> dict:
        return self._saga_fields(spec, profile=profile)

    def _saga_fields(self, spec: TableSpec, correlation: Correlation | None = None, profile: Profile | None = None) -> dict:
        fields = self._fields(spec, profile)
        if correlation is not None:
            column = self.correlation_column(correlation.name)
            index = self.correlation_index(spec, correlation.name)
            fields.update(
                column=self.quote(column),
                column_name=self.literal_text(column),
                column_type=self.CORRELATION_TYPES[correlation.type],
                index=self.quote(index),
                index_name=self.literal_text(index),
            )
        return fields

    def create_saga(self, spec: TableSpec, profile: Profile | None = None) -> list[str]:
        batches = [self.CREATE_SAGA.format(**self._saga_fields(spec, profile=profile))]
        for correlation in spec.correlations:
            batches += self.add_saga_correlation(spec, correlation, profile)
        return batches

    def add_saga_correlation(self, spec: TableSpec, correlation: Correlation, profile: Profile | None = None) -> list[str]:
        fields = self._saga_fields(spec, correlation, profile)
        data_type = self.DATA_TYPES[correlation.type]
        head, _, tail = self.wrong_type_message(spec, correlation, data_type).partition("{found}")
        catalog = spec.name.catalog if profile is None or profile.three_part_names else None
        verify = self.VERIFY_CORRELATION_TYPE.format(
            information_schema=(self.quote(catalog) + "." if catalog is not None else "") + "INFORMATION_SCHEMA",
            schema_name=self.literal_text(spec.name.schema if spec.name.schema is not None else self.default_schema),
            table_name=self.literal_text(spec.name.table),
            data_type=data_type,
            message_head=self.literal_text(head),
            message_tail=self.literal_text(tail),
            **fields,
        )
        return [self.ADD_CORRELATION.format(**fields), verify, self.CREATE_CORRELATION_INDEX.format(**fields)]

    def drop_saga_correlation(self, spec: TableSpec, correlation: Correlation, require: Correlation | None) -> list[str]:
        fields = self._saga_fields(spec, correlation)
        guard = ""
        if require is not None:
            message = self.literal_text(self.backfill_refusal(spec, correlation, require))
            guard = self.BACKFILL_GUARD.format(require=self.quote(self.correlation_column(require.name)), message=message, **fields)
        return [self.DROP_CORRELATION.format(guard=guard, **fields)]
