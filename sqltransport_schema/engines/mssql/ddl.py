"""SQL Server's DDL: the columns of each table kind, the shapes our DDL gives them, and the
create, drop, upgrade and schema batches of every transport version (the `DDL` part of `MSSQL`)."""

from __future__ import annotations

from typing import Any

from ...schema import Kind, SchemaName, TableName, TableSpec
from ...shapes import Column, IndexShape, TableShape, normalise_predicate, shape_columns
from ...versions import ExpiresIndex, Profile, ScriptStyle


class DDL:
    """Mixin of `MSSQL`: every batch that creates, changes or drops a table or a schema."""

    # -- columns of each table kind, and the shapes our DDL gives them (check) ------------
    # Types as shapes_from_rows prints them from sys.types and max_length. Headers is nvarchar(max)
    # or varchar(max), by version; Endpoint is declared without NOT NULL, the primary key makes it so.
    QUEUE_COLUMNS = (
        Column("Id", "uniqueidentifier", False),
        Column("CorrelationId", "varchar(255)", True),
        Column("ReplyToAddress", "varchar(255)", True),
        Column("Recoverable", "bit", False),
        Column("Expires", "datetime", True),
        Column("Headers", None, False),
        Column("Body", "varbinary(max)", True),
        Column("RowVersion", "bigint", False),
    )
    COLUMNS = {
        Kind.QUEUE: QUEUE_COLUMNS,
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
        # the queue's columns (Headers as nvarchar(max)), RowVersion the archive's own key, then when, why and who archived
        Kind.ARCHIVE: tuple(c._replace(type="nvarchar(max)") if c.name == "Headers" else c for c in QUEUE_COLUMNS)
        + (
            Column("ArchivedAt", "datetime2", False),
            Column("ArchivedWhy", "nvarchar(max)", False),
            Column("ArchivedBy", "nvarchar(400)", False),
        ),
        Kind.ACTION_LOG: (
            Column("Id", "bigint", False),
            Column("At", "datetime2", False),
            Column("Who", "nvarchar(400)", False),
            Column("Action", "nvarchar(400)", False),
            Column("Target", "nvarchar(max)", False),
            Column("Messages", "int", False),
        ),
    }

    # -- expected shapes (check; the live side is Catalog.read_shapes) -------------------
    BODY_STRING_COLUMN = ("nvarchar(max)", True)  # AS CAST(Body AS nvarchar(max)): computed, nullable
    # sys.computed_columns' and sys.default_constraints' definitions as Catalog.expression reads them
    BODY_STRING_EXPRESSION = "cast(body as nvarchar(max))"
    OUTBOX_DEFAULTS = {"dispatched": "0"}  # CREATE_OUTBOX's DEFAULT 0, kept as ((0))
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
            generated = {"bodystring": self.BODY_STRING_EXPRESSION} if computed else {}
            return TableShape(columns, indexes, identity={"rowversion"}, computed=computed, generated=generated)
        if spec.kind is Kind.DELAYED:
            columns = shape_columns(self.COLUMNS[Kind.DELAYED])
            computed = set()
            if spec.body_string:
                columns["bodystring"] = self.BODY_STRING_COLUMN
                computed.add("bodystring")
            indexes = [IndexShape(("due",), name="Index_Due", clustered=False)]
            generated = {"bodystring": self.BODY_STRING_EXPRESSION} if computed else {}
            return TableShape(columns, indexes, identity={"rowversion"}, computed=computed, generated=generated)
        if spec.kind is Kind.OUTBOX:
            indexes = [
                IndexShape(("messageid",), unique=True, clustered=False),  # PRIMARY KEY NONCLUSTERED
                IndexShape(
                    ("dispatchedat",), predicate=normalise_predicate(self.OUTBOX_INDEX_PREDICATE), name=self.OUTBOX_INDEX, clustered=False
                ),
            ]
            return TableShape(shape_columns(self.OUTBOX_COLUMNS), indexes, defaults=dict(self.OUTBOX_DEFAULTS))
        if spec.kind is Kind.SAGA:
            columns = dict(self.SAGA_SHAPE_COLUMNS)
            indexes = [IndexShape(("id",), unique=True, clustered=True)]  # PRIMARY KEY (clustered by default)
            for c in spec.correlations:
                column = self.correlation_column(c.name).lower()
                columns[column] = (self.CORRELATION_TYPES[c.type], True)  # datetimeoffset: scale 7, read bare (Catalog.column_type)
                predicate = normalise_predicate(f"{column} IS NOT NULL")
                indexes.append(
                    IndexShape((column,), unique=True, predicate=predicate, name=self.correlation_index(spec, c.name), clustered=False)
                )
            return TableShape(columns, indexes)
        if spec.kind is Kind.ARCHIVE:
            indexes = [
                IndexShape(("rowversion",), unique=True, clustered=True),  # PRIMARY KEY CLUSTERED
                IndexShape(("archivedat",), name="Index_ArchivedAt", clustered=False),
            ]
            return TableShape(shape_columns(self.COLUMNS[Kind.ARCHIVE]), indexes, identity={"rowversion"})
        if spec.kind is Kind.ACTION_LOG:
            indexes = [IndexShape(("id",), unique=True, clustered=True)]  # PRIMARY KEY CLUSTERED
            return TableShape(shape_columns(self.COLUMNS[Kind.ACTION_LOG]), indexes, identity={"id"})
        indexes = [IndexShape(("endpoint", "topic"), unique=True, clustered=True)]  # PRIMARY KEY CLUSTERED
        return TableShape(shape_columns(self.COLUMNS[Kind.SUBSCRIPTIONS]), indexes)

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
    # QUEUE_COLUMNS as declared (3.1+): CREATE_QUEUE's column list, and CREATE_ARCHIVE's before its own three
    QUEUE_COLUMN_LIST = """\
        Id uniqueidentifier NOT NULL,
        CorrelationId varchar(255),
        ReplyToAddress varchar(255),
        Recoverable bit NOT NULL,
        Expires datetime,
        Headers {headers} NOT NULL,
        Body varbinary(max),
        RowVersion bigint IDENTITY(1,1) NOT NULL"""
    CREATE_QUEUE = (
        "    CREATE TABLE {table} (\n"
        + QUEUE_COLUMN_LIST
        + """
    );
    {rowversion_index}"""
    )
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

    # the queue's columns ({headers} always nvarchar(max)), RowVersion its clustered key, then its own three
    CREATE_ARCHIVE = (
        "    CREATE TABLE {table} (\n"
        + QUEUE_COLUMN_LIST
        + """ PRIMARY KEY CLUSTERED,
        ArchivedAt datetime2 NOT NULL,
        ArchivedWhy nvarchar(max) NOT NULL,
        ArchivedBy nvarchar(400) NOT NULL
    );
    CREATE NONCLUSTERED INDEX Index_ArchivedAt ON {table} (ArchivedAt)"""
    )
    CREATE_ACTION_LOG = """\
    CREATE TABLE {table} (
        Id bigint IDENTITY(1,1) NOT NULL PRIMARY KEY CLUSTERED,
        At datetime2 NOT NULL,
        Who nvarchar(400) NOT NULL,
        Action nvarchar(400) NOT NULL,
        Target nvarchar(max) NOT NULL,
        Messages int NOT NULL
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
    IF EXISTS (SELECT * FROM {table}{where})
        THROW 50000, N'{message}', 1;
    DROP TABLE {table};
END"""
    # Releases before 6.3.1 deploy on SQL Server 2008 (docs/sql-server-versions.md), which has no
    # THROW: RAISERROR (error 50000 too), with the drop in its ELSE. RAISERROR neither ends the
    # batch nor dooms the transaction; it is the batch's last statement, so a script's batch guard
    # finds it in @@ERROR, rolls back and runs nothing more.
    DROP_GUARDED_RAISERROR = """\
IF OBJECT_ID(N'{name}', N'U') IS NOT NULL
BEGIN
    IF EXISTS (SELECT * FROM {table}{where})
        RAISERROR(N'{message}', 16, 1);
    ELSE
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

    def create_archive(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        return [self._guarded_table(self.CREATE_ARCHIVE.format(headers="nvarchar(max)", **fields), fields, profile)]

    def create_action_log(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec, profile)
        return [self._guarded_table(self.CREATE_ACTION_LOG.format(**fields), fields, profile)]

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
    def drop_table(self, spec: TableSpec, profile: Profile | None, discard_messages: bool) -> list[str]:
        fields = self._fields(spec, profile)
        if discard_messages:
            return [self.DROP_DISCARDING.format(**fields)]
        message = self.literal_text(self.refusal(spec, profile))
        # THROW where the release's own DDL has it (2012), and for SQL persistence's tables (profile None), whose checks do
        if profile is None or profile.script_style is ScriptStyle.APPLOCK_TRY_CATCH:
            return [self.DROP_GUARDED.format(message=message, where=self.drop_guard_where(spec), **fields)]
        message = message.replace("%", "%%")  # RAISERROR's format string
        return [self.DROP_GUARDED_RAISERROR.format(message=message, where=self.drop_guard_where(spec), **fields)]

    INVALID_OBJECT_NAME = "42S02"  # the SQLSTATE pyodbc reports for error 208 (a table that does not exist)

    def undefined_table(self, error: BaseException) -> bool:
        return bool(error.args) and error.args[0] == self.INVALID_OBJECT_NAME

    def subscriber_parameters(self, queue: TableName) -> dict[str, Any]:
        addresses, in_current = self._subscriber_addresses(queue)
        return {"Addresses": self.list_parameter(addresses), "InCurrentCatalog": self.list_parameter(in_current)}

    # The same deletion in a script, where the addresses are known: N'...' literal lists, which
    # every SQL Server runs (OPENJSON needs 2016 and compatibility level 130).
    SCRIPT_DELETE_SUBSCRIBERS_OF = """\
