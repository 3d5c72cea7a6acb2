"""SQL Server: the transport's own DDL for every version, in one place a DBA can read.

Placeholders: {table} is the bracket-quoted qualified name, {name} the same text
escaped for use inside an N'...' literal, {sys} the catalog's sys schema
(`[catalog].sys` or `sys`). Nothing else ever reaches the SQL text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..schema import Correlation, Kind, SchemaName, TableName, TableSpec
from ..shapes import Column, IndexShape, TableShape, normalise_predicate, shape_columns
from ..statements import MESSAGE, MESSAGE_WITH_CORRELATION, Statement
from ..versions import FEATURE_SINCE, ExpiresIndex, PeekForm, Profile, ScriptStyle, first_release
from .base import Dialect

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sqlalchemy.engine import URL, Connection

    from ..grants import GrantPlan, TableGrant

MAX_IDENTIFIER = 128


class MSSQL(Dialect):
    name = "mssql"
    sqlalchemy_name = "mssql"
    drivers = ("pyodbc",)
    default_schema = "dbo"
    case_insensitive_names = True  # the default collation compares names without case

    # =====================================================================================
    # -- identifiers and names ------------------------------------------------------------
    # =====================================================================================
    def quote(self, identifier: str) -> str:
        return "[" + identifier.replace("]", "]]") + "]"

    def literal_text(self, text: str) -> str:
        """Text placed inside an existing '...' literal."""
        return text.replace("'", "''")

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        schema = name.schema if name.schema is not None else self.default_schema
        parts = [schema, name.table]
        if name.catalog is not None and (profile is None or profile.three_part_names):
            parts.insert(0, name.catalog)
        return ".".join(self.quote(part) for part in parts)

    def _sys(self, catalog: str | None) -> str:
        return f"{self.quote(catalog)}.sys" if catalog is not None else "sys"

    def _fields(self, spec: TableSpec, profile: Profile | None) -> dict:
        table = self.qualified(spec.name, profile)
        catalog = spec.name.catalog if profile is None or profile.three_part_names else None
        return {"table": table, "name": self.literal_text(table), "sys": self._sys(catalog)}

    def name_problems(self, name: TableName) -> list[tuple[str, str]]:
        problems = []
        for part, value in (("table", name.table), ("schema", name.schema), ("catalog", name.catalog)):
            if value is not None and len(value) > MAX_IDENTIFIER:
                problems.append((part, f"is {len(value)} characters long; SQL Server names hold at most {MAX_IDENTIFIER}"))
        return problems

    # =====================================================================================
    # -- columns of each table kind, and the shapes our DDL gives them (check) ------------
    # =====================================================================================
    # Types as shapes_from_rows prints them from sys.types and max_length. Headers is nvarchar(max)
    # or varchar(max), by version; Endpoint is declared without NOT NULL, the primary key makes it so.
    COLUMNS = {
        Kind.QUEUE: (
            Column("Id", "uniqueidentifier", False),
            Column("CorrelationId", "varchar(255)", True),
            Column("ReplyToAddress", "varchar(255)", True),
            Column("Recoverable", "bit", False),
            Column("Expires", "datetime", True),
            Column("Headers", None, False),
            Column("Body", "varbinary(max)", True),
            Column("RowVersion", "bigint", False),
        ),
        Kind.DELAYED: (
            Column("Headers", "nvarchar(max)", False),
            Column("Body", "varbinary(max)", True),
            Column("Due", "datetime", False),
            Column("RowVersion", "bigint", False),
        ),
        Kind.SUBSCRIPTIONS: (
            Column("QueueAddress", "nvarchar(200)", False),
            Column("Endpoint", "nvarchar(200)", False),
            Column("Topic", "nvarchar(200)", False),
        ),
    }

    # -- expected shapes (check; the live side is Catalog.read_shapes) -------------------
    BODY_STRING_COLUMN = ("nvarchar(max)", True)  # AS CAST(Body AS nvarchar(max)): computed, nullable
    EXPIRES_PREDICATE = normalise_predicate("Expires IS NOT NULL")

    def expected_shape(self, spec: TableSpec, profile: Profile) -> TableShape:
        if spec.kind is Kind.QUEUE:
            columns = shape_columns(self.COLUMNS[Kind.QUEUE], headers="nvarchar(max)" if profile.headers_unicode else "varchar(max)")
            computed = set()
            if spec.body_string:
                columns["bodystring"] = self.BODY_STRING_COLUMN
                computed.add("bodystring")
            indexes = [IndexShape(("rowversion",), name="Index_RowVersion", clustered=profile.rowversion_clustered)]
            if profile.expires_index is not ExpiresIndex.NONE:
                predicate = self.EXPIRES_PREDICATE if profile.expires_index is ExpiresIndex.FILTERED else None
                indexes.append(
                    IndexShape(("expires",), predicate=predicate, name="Index_Expires", clustered=False, include=("id", "rowversion"))
                )
            return TableShape(columns, indexes, identity={"rowversion"}, computed=computed)
        if spec.kind is Kind.DELAYED:
            indexes = [IndexShape(("due",), name="Index_Due", clustered=False)]
            return TableShape(shape_columns(self.COLUMNS[Kind.DELAYED]), indexes, identity={"rowversion"})
        if spec.kind is Kind.SAGA:
            columns = dict(self.SAGA_SHAPE_COLUMNS)
            indexes = [IndexShape(("id",), unique=True, clustered=True)]  # PRIMARY KEY (clustered by default)
            for c in spec.correlations:
                column = self.correlation_column(c.name).lower()
                type_ = self.CORRELATION_TYPES[c.type] + ("(7)" if c.type == "datetimeoffset" else "")
                columns[column] = (type_, True)
                predicate = normalise_predicate(f"{column} IS NOT NULL")
                indexes.append(
                    IndexShape((column,), unique=True, predicate=predicate, name=self.correlation_index(spec, c.name), clustered=False)
                )
            return TableShape(columns, indexes)
        indexes = [IndexShape(("endpoint", "topic"), unique=True, clustered=True)]  # PRIMARY KEY CLUSTERED
        return TableShape(shape_columns(self.COLUMNS[Kind.SUBSCRIPTIONS]), indexes)

    # =====================================================================================
    # -- DDL ------------------------------------------------------------------------------
    # =====================================================================================
    # -- the transport's installation guard (seed 003) ---------------------------------
    GUARD_APPLOCK = """\
IF EXISTS (
    SELECT *
    FROM {sys}.{catalog_view}
    WHERE {exists_condition})
RETURN

EXEC sp_getapplock @Resource = '{name}_lock', @LockMode = 'Exclusive'

