"""SQL Server: the transport's own DDL for every version, in one place a DBA can read.

Placeholders: {table} is the bracket-quoted qualified name, {name} the same text
escaped for use inside an N'...' literal, {sys} the catalog's sys schema
(`[catalog].sys` or `sys`). Nothing else ever reaches the SQL text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..revisions import BLUEPRINT_TABLE
from ..schema import Correlation, Kind, SchemaName, TableName, TableSpec
from ..shapes import Column, IndexShape, TableShape, normalise_predicate, shape_columns
from ..statements import MESSAGE, MESSAGE_WITH_CORRELATION, Statement, parameters_of
from ..versions import (
    FEATURE_SINCE,
    DueForm,
    ExpiresIndex,
    IndexCheck,
    PeekForm,
    Profile,
    RecoverableCheck,
    ScriptStyle,
    first_release,
)
from .base import Dialect

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sqlalchemy.engine import URL, Connection

    from ..grants import GrantPlan, TableGrant

MAX_IDENTIFIER = 128
_REGULAR_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_@#$]*$")  # needs no brackets


class MSSQL(Dialect):
    name = "mssql"
    sqlalchemy_name = "mssql"
    drivers = ("pyodbc",)
    default_schema = "dbo"
    case_insensitive_names = True  # the default collation compares names without case
    GUARD_ERROR_CODES = frozenset({50000})  # the guards' THROW 50000 (pyodbc's native error, pymssql's number)
    batch_separator = "GO"  # sqlcmd's and SSMS's batch separator
    columns_beside_headers = True

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
            columns = shape_columns(self.COLUMNS[Kind.DELAYED])
            computed = set()
            if spec.body_string:
                columns["bodystring"] = self.BODY_STRING_COLUMN
                computed.add("bodystring")
            indexes = [IndexShape(("due",), name="Index_Due", clustered=False)]
            return TableShape(columns, indexes, identity={"rowversion"}, computed=computed)
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
    {rowversion_index}"""
    # Index_RowVersion: clustered over the bare column (3.1.0-4.3.1, 5.0.1-5.0.2, 6.0.0), then
    # nonclustered over [RowVersion] ASC (4.3.2, 5.0.3, 6.0.1+), each as the transport wrote it.
    CLUSTERED_ROWVERSION = """CREATE CLUSTERED INDEX Index_RowVersion ON {table}
    (
        RowVersion
    )"""
    NONCLUSTERED_ROWVERSION = """CREATE NONCLUSTERED INDEX Index_RowVersion ON {table}
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

    # Versions 3.0.x: the 1.x guard with an applock inside, on a resource built from the raw
    # schema and table names; the index option lists of SQL Server Management Studio's scripts.
    CREATE_QUEUE_V3 = """\
IF NOT EXISTS (SELECT * FROM sys.objects WHERE object_id = OBJECT_ID(N'{name}') AND type in (N'U'))
BEGIN
    EXEC sp_getapplock @Resource = '{resource}_lock', @LockMode = 'Exclusive'

    IF NOT EXISTS (SELECT * FROM sys.objects WHERE object_id = OBJECT_ID(N'{name}') AND type in (N'U'))
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
        (
            [RowVersion] ASC
        )WITH (PAD_INDEX = OFF, STATISTICS_NORECOMPUTE = OFF, SORT_IN_TEMPDB = OFF, IGNORE_DUP_KEY = OFF, DROP_EXISTING = OFF, ONLINE = OFF, ALLOW_ROW_LOCKS = ON, ALLOW_PAGE_LOCKS = ON) ON [PRIMARY]

        CREATE NONCLUSTERED INDEX [Index_Expires] ON {table}
        (
            [Expires] ASC
        )
        INCLUDE
        (
            [Id],
            [RowVersion]
        )
        WITH (PAD_INDEX = OFF, STATISTICS_NORECOMPUTE = OFF, SORT_IN_TEMPDB = OFF, DROP_EXISTING = OFF, ONLINE = OFF, ALLOW_ROW_LOCKS = ON, ALLOW_PAGE_LOCKS = ON)
    END

    EXEC sp_releaseapplock @Resource = '{resource}_lock'
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
        Endpoint NVARCHAR(200){endpoint_not_null},
        Topic NVARCHAR(200) NOT NULL,
        PRIMARY KEY CLUSTERED
        (
            Endpoint,
            Topic
        )
    )"""

    # -- optional column (4.1+) ------------------------------------------------------------
    # The transport's script, in every release: returns unless the table exists and lacks the
    # column, locks the queue's own resource, tests again, adds; never inside TRY/CATCH.
    ADD_BODY_STRING = """\
IF NOT EXISTS (
    SELECT *
    FROM {sys}.objects
    WHERE {table_exists})
RETURN

IF EXISTS (
    SELECT *
    FROM {sys}.columns
    WHERE {column_exists})
RETURN

EXEC sp_getapplock @Resource = '{name}_lock', @LockMode = 'Exclusive'

IF EXISTS (
    SELECT *
    FROM {sys}.columns
    WHERE {column_exists})
BEGIN
    EXEC sp_releaseapplock @Resource = '{name}_lock'
    RETURN
END

ALTER TABLE {table}
ADD BodyString as cast(Body as nvarchar(max));

EXEC sp_releaseapplock @Resource = '{name}_lock'"""
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

    # A dropped queue's subscription rows: each spelling of its address (@Addresses: the schema
    # part bracketed, bare, or left out for dbo), and, where the queue names no catalog, each
    # followed by the current database as the catalog part (@InCurrentCatalog); OPENJSON as in
    # delete_locked (SQL Server 2016+).
    DELETE_SUBSCRIBERS_OF = """\
