"""SQL Server: the transport's own DDL for every version, in one place a DBA can read.

Placeholders: {table} is the bracket-quoted qualified name, {name} the same text
escaped for use inside an N'...' literal, {sys} the catalog's sys schema
(`[catalog].sys` or `sys`). Nothing else ever reaches the SQL text.
"""

from __future__ import annotations

from ..schema import SchemaName, TableName, TableSpec
from ..versions import ExpiresIndex, Profile, ScriptStyle
from .base import Engine

MAX_IDENTIFIER = 128


class MSSQL(Engine):
    name = "mssql"
    dialect = "mssql"
    default_schema = "dbo"
    case_insensitive_names = True  # the default collation compares names without case

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

    # -- identifiers -------------------------------------------------------------------------
    expected = {
        "queue": frozenset({"id", "correlationid", "replytoaddress", "recoverable", "expires", "headers", "body", "rowversion"}),
        "delayed": frozenset({"headers", "body", "due", "rowversion"}),
        "subscriptions": frozenset({"queueaddress", "endpoint", "topic"}),
    }

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
                problems.append(
                    (part, f"is {len(value)} characters long; SQL Server names hold at most {MAX_IDENTIFIER}")
                )
        return problems

    # -- creation --------------------------------------------------------------------------
    def _guarded(self, body: str, fields: dict, profile: Profile, exists_condition: str, catalog_view: str) -> str:
        guard = self.GUARD_APPLOCK.format(
            exists_condition=exists_condition.format(**fields), catalog_view=catalog_view, **fields
        )
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