IF EXISTS (
    SELECT *
    FROM {sys}.{catalog_view}
    WHERE {exists_condition})
BEGIN
    EXEC sp_releaseapplock @Resource = '{name}_lock'
    RETURN
END
"""
    TRY_CATCH = """\
BEGIN TRY
{body}
END TRY
BEGIN CATCH
    EXEC sp_releaseapplock @Resource = '{name}_lock';
    THROW;
END CATCH;

EXEC sp_releaseapplock @Resource = '{name}_lock'"""
    NO_TRY_CATCH = """\
{body}

EXEC sp_releaseapplock @Resource = '{name}_lock'"""
    TABLE_EXISTS = "object_id = OBJECT_ID(N'{name}')\n    AND type in (N'U')"
    COLUMN_EXISTS = "object_id = OBJECT_ID(N'{name}')\n    AND name = '{column}'"

    # -- queue table ---------------------------------------------------------------------
    CREATE_QUEUE = """\
    CREATE TABLE {table} (
        Id uniqueidentifier NOT NULL,
        CorrelationId varchar(255),
        ReplyToAddress varchar(255),
        Recoverable bit NOT NULL,
        Expires datetime,
        Headers {headers} NOT NULL,
        Body varbinary(max),
        RowVersion bigint IDENTITY(1,1) NOT NULL
    );
    CREATE {rowversion_kind} INDEX Index_RowVersion ON {table}
    (
        [RowVersion] ASC
    )"""
    INDEX_EXPIRES = """
    CREATE NONCLUSTERED INDEX Index_Expires ON {table}
    (
        Expires
    )
    INCLUDE
    (
        Id,
        RowVersion
    ){filter}"""
    EXPIRES_FILTER = """
    WHERE
        Expires IS NOT NULL"""

    # Versions 1.x and 2.x: two-part names, an IF NOT EXISTS guard, bracketed types.
    CREATE_QUEUE_V1 = """\
IF NOT  EXISTS (SELECT * FROM sys.objects WHERE object_id = OBJECT_ID(N'{name}') AND type in (N'U'))
  BEGIN
    CREATE TABLE {table}(
        [Id] [uniqueidentifier] NOT NULL,
        [CorrelationId] [varchar](255) NULL,
        [ReplyToAddress] [varchar](255) NULL,
        [Recoverable] [bit] NOT NULL,
        [Expires] [datetime] NULL,
        [Headers] [{headers_v1}](max) NOT NULL,
        [Body] [varbinary](max) NULL,
        [RowVersion] [bigint] IDENTITY(1,1) NOT NULL
    ) ON [PRIMARY];
    CREATE CLUSTERED INDEX [Index_RowVersion] ON {table}
    ( [RowVersion] ASC ){expires_index}
  END"""

    # -- delayed and subscription tables --------------------------------------------------
    CREATE_DELAYED = """\
    CREATE TABLE {table} (
        Headers nvarchar(max) NOT NULL,
        Body varbinary(max),
        Due datetime NOT NULL,
        RowVersion bigint IDENTITY(1,1) NOT NULL
    );
    CREATE NONCLUSTERED INDEX [Index_Due] ON {table}
    (
        [Due]
    )"""
    CREATE_SUBSCRIPTIONS = """\
    CREATE TABLE {table} (
        QueueAddress NVARCHAR(200) NOT NULL,
        Endpoint NVARCHAR(200),
        Topic NVARCHAR(200) NOT NULL,
        PRIMARY KEY CLUSTERED
        (
            Endpoint,
            Topic
        )
    )"""

    # -- optional column (4.1+) ------------------------------------------------------------
    ADD_BODY_STRING = "    ALTER TABLE {table} ADD BodyString AS CAST(Body AS nvarchar(max));"
    DROP_BODY_STRING = """\
IF EXISTS (SELECT * FROM {sys}.columns WHERE object_id = OBJECT_ID(N'{name}') AND name = 'BodyString')
    ALTER TABLE {table} DROP COLUMN BodyString;"""

    # -- guarded drop: the database refuses while the queue holds rows --------------------
    DROP_GUARDED = """\
IF OBJECT_ID(N'{name}', N'U') IS NOT NULL
BEGIN
    IF EXISTS (SELECT * FROM {table})
        THROW 50000, N'{message}', 1;
    DROP TABLE {table};
END"""
    DROP_DISCARDING = """\
IF OBJECT_ID(N'{name}', N'U') IS NOT NULL
    DROP TABLE {table};"""

    # -- upgrades between versions (transport-facts §1, "upgrade steps") -----------------
    HEADERS_TYPE = """\
IF EXISTS (
    SELECT *
    FROM {sys}.columns c
    INNER JOIN {sys}.types t ON c.user_type_id = t.user_type_id
    WHERE c.object_id = OBJECT_ID(N'{name}')
    AND c.name = 'Headers'
    AND t.name = '{old_type}')
    ALTER TABLE {table} ALTER COLUMN Headers {new_type}(max) NOT NULL;"""
    ROWVERSION_KIND = """\
IF EXISTS (
    SELECT *
    FROM {sys}.indexes
    WHERE object_id = OBJECT_ID(N'{name}')
    AND name = 'Index_RowVersion'
    AND type_desc <> '{new_kind}')
BEGIN
    DROP INDEX Index_RowVersion ON {table};
    CREATE {new_kind} INDEX Index_RowVersion ON {table}
    (
        [RowVersion] ASC
    );
END"""
    EXPIRES_INDEX = """\
IF NOT EXISTS (
    SELECT *
    FROM {sys}.indexes
    WHERE object_id = OBJECT_ID(N'{name}')
    AND name = 'Index_Expires'
    AND has_filter = {has_filter})
BEGIN
    IF EXISTS (SELECT * FROM {sys}.indexes WHERE object_id = OBJECT_ID(N'{name}') AND name = 'Index_Expires')
        DROP INDEX Index_Expires ON {table};
{create}
END"""
    DROP_EXPIRES_INDEX = """\
IF EXISTS (SELECT * FROM {sys}.indexes WHERE object_id = OBJECT_ID(N'{name}') AND name = 'Index_Expires')
    DROP INDEX Index_Expires ON {table};"""

    # -- schemas ---------------------------------------------------------------------------
    CREATE_SCHEMA = """\
IF NOT EXISTS (SELECT * FROM {sys}.schemas WHERE name = N'{schema_name}')
    EXEC {sp_executesql} N'{statement}';"""
    DROP_SCHEMA = """\