DELETE FROM {subscriptions}
WHERE QueueAddress IN (SELECT value FROM OPENJSON(@Addresses))
    OR QueueAddress IN (SELECT value + N'@' + QUOTENAME(DB_NAME()) FROM OPENJSON(@InCurrentCatalog))"""
    HAS_TABLE = "SELECT CASE WHEN OBJECT_ID(@Name, N'U') IS NULL THEN 0 ELSE 1 END"
    SCRIPT_IF_TABLE_EXISTS = """\
IF OBJECT_ID(N'{name}', N'U') IS NOT NULL
{statement};"""

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
        if profile.script_style is ScriptStyle.NESTED_APPLOCK:
            schema = spec.name.schema if spec.name.schema is not None else self.default_schema
            batch = self.CREATE_QUEUE_V3.format(
                headers_v1="nvarchar" if profile.headers_unicode else "varchar",
                resource=self.literal_text(f"{schema}_{spec.name.table}"),
                **fields,
            )
        elif profile.script_style is ScriptStyle.IF_NOT_EXISTS:
            expires = self._expires_index(profile.expires_index, fields)
            batch = self.CREATE_QUEUE_V1.format(
                headers_v1="nvarchar" if profile.headers_unicode else "varchar",
                expires_index=expires,
                **fields,
            )
        else:
            rowversion = self.CLUSTERED_ROWVERSION if profile.rowversion_clustered else self.NONCLUSTERED_ROWVERSION
            body = self.CREATE_QUEUE.format(
                headers="nvarchar(max)" if profile.headers_unicode else "varchar(max)",
                rowversion_index=rowversion.format(**fields),
                **fields,
            ) + self._expires_index(profile.expires_index, fields)
            batch = self._guarded_table(body, fields, profile)
        batches = [batch]
        if spec.body_string:
            batches += self.add_body_string(spec, profile)
        return batches

    def create_delayed(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        batches = [self._guarded_table(self.CREATE_DELAYED.format(**fields), fields, profile)]
        if spec.body_string:  # the transport's BodyString option covers the delayed table too (4.1+)
            batches += self.add_body_string(spec, profile)
        return batches

    def create_subscriptions(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        not_null = " NOT NULL" if profile.subscriptions_endpoint_not_null else ""
        return [self._guarded_table(self.CREATE_SUBSCRIPTIONS.format(endpoint_not_null=not_null, **fields), fields, profile)]

    def add_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        return [
            self.ADD_BODY_STRING.format(
                table_exists=self.TABLE_EXISTS.format(**fields),
                column_exists=self.COLUMN_EXISTS.format(column="BodyString", **fields),
                **fields,
            )
        ]

    def drop_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.DROP_BODY_STRING.format(**self._fields(spec, profile))]

    # sp_rename takes the index as table.index and the new name as it is (brackets would become
    # part of it); the procedure of another catalog renames there.
    RENAME_INDEX = "EXEC {sys}sp_rename N'{index}', N'{new}', N'INDEX';"

    def rename_index(self, table: TableName, old: str, new: str) -> list[str] | None:
        where = TableName(table.table, table.schema)
        sys_ = f"{self.quote(table.catalog)}.sys." if table.catalog is not None else ""
        index = self.literal_text(f"{self.qualified(where)}.{self.quote(old)}")
        return [self.RENAME_INDEX.format(sys=sys_, index=index, new=self.literal_text(new))]

    # -- removal -----------------------------------------------------------------------------
    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        fields = self._fields(spec, profile)
        if discard_messages:
            return [self.DROP_DISCARDING.format(**fields)]
        message = self.literal_text(self.refusal(spec, profile))
        return [self.DROP_GUARDED.format(message=message, **fields)]

    INVALID_OBJECT_NAME = "42S02"  # the SQLSTATE pyodbc reports for error 208 (a table that does not exist)

    def undefined_table(self, error: BaseException) -> bool:
        return bool(error.args) and error.args[0] == self.INVALID_OBJECT_NAME

    def subscriber_parameters(self, queue: TableName) -> dict[str, Any]:
        spellings = self.schema_spellings(queue)
        qualified = [f"{queue.table}@{part}" for part in dict.fromkeys(part or "[]" for part in spellings)]
        if queue.catalog is None:
            addresses, in_current = ([queue.table] if "" in spellings else []) + qualified, qualified
        else:
            catalogs = [self.address_part(queue.catalog)] + ([queue.catalog] if not any(ch in queue.catalog for ch in "@[]") else [])
            addresses, in_current = [f"{address}@{catalog}" for address in qualified for catalog in catalogs], []
        return {"Addresses": self.list_parameter(addresses), "InCurrentCatalog": self.list_parameter(in_current)}

    def script_value(self, value: Any) -> str:
        text = super().script_value(value)
        return text if value is None else "N" + text

    def script_delete_subscribers_of(self, subscriptions: TableName, queue: TableName) -> list[str]:
        name = self.literal_text(self.qualified(subscriptions))
        return [
            self.SCRIPT_IF_TABLE_EXISTS.format(name=name, statement=s) for s in super().script_delete_subscribers_of(subscriptions, queue)
        ]

    # -- version changes -------------------------------------------------------------------
    def correlation_index_build(self) -> str | None:
        return "CREATE UNIQUE INDEX (offline, as SQL persistence's installer runs it) holds writers off for the whole build"

    def version_change_rewrite(self, old: Profile, new: Profile) -> str | None:
        reasons = []
        if old.headers_unicode != new.headers_unicode:
            old_type, new_type = ("varchar", "nvarchar") if new.headers_unicode else ("nvarchar", "varchar")
            reasons.append(f"Headers {old_type}(max) -> {new_type}(max) rewrites every row")
        if old.rowversion_clustered != new.rowversion_clustered:
            how = "clustered -> nonclustered" if old.rowversion_clustered else "nonclustered -> clustered"
            reasons.append(f"Index_RowVersion {how} rebuilds the table")
        if old.expires_index != new.expires_index and new.expires_index is not ExpiresIndex.NONE:
            reasons.append("building Index_Expires makes writers wait for the whole build")
        return "; ".join(reasons) or None

    def version_change_effects(self, old: Profile, new: Profile) -> list[str]:
        effects = []
        if old.headers_unicode != new.headers_unicode:
            if new.headers_unicode:
                effects.append("Headers varchar(max) -> nvarchar(max)")
            else:
                effects.append(
                    "Headers nvarchar(max) -> varchar(max): header text outside the database's code page "
                    "(non-Latin letters) is lost, each such character stored as '?'"
                )
        if old.rowversion_clustered != new.rowversion_clustered:
            if new.rowversion_clustered:
                effects.append(
                    "Index_RowVersion nonclustered -> clustered: the table is rebuilt, and sends contend for its last page again"
                )
            else:
                effects.append("Index_RowVersion clustered -> nonclustered: the table is rebuilt as a heap")
        return effects + self.expires_index_effect(old, new, "Index_Expires")

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
    # -- runtime statements (upstream-conformance §3) --------------------------------------
    # =====================================================================================
    # One constant per statement, as the transport's SqlConstants, token for token its text of
    # the release. Placeholders filled by Statement: {table} the queue, {delayed} the endpoint's
    # delayed table, {subscriptions} the subscription table (bracket-quoted, three-part where
    # the catalog is known), {table_literal} the queue's name inside a '...' literal, {sys} the
    # sys schema the Recoverable count reads. Where releases differ, a template has a slot
    # ({not_expired}, {hint}, ...) that runtime_statements fills with a fragment chosen by a
    # Profile field (versions.BOUNDARIES), before the Statement is made. @Name are parameters;
    # @NOCOUNT, @DueAfter and @batch are T-SQL variables.

    # The NOCOUNT save/restore around send, receive, store and the early move is the
    # transport's: the caller's setting is left as it found it.

    # Send, up to 6.x: fills CorrelationId/ReplyToAddress for v1/v2 receivers; {recoverable} is
    # @Recoverable up to 4.0.0, the literal 1 from 4.1.0.
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
    {recoverable},
    CASE WHEN @TimeToBeReceivedMs IS NOT NULL
        THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,
    @Headers,
    @Body);

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Send, 7.0+: correlation and reply-to travel in the headers only.
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

    # Send, 7.0+, on a queue whose Recoverable column was dropped (the transport chooses it per
    # queue from CHECK_RECOVERABLE_COLUMN; `statements` prints it as send_norec).
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

    # Receive. 3.x skip expired rows in the query ({not_expired}); later releases return an
    # expired flag instead and the receiver drops flagged rows. {output} lists the columns
    # before Headers and Body: Id, then CorrelationId/ReplyToAddress (up to 6.x), Recoverable
    # (up to 4.0.0), the expired flag (4.0.0+).
    RECEIVE = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';
SET NOCOUNT ON;

WITH message AS (
    SELECT TOP(1) *
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK){not_expired}
    ORDER BY {rowversion})
DELETE FROM message
OUTPUT
{output}
    deleted.Headers,
    deleted.Body;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""
    NOT_EXPIRED = "\n    WHERE Expires IS NULL OR Expires > GETUTCDATE()"
    EXPIRED_FLAG = """\
    CASE WHEN deleted.Expires IS NULL
        THEN 0
        ELSE CASE WHEN deleted.Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END,"""
    # Receive's output columns before Headers and Body, in order: (result name(s), text).
    RECEIVE_OUTPUT = (
        (("Id",), "    deleted.Id,"),
        (("CorrelationId", "ReplyToAddress"), "    deleted.CorrelationId,\n    deleted.ReplyToAddress,"),
        (("Recoverable",), "    deleted.Recoverable,"),
        (("Expired",), EXPIRED_FLAG),
    )

    # Beyond the transport: up to @BatchSize messages in one round trip, the same locking
    # hints as RECEIVE (no message is handed to two receivers; rows locked by others are
    # skipped), the output of 4.1+'s receive per version plus RowVersion last (expired rows
    # are flagged in every version). DELETE ... OUTPUT returns rows in no defined order, so
    # they pass through a table variable and come back ordered by RowVersion, oldest first,
    # as RECEIVE hands them out one by one. Headers is held as nvarchar(max), which takes a
    # varchar(max) column without loss. Keep @BatchSize well below SQL Server's lock
    # escalation threshold (about 5,000 row locks).
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

    # Beyond the transport, for the pump's batches (docs/runtime.md): up to @BatchSize messages
    # locked, not taken, with RECEIVE's hints (UPDLOCK holds them to the end of the transaction,
    # READPAST passes over rows a competing batch holds), oldest first, expired ones flagged in
    # every version. The handled messages are deleted by their RowVersion before the one commit, in
    # one statement (@Orders: a JSON array, OPENJSON: SQL Server 2016+); one
    # whose handler failed is left in place. Each message's handler runs after a savepoint (SQL
    # Server has no RELEASE: a savepoint lasts until the commit; a newer one of the same name
    # hides the older, and ROLLBACK TRANSACTION goes back to the newest). An error that dooms
    # the transaction (XACT_ABORT ON) cannot be undone to a savepoint: the whole batch rolls back.
    LOCK_BATCH = """\