DELETE FROM {subscriptions}
WHERE QueueAddress IN ({addresses}){in_current}"""
    SCRIPT_IN_CURRENT_CATALOG = "\n    OR QueueAddress IN ({addresses})"
    IN_CURRENT_CATALOG = "{address} + N'@' + QUOTENAME(DB_NAME())"

    def _subscriber_addresses(self, queue: TableName) -> tuple[list[str], list[str]]:
        """(the queue's addresses as subscribers write them, those followed by the current database's name)."""
        spellings = self.schema_spellings(queue)
        qualified = [f"{queue.table}@{part}" for part in dict.fromkeys(part or "[]" for part in spellings)]
        if queue.catalog is None:
            addresses, in_current = ([queue.table] if "" in spellings else []) + qualified, qualified
        else:
            catalogs = [self.address_part(queue.catalog)] + ([queue.catalog] if not any(ch in queue.catalog for ch in "@[]") else [])
            addresses, in_current = [f"{address}@{catalog}" for address in qualified for catalog in catalogs], []
        return addresses, in_current

    def script_value(self, value: Any) -> str:
        text = super().script_value(value)
        return text if value is None else "N" + text

    def script_delete_subscribers_of(self, subscriptions: TableName, queue: TableName) -> list[str]:
        addresses, in_current = self._subscriber_addresses(queue)
        current = [self.IN_CURRENT_CATALOG.format(address=self.script_value(address)) for address in in_current]
        statement = self.SCRIPT_DELETE_SUBSCRIBERS_OF.format(
            subscriptions=self.qualified(subscriptions),
            addresses=", ".join(self.script_value(address) for address in addresses),
            in_current=self.SCRIPT_IN_CURRENT_CATALOG.format(addresses=", ".join(current)) if current else "",
        )
        name = self.literal_text(self.qualified(subscriptions))
        return [self.SCRIPT_IF_TABLE_EXISTS.format(name=name, statement=statement)]

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