IF EXISTS (SELECT * FROM {sys}.schemas WHERE name = N'{schema_name}')
    AND NOT EXISTS (
        SELECT *
        FROM {sys}.objects o
        INNER JOIN {sys}.schemas s ON o.schema_id = s.schema_id
        WHERE s.name = N'{schema_name}')
    EXEC {sp_executesql} N'{statement}';"""

    # -- creation --------------------------------------------------------------------------
    def _guarded(self, body: str, fields: dict, profile: Profile, exists_condition: str, catalog_view: str) -> str:
        guard = self.GUARD_APPLOCK.format(exists_condition=exists_condition.format(**fields), catalog_view=catalog_view, **fields)
        wrapper = self.TRY_CATCH if profile.script_style is ScriptStyle.APPLOCK_TRY_CATCH else self.NO_TRY_CATCH
        return guard + "\n" + wrapper.format(body=body, **fields)

    def _guarded_table(self, body: str, fields: dict, profile: Profile) -> str:
        return self._guarded(body, fields, profile, self.TABLE_EXISTS, "objects")

    def _expires_index(self, kind: ExpiresIndex, fields: dict) -> str:
        if kind is ExpiresIndex.NONE:
            return ""
        filter_ = self.EXPIRES_FILTER if kind is ExpiresIndex.FILTERED else ""
        return self.INDEX_EXPIRES.format(filter=filter_, **fields)

    def create_queue(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        if profile.script_style is ScriptStyle.IF_NOT_EXISTS:
            expires = self._expires_index(profile.expires_index, fields)
            batch = self.CREATE_QUEUE_V1.format(
                headers_v1="nvarchar" if profile.headers_unicode else "varchar",
                expires_index=expires,
                **fields,
            )
        else:
            body = self.CREATE_QUEUE.format(
                headers="nvarchar(max)" if profile.headers_unicode else "varchar(max)",
                rowversion_kind="CLUSTERED" if profile.rowversion_clustered else "NONCLUSTERED",
                **fields,
            ) + self._expires_index(profile.expires_index, fields)
            batch = self._guarded_table(body, fields, profile)
        batches = [batch]
        if spec.body_string:
            batches += self.add_body_string(spec, profile)
        return batches

    def create_delayed(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        return [self._guarded_table(self.CREATE_DELAYED.format(**fields), fields, profile)]

    def create_subscriptions(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        return [self._guarded_table(self.CREATE_SUBSCRIPTIONS.format(**fields), fields, profile)]

    def add_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        condition = self.COLUMN_EXISTS.replace("{column}", "BodyString")
        return [self._guarded(self.ADD_BODY_STRING.format(**fields), fields, profile, condition, "columns")]

    def drop_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.DROP_BODY_STRING.format(**self._fields(spec, profile))]

    # -- removal -----------------------------------------------------------------------------
    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        fields = self._fields(spec, profile)
        if discard_messages:
            return [self.DROP_DISCARDING.format(**fields)]
        message = self.literal_text(self.refusal(spec, profile))
        return [self.DROP_GUARDED.format(message=message, **fields)]

    # -- version changes -------------------------------------------------------------------
    def change_queue_version(self, spec: TableSpec, old: Profile, new: Profile) -> list[str]:
        fields = self._fields(spec, new)
        batches = []
        if old.headers_unicode != new.headers_unicode:
            old_type, new_type = ("varchar", "nvarchar") if new.headers_unicode else ("nvarchar", "varchar")
            batches.append(self.HEADERS_TYPE.format(old_type=old_type, new_type=new_type, **fields))
        if old.rowversion_clustered != new.rowversion_clustered:
            kind = "CLUSTERED" if new.rowversion_clustered else "NONCLUSTERED"
            batches.append(self.ROWVERSION_KIND.format(new_kind=kind, **fields))
        if old.expires_index != new.expires_index:
            if new.expires_index is ExpiresIndex.NONE:
                batches.append(self.DROP_EXPIRES_INDEX.format(**fields))
            else:
                has_filter = 1 if new.expires_index is ExpiresIndex.FILTERED else 0
                create = self._expires_index(new.expires_index, fields).strip("\n") + ";"
                batches.append(self.EXPIRES_INDEX.format(has_filter=has_filter, create=create, **fields))
        return batches

    # -- schemas -----------------------------------------------------------------------------
    def _schema_fields(self, schema: SchemaName, statement: str) -> dict:
        sp = "sp_executesql" if schema.catalog is None else f"{self.quote(schema.catalog)}.sys.sp_executesql"
        return {
            "sys": self._sys(schema.catalog),
            "schema_name": self.literal_text(schema.schema),
            "sp_executesql": sp,
            "statement": self.literal_text(f"{statement} {self.quote(schema.schema)}"),
        }

    def create_schema(self, schema: SchemaName) -> list[str]:
        if schema.schema.casefold() == self.default_schema:
            return []
        return [self.CREATE_SCHEMA.format(**self._schema_fields(schema, "CREATE SCHEMA"))]

    def drop_schema(self, schema: SchemaName) -> list[str]:
        if schema.schema.casefold() == self.default_schema:
            return []
        return [self.DROP_SCHEMA.format(**self._schema_fields(schema, "DROP SCHEMA"))]

    # =====================================================================================
    # -- runtime statements (seed 003 "Runtime", transport-facts §4) ------------------------
    # =====================================================================================
    # One constant per statement, as the transport's SqlConstants. Placeholders: {table} the
    # queue, {delayed} the endpoint's delayed table, {subscriptions} the subscription table
    # (each bracket-quoted and qualified for the version), {table_literal} the queue's
    # qualified name escaped for an N'...' literal, {sys} the catalog's sys schema. @Name
    # are parameters; @NOCOUNT, @DueAfter and @batch are T-SQL variables declared in the
    # statement. Which form a version uses is a Profile field (receive_correlation, peek,
    # send_correlation), set by versions.BOUNDARIES.

    # The NOCOUNT save/restore around send, receive and store is the transport's: the
    # caller's setting is left as it found it.

    # Send, 1.x - 6.x: seed 003's form, filling CorrelationId/ReplyToAddress for v1/v2 receivers.
    SEND_WITH_CORRELATION = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {table} (
    Id,
    CorrelationId,
    ReplyToAddress,
    Recoverable,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    @CorrelationId,
    @ReplyToAddress,
    1,
    CASE WHEN @TimeToBeReceivedMs IS NOT NULL
        THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,
    @Headers,
    @Body);

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Send, 7.0+ (transport-facts §4, "latest send"): correlation and reply-to travel in the headers only.
    SEND = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {table} (
    Id,
    Recoverable,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    1,
    CASE WHEN @TimeToBeReceivedMs IS NOT NULL
        THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,
    @Headers,
    @Body);

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Send, 7.0+, on a queue whose Recoverable column was dropped (chosen by CHECK_RECOVERABLE_COLUMN).
    SEND_WITHOUT_RECOVERABLE = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {table} (
    Id,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    CASE WHEN @TimeToBeReceivedMs IS NOT NULL
        THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,
    @Headers,
    @Body);

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Receive, 1.x - 4.0: seed 003's form (CorrelationId/ReplyToAddress in the output).
    RECEIVE_WITH_CORRELATION = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';
SET NOCOUNT ON;

WITH message AS (
    SELECT TOP(1) *
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
    ORDER BY RowVersion)
DELETE FROM message
OUTPUT
    deleted.Id,
    deleted.CorrelationId,
    deleted.ReplyToAddress,
    CASE WHEN deleted.Expires IS NULL
        THEN 0
        ELSE CASE WHEN deleted.Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END,
    deleted.Headers,
    deleted.Body;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Receive, 4.1+ (transport-facts §4, "latest receive").
    RECEIVE = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';
SET NOCOUNT ON;

WITH message AS (
    SELECT TOP(1) *
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
    ORDER BY RowVersion)
DELETE FROM message
OUTPUT
    deleted.Id,
    CASE WHEN deleted.Expires IS NULL
        THEN 0
        ELSE CASE WHEN deleted.Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END,
    deleted.Headers,
    deleted.Body;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Beyond the transport: up to @BatchSize messages in one round trip, the same locking
    # hints as RECEIVE (no message is handed to two receivers; rows locked by others are
    # skipped), the same output columns per version plus RowVersion last. DELETE ... OUTPUT
    # returns rows in no defined order, so they pass through a table variable and come back
    # ordered by RowVersion, oldest first, as RECEIVE hands them out one by one. Headers is
    # held as nvarchar(max), which takes a varchar(max) column without loss. Keep @BatchSize
    # well below SQL Server's lock escalation threshold (about 5,000 row locks).
    RECEIVE_BATCH_WITH_CORRELATION = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';
SET NOCOUNT ON;

DECLARE @batch TABLE (
    Id uniqueidentifier NOT NULL,
    CorrelationId varchar(255),
    ReplyToAddress varchar(255),
    Expired int NOT NULL,
    Headers nvarchar(max) NOT NULL,
    Body varbinary(max),
    RowVersion bigint NOT NULL);

WITH message AS (
    SELECT TOP(@BatchSize) *
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
    ORDER BY RowVersion)
DELETE FROM message
OUTPUT
    deleted.Id,
    deleted.CorrelationId,
    deleted.ReplyToAddress,
    CASE WHEN deleted.Expires IS NULL
        THEN 0
        ELSE CASE WHEN deleted.Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END,
    deleted.Headers,
    deleted.Body,
    deleted.RowVersion
INTO @batch (Id, CorrelationId, ReplyToAddress, Expired, Headers, Body, RowVersion);

SELECT Id, CorrelationId, ReplyToAddress, Expired, Headers, Body, RowVersion
FROM @batch
ORDER BY RowVersion;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    RECEIVE_BATCH = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';
SET NOCOUNT ON;

DECLARE @batch TABLE (
    Id uniqueidentifier NOT NULL,
    Expired int NOT NULL,
    Headers nvarchar(max) NOT NULL,
    Body varbinary(max),
    RowVersion bigint NOT NULL);

WITH message AS (
    SELECT TOP(@BatchSize) *
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
    ORDER BY RowVersion)
DELETE FROM message
OUTPUT
    deleted.Id,
    CASE WHEN deleted.Expires IS NULL
        THEN 0
        ELSE CASE WHEN deleted.Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END,
    deleted.Headers,
    deleted.Body,
    deleted.RowVersion
INTO @batch (Id, Expired, Headers, Body, RowVersion);

SELECT Id, Expired, Headers, Body, RowVersion
FROM @batch
ORDER BY RowVersion;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Peek, up to 4.1.1: a plain count (transport-facts §4, the 4.0 form).
    PEEK_COUNT = """\