SELECT TOP(@BatchSize)
    Id,
    CASE WHEN Expires IS NULL
        THEN 0
        ELSE CASE WHEN Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END AS Expired,
    Headers,
    Body,
    RowVersion
FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
ORDER BY RowVersion"""
    DELETE_LOCKED = """\
DELETE FROM {table}
WHERE RowVersion IN (SELECT CAST(value AS bigint) FROM OPENJSON(@Orders))"""
    SAVEPOINT = "SAVE TRANSACTION sqltransport_message"
    ROLLBACK_TO_SAVEPOINT = "ROLLBACK TRANSACTION sqltransport_message"

    # Peek, a plain count (3.1.0-3.1.5 skipping expired rows, 4.0.0-4.1.1).
    PEEK_COUNT = """\
SELECT count(*) Id FROM {table} WITH (READPAST){not_expired}"""

    # Peek, at most {peek_batch_size} rows (3.1.6 skipping expired rows, 4.1.2-6.0.1); the
    # number is a validated integer written into the text, as the transport formats it.
    PEEK_TOP = """\
SELECT count(*) Id
FROM (
    SELECT TOP {peek_batch_size} *
    FROM {table} WITH (READPAST){not_expired}
) as count_table;"""

    # Peek, 6.1+: the RowVersion range, an estimate that reads two index ends; {hint} is
    # nolock until 6.3.6 and 7.0.4, then READPAST, READCOMMITTEDLOCK.
    PEEK = """\
SELECT isnull(cast(max([RowVersion]) - min([RowVersion]) + 1 AS int), 0) Id FROM {table} WITH ({hint})"""

    # {hint}: NOLOCK in 3.1.x, READPAST from 4.0.0.
    PURGE_EXPIRED = """\
DELETE FROM {table}
WHERE RowVersion
    IN (SELECT TOP (@BatchSize) RowVersion
        FROM {table} WITH ({hint})
        WHERE Expires < GETUTCDATE())"""

    PURGE_ALL = "DELETE FROM {table}"

    # Start-up checks. They read the connection's own database's sys views and name the
    # queue as a plain '...' literal, as the transport does (so they see a queue of another
    # catalog only when the connection is in it).
    CHECK_EXPIRES_INDEX = """\
SELECT COUNT(*)
FROM sys.indexes
WHERE name = 'Index_Expires'
    AND object_id = OBJECT_ID('{table_literal}')"""

    # 4.3.2, 5.0.3, 6.0.1-6.3.8: a nonclustered (type 2) Index_RowVersion.
    CHECK_ROWVERSION_INDEX = """\
SELECT COUNT(*)
FROM sys.indexes
WHERE name = 'Index_RowVersion'
    AND object_id = OBJECT_ID('{table_literal}')
    AND type = 2"""

    # 7.0+: indexes of any name whose first key column is {column} (Expires; RowVersion with
    # {nonclustered}, type 2).
    CHECK_INDEX_BY_KEY = """\
SELECT COUNT(*)
FROM sys.indexes i
INNER JOIN sys.index_columns AS ic ON ic.index_id = i.index_id AND ic.object_id = i.object_id AND ic.key_ordinal = 1
INNER JOIN sys.columns AS c ON c.column_id = ic.column_id AND c.object_id = ic.object_id
WHERE i.object_id = OBJECT_ID('{table_literal}')
AND c.name = '{column}'{nonclustered}"""
    NONCLUSTERED_ONLY = "\nAND i.type = 2"

    # The type's name; upstream reads the first row (sysname shares nvarchar's system_type_id).
    CHECK_HEADERS_TYPE = """\
SELECT t.name
FROM sys.columns c
INNER JOIN sys.types t ON c.system_type_id = t.system_type_id
WHERE c.object_id = OBJECT_ID('{table_literal}')
    AND c.name = 'Headers'"""

    # 3.0.x (Sql.cs): every column in brackets, and a send that ends in an empty statement
    # (`;;`). The purge of expired messages takes the oldest expired Ids with the receive's
    # locking hints; upstream formats the batch size into the text, the project binds
    # @BatchSize (docs/fidelity.md). Receive, peek and the index check as 3.0.x wrote them.
    SEND_3_0 = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {table} ([Id],[CorrelationId],[ReplyToAddress],[Recoverable],[Expires],[Headers],[Body])
VALUES (@Id,@CorrelationId,@ReplyToAddress,@Recoverable,CASE WHEN @TimeToBeReceivedMs IS NOT NULL THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,@Headers,@Body);;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""
    NOT_EXPIRED_3_0 = "\n    WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE()"
    PEEK_3_0 = """\
SELECT count(*) Id FROM {table} WITH (READPAST) WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE();"""
    PURGE_EXPIRED_3_0 = """\
DELETE FROM {table}
WHERE [Id] IN (SELECT TOP (@BatchSize) [Id]
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE [Expires] < GETUTCDATE()
    ORDER BY [RowVersion])"""
    CHECK_EXPIRES_INDEX_3_0 = """\