SELECT count(*) Id FROM {table} WITH (READPAST)"""

    # Peek, 4.1.2 - 6.0.x: count at most {peek_batch_size} rows (seed 003); the number is a
    # validated integer written into the text, as the transport formats it.
    PEEK_TOP = """\
SELECT count(*) Id
FROM (SELECT TOP {peek_batch_size} * FROM {table} WITH (READPAST)) as count_table;"""

    # Peek, 6.1+: the RowVersion range, an estimate that reads two index ends (transport-facts §4).
    PEEK = """\
SELECT isnull(cast(max([RowVersion]) - min([RowVersion]) + 1 AS int), 0) Id FROM {table} WITH (READPAST, READCOMMITTEDLOCK)"""

    PURGE_EXPIRED = """\
DELETE FROM {table}
WHERE RowVersion
    IN (SELECT TOP (@BatchSize) RowVersion
        FROM {table} WITH (READPAST)
        WHERE Expires < GETUTCDATE())"""

    PURGE_ALL = "DELETE FROM {table}"

    # The checks of seed 003, with the name as an N'...' literal and the catalog's own sys
    # views: OBJECT_ID resolves a 3-part name, but a bare sys.indexes is the current database's.
    CHECK_EXPIRES_INDEX = """\
SELECT COUNT(*)
FROM {sys}.indexes
WHERE name = 'Index_Expires'
    AND object_id = OBJECT_ID(N'{table_literal}')"""

    CHECK_HEADERS_TYPE = """\
SELECT t.name
FROM {sys}.columns c
INNER JOIN {sys}.types t ON c.system_type_id = t.system_type_id
WHERE c.object_id = OBJECT_ID(N'{table_literal}')
    AND c.name = 'Headers'"""

    CHECK_RECOVERABLE_COLUMN = """\
SELECT COUNT(*)
FROM {sys}.columns c
WHERE c.object_id = OBJECT_ID(N'{table_literal}')
    AND c.name = 'Recoverable'"""

    # Delayed delivery (3.1+), seed 003.
    STORE_DELAYED = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

DECLARE @DueAfter DATETIME = GETUTCDATE();
SET @DueAfter = DATEADD(ms, @DueAfterMilliseconds, @DueAfter);
SET @DueAfter = DATEADD(s, @DueAfterSeconds, @DueAfter);
SET @DueAfter = DATEADD(n, @DueAfterMinutes, @DueAfter);
SET @DueAfter = DATEADD(hh, @DueAfterHours, @DueAfter);
SET @DueAfter = DATEADD(d, @DueAfterDays, @DueAfter);

INSERT INTO {delayed} (
    Headers,
    Body,
    Due)
VALUES (
    @Headers,
    @Body,
    @DueAfter);

IF(@NOCOUNT = 'ON') SET NOCOUNT ON;
IF(@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Moves due messages into the owning endpoint's input queue, then reports when the next
    # one falls due (seed 003).
    MOVE_DUE_DELAYED = """\