SELECT COUNT(*) FROM [sys].[indexes] WHERE [name] = 'Index_Expires' AND [object_id] = OBJECT_ID('{table_literal}')"""

    # 7.0.0-7.0.6, 8.0.0-8.1.4: an empty result whose column names tell.
    CHECK_RECOVERABLE_COLUMNS = "SELECT TOP (0) * FROM {table} WITH (NOLOCK);"
    # 7.0.7+, 8.1.5+: a count in the catalog's sys.columns ({sys}: the catalog raw in 7.0.7 and
    # 8.1.5, in brackets later). Upstream never doubles an inner ]; the project quotes by the
    # engine's rules, the same text for every name that upstream's text would not break.
    CHECK_RECOVERABLE_COLUMN = """\
SELECT COUNT(*)
FROM {sys}.columns c
WHERE c.object_id = OBJECT_ID(N'{table_literal}')
    AND c.name = 'Recoverable'"""

    # Store of a delayed message: {declare_due} and {due} by release (DUE_FORMS).
    STORE_DELAYED = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;
{declare_due}
INSERT INTO {delayed} (
    Headers,
    Body,
    Due)
VALUES (
    @Headers,
    @Body,
    {due});

IF(@NOCOUNT = 'ON') SET NOCOUNT ON;
IF(@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""
    DUE_AFTER_PARTS = """
DECLARE @DueAfter DATETIME = GETUTCDATE();
SET @DueAfter = DATEADD(ms, @DueAfterMilliseconds, @DueAfter);
SET @DueAfter = DATEADD(s, @DueAfterSeconds, @DueAfter);
SET @DueAfter = DATEADD(n, @DueAfterMinutes, @DueAfter);
SET @DueAfter = DATEADD(hh, @DueAfterHours, @DueAfter);
SET @DueAfter = DATEADD(d, @DueAfterDays, @DueAfter);
"""
    # DueForm -> ({declare_due}, {due})
    DUE_FORMS = {
        DueForm.ABSOLUTE: ("", "@Due"),
        DueForm.AFTER_MS: ("", "DATEADD(ms, @DueAfterMs, GETUTCDATE())"),
        DueForm.PARTS: (DUE_AFTER_PARTS, "@DueAfter"),
    }

    # Move of due messages into the owning endpoint's input queue: the core of every release,
    # INTO the queue with {into_columns} (a column list from 6.3.6 and 7.0.4).
    MOVE_DUE = """\
WITH message AS (
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
INTO {table}{into_columns};"""

    # 3.1.0-6.2.0: one silent batch, NOCOUNT-wrapped.
    MOVE_DUE_DELAYED_SILENT = (
        "DECLARE @NOCOUNT VARCHAR(3) = 'OFF';\n"
        "IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';\n"
        "SET NOCOUNT ON;\n\n" + MOVE_DUE + "\n\n"
        "IF (@NOCOUNT = 'ON') SET NOCOUNT ON;\n"
        "IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"
    )

    # 6.3.1+: then reports when the next one falls due, {next_hint} (READPAST on the probe)
    # from 6.3.4 and 7.0.0.
    MOVE_DUE_DELAYED = (
        ";"
        + MOVE_DUE
        + """

SELECT TOP 1 GETUTCDATE() as UtcNow, Due as NextDue
FROM {delayed}{next_hint}
ORDER BY Due"""
    )
    MOVE_INTO_COLUMNS = " (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)"
    READPAST = " WITH (READPAST)"

    # Beyond the transport (whose move would fail there): the same move into a queue whose
    # Recoverable column was dropped, in the latest form.
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
FROM {delayed} WITH (READPAST)
ORDER BY Due"""

    # Subscriptions (5.0+). {topics} becomes @Topic_0, @Topic_1, ... in the template.
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

    @staticmethod
    def _slots(template: str, **fragments: str) -> str:
        """The release's fragments put in a template's slots (identifiers stay for Statement)."""
        for slot, text in fragments.items():
            template = template.replace("{" + slot + "}", text)
        return template

    def _index_check(self, how: IndexCheck, column: str, profile: Profile) -> str:
        if profile.bracketed_runtime and column == "Expires":
            return self.CHECK_EXPIRES_INDEX_3_0
        if how is IndexCheck.BY_KEY:
            nonclustered = self.NONCLUSTERED_ONLY if column == "RowVersion" else ""
            return self._slots(self.CHECK_INDEX_BY_KEY, column=column, nonclustered=nonclustered)
        return self.CHECK_ROWVERSION_INDEX if column == "RowVersion" else self.CHECK_EXPIRES_INDEX

    def _receive(self, profile: Profile) -> tuple[str, tuple[str, ...]]:
        """The release's receive and its result columns."""
        wanted = {
            "Id": True,
            "CorrelationId": profile.receive_correlation,
            "Recoverable": profile.receive_recoverable,
            "Expired": not profile.filters_expired,
        }
        parts = [(names, text) for names, text in self.RECEIVE_OUTPUT if wanted[names[0]]]
        not_expired = self.NOT_EXPIRED_3_0 if profile.bracketed_runtime else self.NOT_EXPIRED
        template = self._slots(
            self.RECEIVE,
            not_expired=not_expired if profile.filters_expired else "",
            rowversion="[RowVersion]" if profile.bracketed_runtime else "RowVersion",
            output="\n".join(text for _, text in parts),
        )
        return template, tuple(name for names, _ in parts for name in names) + ("Headers", "Body")

    def _peek(self, profile: Profile, peek_batch_size: int) -> str:
        if profile.bracketed_runtime:
            return self.PEEK_3_0
        not_expired = self.NOT_EXPIRED if profile.filters_expired else ""
        if profile.peek is PeekForm.COUNT:
            return self._slots(self.PEEK_COUNT, not_expired=not_expired)
        if profile.peek is PeekForm.TOP:
            return self._slots(self.PEEK_TOP, not_expired=not_expired, peek_batch_size=str(peek_batch_size))
        return self._slots(self.PEEK, hint="READPAST, READCOMMITTEDLOCK" if profile.peek_readcommittedlock else "nolock")

    def _recoverable_sys(self, profile: Profile, queue: TableName) -> str:
        """The sys schema of the queue's catalog as the release's Recoverable count writes it."""
        catalog = queue.catalog if profile.three_part_names else None
        if catalog is None:
            sys_ = "sys"
        elif profile.recoverable_check is RecoverableCheck.COUNT_RAW_CATALOG and _REGULAR_IDENTIFIER.match(catalog):
            sys_ = f"{catalog}.sys"  # raw, as 7.0.7 and 8.1.5 write it, where that is still one identifier
        else:
            sys_ = f"{self.quote(catalog)}.sys"
        return sys_

    def _move_due(self, profile: Profile, recoverable_column: bool) -> str:
        if not recoverable_column:
            return self.MOVE_DUE_DELAYED_WITHOUT_RECOVERABLE
        into_columns = self.MOVE_INTO_COLUMNS if profile.move_due_column_list else ""
        if not profile.move_due_returns_next:
            return self._slots(self.MOVE_DUE_DELAYED_SILENT, into_columns=into_columns)
        return self._slots(
            self.MOVE_DUE_DELAYED, into_columns=into_columns, next_hint=self.READPAST if profile.move_due_next_readpast else ""
        )

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
        """Every runtime statement of `profile`'s transport version for the queue `queue`,
        including each variant the transport can choose (send_norec, 7.0+).

        `delayed` (3.1+) adds store/move of delayed messages (moved into `queue`, the owning
        endpoint's input queue); `subscriptions` (5.0+) adds subscribe/unsubscribe/find with
        `topics` parameters @Topic_0..; `recoverable_column=False` (7.0+) makes `send` the send
        into a queue whose Recoverable column was dropped; `peek_batch_size` is the N of the
        TOP N peek (3.1.6, 4.1.2 - 6.0.1).
        """
        if isinstance(topics, bool) or not isinstance(topics, int) or topics < 1:
            raise ValueError(f"topics must be a positive integer, not {topics!r}")
        if isinstance(peek_batch_size, bool) or not isinstance(peek_batch_size, int) or peek_batch_size < 0:
            raise ValueError(f"peek_batch_size must be a positive integer, not {peek_batch_size!r}")
        if profile.peek is PeekForm.TOP and peek_batch_size <= 0:
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
        table = {"table": qualified}
        probe = {"table_literal": self.literal_text(qualified)}
        correlation = profile.receive_correlation

        if not latest_send:
            recoverable = "@Recoverable" if profile.send_recoverable_parameter else "1"
            send = self.SEND_3_0 if profile.bracketed_runtime else self._slots(self.SEND_WITH_CORRELATION, recoverable=recoverable)
        else:
            send = self.SEND if recoverable_column else self.SEND_WITHOUT_RECOVERABLE
        receive, receive_columns = self._receive(profile)

        out = {
            "send": Statement("send", send, table, parameters_of(send), "place a message on the queue"),
            "receive": Statement(
                "receive",
                receive,
                table,
                (),
                "take the oldest unlocked message off the queue"
                + (", skipping expired ones" if profile.filters_expired else ", flagging it if expired"),
                columns=receive_columns,
            ),
            "receive_batch": Statement(
                "receive_batch",
                self.RECEIVE_BATCH_WITH_CORRELATION if correlation else self.RECEIVE_BATCH,
                table,
                ("BatchSize",),
                "take up to @BatchSize oldest unlocked messages, oldest first, flagging expired ones",
                columns=(MESSAGE_WITH_CORRELATION if correlation else MESSAGE) + ("Order",),
            ),
            "lock_batch": Statement(
                "lock_batch",
                self.LOCK_BATCH,
                table,
                ("BatchSize",),
                "lock up to @BatchSize oldest unlocked messages for this transaction, oldest first, flagging expired ones",
                columns=MESSAGE + ("Order",),
            ),
            "delete_locked": Statement(
                "delete_locked",
                self.DELETE_LOCKED,
                table,
                ("Orders",),
                "take the messages this transaction locked at the positions @Orders",
            ),
            "savepoint": Statement("savepoint", self.SAVEPOINT, table, (), "mark a savepoint before one message of a batch is handled"),
            "rollback_to_savepoint": Statement(
                "rollback_to_savepoint", self.ROLLBACK_TO_SAVEPOINT, table, (), "undo what one message's handler wrote since its savepoint"
            ),
            "peek": Statement("peek", self._peek(profile, peek_batch_size), table, (), "estimate how many messages wait in the queue"),
            "purge_expired": Statement(
                "purge_expired",
                self.PURGE_EXPIRED_3_0
                if profile.bracketed_runtime
                else self._slots(self.PURGE_EXPIRED, hint="READPAST" if profile.purge_expired_readpast else "NOLOCK"),
                table,
                ("BatchSize",),
                "delete up to @BatchSize expired messages",
            ),
            "purge_all": Statement("purge_all", self.PURGE_ALL, table, (), "delete every message (purge at startup)"),
            "check_expires_index": Statement(
                "check_expires_index",
                self._index_check(profile.expires_check, "Expires", profile),
                probe,
                (),
                "count the queue's Index_Expires (0: missing)"
                if profile.expires_check is IndexCheck.BY_NAME
                else "count the queue's indexes keyed on Expires (0: missing)",
            ),
        }
        if profile.headers_unicode:  # the check came with nvarchar Headers (2.2.6, 3.0.3) to warn of varchar
            out["check_headers_type"] = Statement(
                "check_headers_type", self.CHECK_HEADERS_TYPE, probe, (), "name the type of the queue's Headers column"
            )
        if profile.rowversion_check is not IndexCheck.NONE:
            out["check_rowversion_index"] = Statement(
                "check_rowversion_index",
                self._index_check(profile.rowversion_check, "RowVersion", profile),
                probe,
                (),
                "count the queue's nonclustered RowVersion index (0: still clustered, the transport warns)",
            )
        if latest_send:
            out["send_norec"] = Statement(
                "send_norec",
                self.SEND_WITHOUT_RECOVERABLE,
                table,
                parameters_of(self.SEND_WITHOUT_RECOVERABLE),
                "place a message on a queue whose Recoverable column was dropped",
            )
            by_columns = profile.recoverable_check is RecoverableCheck.COLUMNS
            out["check_recoverable_column"] = Statement(
                "check_recoverable_column",
                self.CHECK_RECOVERABLE_COLUMNS if by_columns else self.CHECK_RECOVERABLE_COLUMN,
                table if by_columns else {**probe, "sys": self._recoverable_sys(profile, queue)},
                (),
                "tell whether the queue still has its Recoverable column (chooses send or send_norec)",
            )
        if delayed is not None:
            both = {"table": qualified, "delayed": self.qualified(delayed, profile)}
            declare_due, due = self.DUE_FORMS[profile.store_delayed]
            store = self._slots(self.STORE_DELAYED, declare_due=declare_due, due=due)
            out["store_delayed"] = Statement(
                "store_delayed",
                store,
                {"delayed": both["delayed"]},
                parameters_of(store),
                "store a message in the delayed table, due at the given time",
            )
            out["move_due_delayed"] = Statement(
                "move_due_delayed",
                self._move_due(profile, recoverable_column),
                both,
                ("BatchSize",),
                "move up to @BatchSize due messages into the input queue"
                + ("; then return when the next falls due" if profile.move_due_returns_next else ""),
            )
        if subscriptions is not None:
            subs = {"subscriptions": self.qualified(subscriptions, profile)}
            topic_params = tuple(f"Topic_{i}" for i in range(topics))
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
                self._slots(self.FIND_SUBSCRIBERS, topics=", ".join("@" + p for p in topic_params)),
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

        # Start-up warnings, as the transport logs them (what is missing, and why it matters).
        MISSING_EXPIRES_INDEX_WARNING = {
            IndexCheck.BY_NAME: "Table {table} does not contain index 'Index_Expires'.",
            IndexCheck.BY_KEY: "Table {table} does not contain an index for column 'Expires'.",
        }
        EXPIRES_INDEX_ADVICE = (
            " Adding this index will speed up the process of purging expired messages from the queue. "
            "Please consult the documentation for further information."
        )
        MISSING_ROWVERSION_INDEX_WARNING = {
            IndexCheck.BY_NAME: "Table {table} does not contain non-clustered index 'Index_RowVersion'.",
            IndexCheck.BY_KEY: "Table {table} does not contain a non-clustered index for column 'RowVersion'.",
        }
        ROWVERSION_INDEX_ADVICE = (
            " Migrating to this non-clustered index will improve performance for send and receive operations. "
            "Please consult the documentation for further information."
        )
        NON_UNICODE_WARNING = (
            "Table {table} stores headers in a non Unicode-compatible column ({type}). This may lead to data loss "
            "when sending non-ASCII characters in headers. Please change the column type to nvarchar(max)."
        )

        def warnings(self, connection: Connection, queues: list[TableName], profile: Profile, purges_expired: bool = False) -> list[str]:
            """The transport's own start-up checks, run per queue with its statements: a missing
            Index_Expires, a RowVersion index that is still clustered, non-Unicode headers."""
            warnings = []
            for name in queues:
                checks = self.dialect.runtime_statements(profile, name, peek_batch_size=1)
                table = self.dialect.qualified(name, profile)

                def count(statement: str, checks: dict = checks) -> int:
                    return connection.exec_driver_sql(checks[statement].sql).scalar() or 0

                if profile.checks_expires_index(purges_expired) and not count("check_expires_index"):
                    warnings.append(
                        self.MISSING_EXPIRES_INDEX_WARNING[profile.expires_check].format(table=table) + self.EXPIRES_INDEX_ADVICE
                    )
                if "check_rowversion_index" in checks and not count("check_rowversion_index"):
                    warnings.append(
                        self.MISSING_ROWVERSION_INDEX_WARNING[profile.rowversion_check].format(table=table) + self.ROWVERSION_INDEX_ADVICE
                    )
                if profile.headers_unicode:
                    column_type = connection.exec_driver_sql(checks["check_headers_type"].sql).scalar()
                    if column_type and column_type.lower() == "varchar":
                        warnings.append(self.NON_UNICODE_WARNING.format(table=table, type=column_type))
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

            # First, in the login's own database: Transport.from_database reads which revision is deployed,
            # and the blueprint the migrations stored.
            own = [
                self.GRANT_TABLE.format(privileges="SELECT", table=self.dialect.qualified(TableName(t)), role=role_q)
                for t in ("alembic_version", BLUEPRINT_TABLE)
            ]
            return own + self._with_catalogs(self._by_catalog(plan.tables, lambda g: g.table.catalog), render)

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
        # A failure stops the script under any client, not only `sqlcmd -b`: XACT_ABORT rolls the whole
        # transaction back at the first error; the batch after each batch then finds no transaction (or
        # the error) and turns execution off, so no later batch runs outside it; the script's last batch
        # turns it on again (SET NOEXEC OFF runs even while it is off) for the session's next queries.
        OPENING = "SET XACT_ABORT ON;"
        BATCH_GUARD = "IF @@ERROR <> 0 OR @@TRANCOUNT = 0 SET NOEXEC ON;\n\nGO\n\n"
        CLOSING = "SET NOEXEC OFF;\n\nGO\n\n"
        STOPPING_NOTE = (
            "It stops at its first error under any client (SET XACT_ABORT ON rolls its transaction back; "
            "SET NOEXEC ON after each batch skips the rest)."
        )
        # How each file of a split script opens and closes its transaction (as Alembic's offline output does).
        SCRIPT_BEGIN = OPENING + "\n\nBEGIN TRANSACTION;\n\nGO\n\n" + BATCH_GUARD
        SCRIPT_COMMIT = "COMMIT;\n\nGO\n\n" + CLOSING

        # A batch that locks an existing table waits at most this long for it (error 1222); sqlcmd -b
        # stops there and the open transaction rolls back with the session: run the script again.
        LOCK_TIMEOUT = "SET LOCK_TIMEOUT {milliseconds};\n{batch}"
        RUN_STOPPING = "sqlcmd -b -i FILE"

        def guard_version_table(self, ddl: str) -> str:
            return self.GUARDED_VERSION_TABLE.format(ddl=ddl)

        def bounded(self, batch: str, milliseconds: int) -> str:
            return self.LOCK_TIMEOUT.format(milliseconds=int(milliseconds), batch=batch) if milliseconds else batch

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

    # =====================================================================================
    # -- status and retry (engines/operations.py) -----------------------------------------
    # =====================================================================================
    class Operations(Dialect.Operations):  # pragma: no cover - no SQL Server here; text only (tests parse it)
        """Figures read WITH (NOLOCK): never blocked by a receive's locks, nor blocking one (a message
        in flight is counted). Estimates from sys.partitions (per catalog, three-part names). A retry
        batch is read WITH (UPDLOCK, ROWLOCK): held until its transaction ends."""

        supported = True
        order = "RowVersion"
        QUEUE_ARM = (
            "SELECT {index} AS i, COUNT_BIG(*) AS depth, COUNT_BIG(CASE WHEN Expires < GETUTCDATE() THEN 1 END) AS expired, "
            "(SELECT TOP (1) Headers FROM {table} WITH (NOLOCK) ORDER BY {order}) AS head, CAST(NULL AS datetime) AS due "
            "FROM {table} WITH (NOLOCK)"
        )
        QUEUE_ESTIMATE_ARM = (
            "SELECT {index}, CAST(NULL AS bigint), CAST(NULL AS bigint), "
            "(SELECT TOP (1) Headers FROM {table} WITH (NOLOCK) ORDER BY {order}), CAST(NULL AS datetime)"
        )
        DELAYED_ARM = (
            "SELECT {index}, COUNT_BIG(*), COUNT_BIG(CASE WHEN Due < GETUTCDATE() THEN 1 END), CAST(NULL AS nvarchar(max)), MIN(Due) "
            "FROM {table} WITH (NOLOCK)"
        )
        COUNT_ARM = "SELECT {index}, COUNT_BIG(*), CAST(NULL AS bigint), CAST(NULL AS nvarchar(max)), CAST(NULL AS datetime) FROM {table} WITH (NOLOCK)"
        HIGH_WATER_ARM = "SELECT {index}, CAST(IDENT_CURRENT(@Name) AS bigint)"  # RowVersion's IDENTITY
        TABLES = """\
SELECT {catalog} AS CatalogName, s.name, t.name, SUM(p.rows)
FROM {sys}.tables AS t
JOIN {sys}.schemas AS s ON s.schema_id = t.schema_id
JOIN {sys}.partitions AS p ON p.object_id = t.object_id AND p.index_id IN (0, 1)
GROUP BY s.name, t.name"""
        FAILED_Q_COUNTS = """\
SELECT FailedQ, COUNT_BIG(*) AS Messages FROM (
    SELECT CASE WHEN ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.FailedQ"') END AS FailedQ
    FROM {table} WITH (NOLOCK)
) AS failed
GROUP BY FailedQ ORDER BY FailedQ"""
        TOPICS = "SELECT Topic, COUNT_BIG(*) AS Subscribers FROM {table} GROUP BY Topic ORDER BY Topic"
        ERROR_BATCH = "SELECT TOP (@BatchSize) {order}, Id, Headers, Body FROM {table} WITH (UPDLOCK, ROWLOCK) WHERE {order} > @After ORDER BY {order}"
        ERROR_SCAN = "SELECT TOP (@BatchSize) {order}, Id, Headers, NULL FROM {table} WHERE {order} > @After ORDER BY {order}"

        def tables(self, catalogs: set[str | None], estimate: bool = False) -> list[Statement]:
            """One statement per catalog (None: the connection's database), its name returned as given."""
            out = []
            for catalog in sorted(catalogs, key=lambda c: (c is not None, c or "")):
                literal = "CAST(NULL AS sysname)" if catalog is None else "N" + self.dialect.literal(catalog)
                out.append(self.statement("tables", self.TABLES.format(catalog=literal, sys=self.dialect._sys(catalog))))
            return out