;WITH message AS (
    SELECT TOP(@BatchSize) *
    FROM {delayed} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE Due < GETUTCDATE())
DELETE FROM message
OUTPUT
    NEWID(),
    NULL,
    NULL,
    1,
    NULL,
    deleted.Headers,
    deleted.Body
INTO {table} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body);

SELECT TOP 1 GETUTCDATE() as UtcNow, Due as NextDue
FROM {delayed}
ORDER BY Due"""

    # Beyond the transport (whose move would fail there): the same move into a queue whose
    # Recoverable column was dropped.
    MOVE_DUE_DELAYED_WITHOUT_RECOVERABLE = """\
;WITH message AS (
    SELECT TOP(@BatchSize) *
    FROM {delayed} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE Due < GETUTCDATE())
DELETE FROM message
OUTPUT
    NEWID(),
    NULL,
    NULL,
    NULL,
    deleted.Headers,
    deleted.Body
INTO {table} (Id, CorrelationId, ReplyToAddress, Expires, Headers, Body);

SELECT TOP 1 GETUTCDATE() as UtcNow, Due as NextDue
FROM {delayed}
ORDER BY Due"""

    # Subscriptions (5.0+), seed 003. {topics} becomes @Topic0, @Topic1, ... in the template.
    SUBSCRIBE = """\
MERGE {subscriptions} WITH (HOLDLOCK, TABLOCK) AS target
USING(SELECT @Endpoint AS Endpoint, @QueueAddress AS QueueAddress, @Topic AS Topic) AS source
ON target.Endpoint = source.Endpoint
AND target.Topic = source.Topic
WHEN MATCHED AND target.QueueAddress <> source.QueueAddress THEN
UPDATE SET QueueAddress = @QueueAddress
WHEN NOT MATCHED THEN
INSERT
(
    QueueAddress,
    Topic,
    Endpoint
)
VALUES
(
    @QueueAddress,
    @Topic,
    @Endpoint
);"""

    UNSUBSCRIBE = """\
DELETE FROM {subscriptions}
WHERE
    Endpoint = @Endpoint and
    Topic = @Topic"""

    FIND_SUBSCRIBERS = """\
SELECT DISTINCT QueueAddress
FROM {subscriptions}
WHERE Topic IN ({topics})"""

    def runtime_statements(
        self,
        profile: Profile,
        queue: TableName,
        *,
        delayed: TableName | None = None,
        subscriptions: TableName | None = None,
        topics: int = 1,
        recoverable_column: bool = True,
        peek_batch_size: int = 0,
    ) -> dict[str, Statement]:
        """Every runtime statement of `profile`'s transport version for the queue `queue`.

        `delayed` (3.1+) adds store/move of delayed messages (moved into `queue`, the owning
        endpoint's input queue); `subscriptions` (5.0+) adds subscribe/unsubscribe/find with
        `topics` parameters @Topic0..; `recoverable_column=False` (7.0+) sends into a queue
        whose Recoverable column was dropped; `peek_batch_size` is the N of 4.1.2 - 6.0's peek.
        """
        if isinstance(topics, bool) or not isinstance(topics, int) or topics < 1:
            raise ValueError(f"topics must be a positive integer, not {topics!r}")
        if isinstance(peek_batch_size, bool) or not isinstance(peek_batch_size, int) or peek_batch_size < 0:
            raise ValueError(f"peek_batch_size must be a positive integer, not {peek_batch_size!r}")
        peek_top = profile.peek is PeekForm.TOP
        if peek_top and peek_batch_size <= 0:
            raise ValueError(f"transport {profile.version} peeks with SELECT TOP n: give peek_batch_size, a positive integer")
        latest_send = not profile.send_correlation
        if not recoverable_column and not latest_send:
            raise ValueError(
                f"transport {profile.version} always writes the Recoverable column; "
                f"a queue without it needs transport {first_release('send_correlation')} or later"
            )
        if delayed is not None and not profile.delayed_delivery:
            raise ValueError(f"transport {profile.version} has no delayed delivery table (since {FEATURE_SINCE['delayed_delivery']})")
        if subscriptions is not None and not profile.subscriptions:
            raise ValueError(f"transport {profile.version} has no subscription table (since {FEATURE_SINCE['subscriptions']})")

        qualified = self.qualified(queue, profile)
        catalog = queue.catalog if profile.three_part_names else None
        table = {"table": qualified}
        probe = {"sys": self._sys(catalog), "table_literal": self.literal_text(qualified)}
        correlation = profile.receive_correlation

        if not latest_send:
            send, send_params = (
                self.SEND_WITH_CORRELATION,
                ("Id", "CorrelationId", "ReplyToAddress", "TimeToBeReceivedMs", "Headers", "Body"),
            )
        else:
            send = self.SEND if recoverable_column else self.SEND_WITHOUT_RECOVERABLE
            send_params = ("Id", "TimeToBeReceivedMs", "Headers", "Body")
        if profile.peek is PeekForm.COUNT:
            peek = self.PEEK_COUNT
        elif peek_top:
            peek = self.PEEK_TOP.replace("{peek_batch_size}", str(peek_batch_size))
        else:
            peek = self.PEEK

        out = {
            "send": Statement("send", send, table, send_params, "place a message on the queue"),
            "receive": Statement(
                "receive",
                self.RECEIVE_WITH_CORRELATION if correlation else self.RECEIVE,
                table,
                (),
                "take the oldest unlocked message off the queue, flagging it if expired",
                columns=MESSAGE_WITH_CORRELATION if correlation else MESSAGE,
            ),
            "receive_batch": Statement(
                "receive_batch",
                self.RECEIVE_BATCH_WITH_CORRELATION if correlation else self.RECEIVE_BATCH,
                table,
                ("BatchSize",),
                "take up to @BatchSize oldest unlocked messages, oldest first, flagging expired ones",
                columns=(MESSAGE_WITH_CORRELATION if correlation else MESSAGE) + ("Order",),
            ),
            "peek": Statement("peek", peek, table, (), "estimate how many messages wait in the queue"),
            "purge_expired": Statement(
                "purge_expired", self.PURGE_EXPIRED, table, ("BatchSize",), "delete up to @BatchSize expired messages"
            ),
            "purge_all": Statement("purge_all", self.PURGE_ALL, table, (), "delete every message (purge at startup)"),
            "check_expires_index": Statement(
                "check_expires_index", self.CHECK_EXPIRES_INDEX, probe, (), "count the queue's Index_Expires (0: missing)"
            ),
            "check_headers_type": Statement(
                "check_headers_type", self.CHECK_HEADERS_TYPE, probe, (), "name the type of the queue's Headers column"
            ),
            "check_recoverable_column": Statement(
                "check_recoverable_column",
                self.CHECK_RECOVERABLE_COLUMN,
                probe,
                (),
                "count the queue's Recoverable column (0: dropped, send without it)",
            ),
        }
        if delayed is not None:
            both = {"table": qualified, "delayed": self.qualified(delayed, profile)}
            out["store_delayed"] = Statement(
                "store_delayed",
                self.STORE_DELAYED,
                {"delayed": both["delayed"]},
                ("DueAfterMilliseconds", "DueAfterSeconds", "DueAfterMinutes", "DueAfterHours", "DueAfterDays", "Headers", "Body"),
                "store a message in the delayed table, due after the given time",
            )
            out["move_due_delayed"] = Statement(
                "move_due_delayed",
                self.MOVE_DUE_DELAYED if recoverable_column else self.MOVE_DUE_DELAYED_WITHOUT_RECOVERABLE,
                both,
                ("BatchSize",),
                "move up to @BatchSize due messages into the input queue; then return when the next falls due",
            )
        if subscriptions is not None:
            subs = {"subscriptions": self.qualified(subscriptions, profile)}
            topic_params = tuple(f"Topic{i}" for i in range(topics))
            out["subscribe"] = Statement(
                "subscribe",
                self.SUBSCRIBE,
                subs,
                ("Endpoint", "QueueAddress", "Topic"),
                "subscribe an endpoint (at a queue address) to a topic",
            )
            out["unsubscribe"] = Statement(
                "unsubscribe", self.UNSUBSCRIBE, subs, ("Endpoint", "Topic"), "unsubscribe an endpoint from a topic"
            )
            out["find_subscribers"] = Statement(
                "find_subscribers",
                self.FIND_SUBSCRIBERS.replace("{topics}", ", ".join("@" + p for p in topic_params)),
                subs,
                topic_params,
                "queue addresses subscribed to any of the topics",
            )
        return out

    # =====================================================================================
    # -- sagas ----------------------------------------------------------------------------
    # =====================================================================================
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
    # The installer's check of an existing column: INFORMATION_SCHEMA's data_type, where it stops.
    VERIFY_CORRELATION_TYPE = """\
DECLARE @found sysname = (
    SELECT data_type FROM {information_schema}.COLUMNS
    WHERE table_schema = N'{schema_name}' AND table_name = N'{table_name}' AND column_name = N'{column_name}'
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
    SAGA_SHAPE_COLUMNS = {
        "id": ("uniqueidentifier", False),
        "metadata": ("nvarchar(max)", False),
        "data": ("nvarchar(max)", False),
        "persistenceversion": ("varchar(23)", False),
        "sagatypeversion": ("varchar(23)", False),
        "concurrency": ("int", False),
    }

    def saga_name_problems(self, spec: TableSpec) -> list[str]:
        problems = super().saga_name_problems(spec)
        for c in spec.correlations:
            for what, value in (("column", self.correlation_column(c.name)), ("index", self.correlation_index(spec, c.name))):
                if len(value) > MAX_IDENTIFIER:
                    problems.append(f"{what} {value!r} is {len(value)} characters long; SQL Server names hold at most {MAX_IDENTIFIER}")
        return problems

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

    # =====================================================================================
    # -- catalog reads (check, adopt, autogenerate, the runtime's start-up checks) --------
    # =====================================================================================
    class Catalog(Dialect.Catalog):
        """Live shapes from four bulk queries over the sys catalog views (per database), and the
        transport's own start-up checks."""

        # One query per catalog view, joined in Python; {sys} is sys, or [catalog].sys for another database.
        # Rows: (object_id, schema, table)
        SHAPE_TABLES = """\
SELECT t.object_id, s.name, t.name
FROM {sys}.tables t
INNER JOIN {sys}.schemas s ON s.schema_id = t.schema_id
WHERE t.is_ms_shipped = 0"""
        # Rows: (object_id, column, type, max_length (bytes; -1 = max), precision, scale,
        #        is_nullable, is_identity, is_computed), in column order
        SHAPE_COLUMNS = """\
SELECT c.object_id, c.name, ty.name, c.max_length, c.precision, c.scale, c.is_nullable, c.is_identity, c.is_computed
FROM {sys}.columns c
INNER JOIN {sys}.types ty ON ty.user_type_id = c.user_type_id
INNER JOIN {sys}.tables t ON t.object_id = c.object_id
WHERE t.is_ms_shipped = 0
ORDER BY c.object_id, c.column_id"""
        # Rows: (object_id, index_id, name, type_desc, is_unique, has_filter, filter_definition); heaps left out
        SHAPE_INDEXES = """\
SELECT i.object_id, i.index_id, i.name, i.type_desc, i.is_unique, i.has_filter, i.filter_definition
FROM {sys}.indexes i
INNER JOIN {sys}.tables t ON t.object_id = i.object_id
WHERE t.is_ms_shipped = 0 AND i.type <> 0 AND i.is_hypothetical = 0"""
        # Rows: (object_id, index_id, column, key_ordinal (0 for included columns), is_included_column)
        SHAPE_INDEX_COLUMNS = """\
SELECT ic.object_id, ic.index_id, c.name, ic.key_ordinal, ic.is_included_column
FROM {sys}.index_columns ic
INNER JOIN {sys}.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
INNER JOIN {sys}.tables t ON t.object_id = ic.object_id
WHERE t.is_ms_shipped = 0
ORDER BY ic.object_id, ic.index_id, ic.key_ordinal, ic.index_column_id"""

        @staticmethod
        def column_type(type_name: str, max_length: int, precision: int = 0, scale: int = 0) -> str:
            """A sys.types name and sys.columns sizes as DDL spells the type, lower case:
            nvarchar/-1 -> nvarchar(max), varchar/255 -> varchar(255), nvarchar/400 -> nvarchar(200)."""
            name = type_name.strip().lower()
            if name in ("varchar", "char", "varbinary", "binary", "nvarchar", "nchar"):
                if max_length == -1:
                    return f"{name}(max)"
                return f"{name}({max_length // 2 if name in ('nvarchar', 'nchar') else max_length})"
            if name in ("decimal", "numeric"):
                return f"{name}({precision},{scale})"
            if name in ("datetime2", "datetimeoffset", "time"):
                return f"{name}({scale})"
            return name

        def shapes_from_rows(
            self,
            tables: Iterable[tuple],
            columns: Iterable[tuple],
            indexes: Iterable[tuple],
            index_columns: Iterable[tuple],
            catalog: str | None = None,
        ) -> dict[tuple, tuple[TableName, TableShape]]:
            """The live shapes from the rows of SHAPE_TABLES, SHAPE_COLUMNS, SHAPE_INDEXES and
            SHAPE_INDEX_COLUMNS (pure: no connection). catalog: the database the rows were read
            from (None: the connection's own)."""
            table_key = self.dialect.table_key
            by_object: dict[int, TableShape] = {}
            out: dict[tuple, tuple[TableName, TableShape]] = {}
            for object_id, schema, table in tables:
                name = TableName(table, schema, catalog)
                by_object[object_id] = shape = TableShape()
                out[table_key(name)] = (name, shape)
            for object_id, column, type_name, max_length, precision, scale, nullable, identity, computed in columns:
                shape = by_object.get(object_id)
                if shape is None:
                    continue
                key = column.lower()
                shape.columns[key] = (self.column_type(type_name, max_length, precision, scale), bool(nullable))
                if identity:
                    shape.identity.add(key)
                if computed:
                    shape.computed.add(key)
            keys: dict[tuple[int, int], list[tuple[int, str]]] = {}
            included: dict[tuple[int, int], list[str]] = {}
            for object_id, index_id, column, key_ordinal, is_included in index_columns:
                if is_included:
                    included.setdefault((object_id, index_id), []).append(column.lower())
                else:
                    keys.setdefault((object_id, index_id), []).append((key_ordinal, column.lower()))
            for object_id, index_id, name, type_desc, unique, has_filter, filter_definition in indexes:
                shape = by_object.get(object_id)
                if shape is None or (type_desc or "").upper() == "HEAP":
                    continue
                kind = (type_desc or "").upper()
                shape.indexes.append(
                    IndexShape(
                        tuple(column for _, column in sorted(keys.get((object_id, index_id), []))),
                        bool(unique),
                        normalise_predicate(filter_definition) if has_filter else None,
                        name,
                        clustered=kind.startswith("CLUSTERED"),
                        include=tuple(sorted(included.get((object_id, index_id), []))),
                    )
                )
            return out

        def read_shapes(self, connection: Connection, catalogs: Iterable[str] = ()) -> dict[tuple, tuple[TableName, TableShape]]:
            """The connection's database, and each named catalog (three-part names) through [catalog].sys."""
            out: dict[tuple, tuple[TableName, TableShape]] = {}
            for catalog in (None, *dict.fromkeys(catalogs)):
                sys_ = self.dialect._sys(catalog)

                def rows(sql: str, sys_: str = sys_) -> list[tuple]:
                    return [tuple(row) for row in connection.exec_driver_sql(sql.format(sys=sys_))]

                out.update(
                    self.shapes_from_rows(
                        rows(self.SHAPE_TABLES), rows(self.SHAPE_COLUMNS), rows(self.SHAPE_INDEXES), rows(self.SHAPE_INDEX_COLUMNS), catalog
                    )
                )
            return out

        MISSING_INDEX_WARNING = (
            "Table {table} does not contain index 'Index_Expires'. Adding this index will speed up the process of "
            "purging expired messages from the queue. Please consult the documentation for further information."
        )
        NON_UNICODE_WARNING = (
            "Table {table} stores headers in a non Unicode-compatible column ({type}). This may lead to data loss "
            "when sending non-ASCII characters in headers. Please change the column type to nvarchar(max)."
        )

        def warnings(self, connection: Connection, queues: list[TableName], profile: Profile) -> list[str]:
            """The transport's own start-up checks (seed 003), run per queue."""
            warnings = []
            for name in queues:
                checks = self.dialect.runtime_statements(profile, name, peek_batch_size=1)
                if profile.expires_index is not ExpiresIndex.NONE:
                    if not connection.exec_driver_sql(checks["check_expires_index"].sql).scalar():
                        warnings.append(self.MISSING_INDEX_WARNING.format(table=self.dialect.qualified(name, profile)))
                if profile.headers_unicode:
                    column_type = connection.exec_driver_sql(checks["check_headers_type"].sql).scalar()
                    if column_type and column_type.lower() != "nvarchar":
                        warnings.append(self.NON_UNICODE_WARNING.format(table=self.dialect.qualified(name, profile), type=column_type))
            return warnings

    # =====================================================================================
    # -- grants (sqltransport-schema grants) ----------------------------------------------
    # =====================================================================================
    class Grants(Dialect.Grants):
        """Table grants per need; grants in another catalog follow a USE of it."""

        # Privileges per need, from the statements above: receive/receive_batch are DELETE ... OUTPUT
        # deleted.* with a WHERE (SELECT, DELETE); peek and the start-up checks read (SELECT, which
        # also makes the table's metadata visible in sys.columns/sys.indexes); move_due inserts into
        # the input queue; subscribe is a MERGE (SELECT, INSERT, UPDATE). RowVersion is an IDENTITY:
        # no sequence to grant. GRANT cannot name another database, so grants for tables in another
        # catalog follow a USE of it (the login needs a user in each such database).
        GRANT_PRIVILEGES = {
            "receive": "SELECT, INSERT, DELETE",
            "send": "INSERT",
            "delayed": "SELECT, INSERT, DELETE",
            "subscriptions": "SELECT, INSERT, UPDATE, DELETE",
            "saga": "SELECT, INSERT, UPDATE, DELETE",
        }
        GRANT_TABLE = "GRANT {privileges} ON {table} TO {role};"
        USE_CATALOG = "USE {catalog};"
        # Seed 003: the installer creates tables and reads the catalog views for its guards.
        INSTALLER_DATABASE = ("GRANT CREATE TABLE TO {role};", "GRANT VIEW DEFINITION TO {role};")
        INSTALLER_CREATE_SCHEMA = "GRANT CREATE SCHEMA TO {role};"
        # ALTER on the schema: create, alter and drop its tables; the drop guards and alembic_version
        # read and write rows, which ALTER alone does not allow.
        INSTALLER_SCHEMA = (
            "GRANT ALTER ON SCHEMA::{schema} TO {role};",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON SCHEMA::{schema} TO {role};",
        )

        @staticmethod
        def _by_catalog(items: Iterable[Any], catalog_of: Callable[[Any], str | None]) -> dict:
            groups: dict = {None: []}
            for item in items:
                groups.setdefault(catalog_of(item), []).append(item)
            return groups

        def _with_catalogs(self, groups: dict, render: Callable[[Any], list[str]]) -> list[str]:
            lines: list[str] = []
            for catalog, items in groups.items():
                if not items:
                    continue
                if catalog is not None:
                    lines.append(self.USE_CATALOG.format(catalog=self.dialect.quote(catalog)))
                for item in items:
                    lines.extend(render(item))
            return lines

        def runtime(self, plan: GrantPlan, role: str) -> list[str]:
            role_q = self.dialect.quote(role)

            def render(grant: TableGrant) -> list[str]:
                table = self.dialect.qualified(grant.table._replace(catalog=None))
                return [self.GRANT_TABLE.format(privileges=self.GRANT_PRIVILEGES[grant.need], table=table, role=role_q)]

            # First, in the login's own database: Transport.from_database reads which revision is deployed.
            version_table = self.GRANT_TABLE.format(
                privileges="SELECT", table=self.dialect.qualified(TableName("alembic_version")), role=role_q
            )
            return [version_table] + self._with_catalogs(self._by_catalog(plan.tables, lambda g: g.table.catalog), render)

        def installer(self, plan: GrantPlan, role: str) -> list[str]:
            role_q = self.dialect.quote(role)
            per_catalog: dict = {}
            for grant in plan.tables:
                per_catalog.setdefault(grant.table.catalog, {}).setdefault(grant.table.schema or self.dialect.default_schema, None)
            per_catalog.setdefault(None, {}).setdefault(self.dialect.default_schema, None)  # alembic_version lives here
            lines: list[str] = []
            for catalog in sorted(per_catalog, key=lambda c: (c is not None, c or "")):
                if catalog is not None:
                    lines.append(self.USE_CATALOG.format(catalog=self.dialect.quote(catalog)))
                schemas = list(per_catalog[catalog])
                lines.extend(line.format(role=role_q) for line in self.INSTALLER_DATABASE)
                if any(schema != self.dialect.default_schema for schema in schemas):
                    lines.append(self.INSTALLER_CREATE_SCHEMA.format(role=role_q))
                for schema in schemas:
                    grants = [line.format(schema=self.dialect.quote(schema), role=role_q) for line in self.INSTALLER_SCHEMA]
                    if schema == self.dialect.default_schema:
                        lines.extend(grants)
                    else:
                        lines.append(f"-- schema {self.dialect.quote(schema)}: created (and owned) by the installer; if it exists already:")
                        lines.extend("-- " + line for line in grants)
            return lines

    # =====================================================================================
    # -- deployment scripts (sqltransport-schema script) ----------------------------------
    # =====================================================================================
    class Script(Dialect.Script):
        """Alembic's version stamping made repeatable: IF-guarded stamps and version table; GO-separated files."""

        ALEMBIC_FIRST_STAMP = r"^INSERT INTO alembic_version \(version_num\) OUTPUT inserted\.version_num VALUES \({rev}\);$"
        FIRST_STAMP = "IF NOT EXISTS (SELECT 1 FROM alembic_version)\n    INSERT INTO alembic_version (version_num) VALUES ('{rev}');"
        RESTAMP = (
            "IF EXISTS (SELECT 1 FROM alembic_version WHERE version_num = '{old}')\n"
            "    UPDATE alembic_version SET version_num = '{new}' WHERE version_num = '{old}';"
        )
        GUARDED_VERSION_TABLE = "IF OBJECT_ID(N'alembic_version', N'U') IS NULL\nBEGIN\n{ddl}\nEND;"
        # How each file of a split script opens and closes its transaction (as Alembic's offline output does).
        SCRIPT_BEGIN = "BEGIN TRANSACTION;\n\nGO\n\n"
        SCRIPT_COMMIT = "COMMIT;\n\nGO\n"

        def guard_version_table(self, ddl: str) -> str:
            return self.GUARDED_VERSION_TABLE.format(ddl=ddl)

    # =====================================================================================
    # -- the data pipeline (engines/pipeline.py): pyodbc, Spark through jTDS --------------
    # =====================================================================================
    class Pipeline(Dialect.Pipeline):  # pragma: no cover - no SQL Server here
        """SQL Server (pyodbc). IDENTITY columns take no explicit values without IDENTITY_INSERT (ALTER
        permission), so partitions into SQL Server run one after the other, in order. Spark reads through
        jTDS (`jdbc:jtds:sqlserver://`), which it handles with its generic dialect, so the pipeline always
        reads SQL Server through an explicit query naming the columns."""

        layout = "mssql"
        jdbc_jar, jdbc_driver = "jtds.jar", "net.sourceforge.jtds.jdbc.Driver"
        FRAGMENTS = {
            **Dialect.Pipeline.FRAGMENTS,
            "text": "nvarchar(max)",
            "time": "datetime2",
            "blob": "varbinary(max)",
            "now": "SYSUTCDATETIME()",
            "id_text": "LOWER(CONVERT(varchar(36), Id))",
        }
        CREATE_MOVES = "IF OBJECT_ID(N{moves_literal}) IS NULL " + Dialect.Pipeline.CREATE_MOVES.replace("IF NOT EXISTS ", "")
        CREATE_LEDGER = "IF OBJECT_ID(N{ledger_literal}) IS NULL " + Dialect.Pipeline.CREATE_LEDGER.replace("IF NOT EXISTS ", "")
        READ_RANGE = (
            "SELECT {columns} FROM {table} WITH (UPDLOCK, ROWLOCK) WHERE {order} >= @Low AND {order} < @High "
            "AND {order} <= @Last ORDER BY {order}"
        )
        READ_ALL = "SELECT {columns} FROM {table} WITH (UPDLOCK, ROWLOCK)"

        def connect(self, url: URL) -> Any:
            try:
                import pyodbc
            except ImportError as exc:
                raise RuntimeError("writing to SQL Server needs pyodbc: pip install -e '.[mssql]'") from exc
            return pyodbc.connect(self.odbc_connection_string(url), autocommit=False)

        @staticmethod
        def odbc_connection_string(url: URL) -> str:
            driver = url.query.get("driver", "ODBC Driver 18 for SQL Server")
            server = url.host + (f",{url.port}" if url.port else "")
            text = f"DRIVER={{{driver}}};SERVER={server};DATABASE={url.database or ''};"
            if url.username:
                text += f"UID={url.username};PWD={url.password or ''};"
            else:
                text += "Trusted_Connection=yes;"
            return text + "TrustServerCertificate=yes;"

        def jdbc_url(self, url: URL) -> str:
            props = f";user={url.username};password={url.password or ''}" if url.username else ";useNTLMv2=true"
            return f"jdbc:jtds:sqlserver://{url.host}:{url.port or 1433}/{url.database or ''}{props}"
