"""SQL Server's catalog reads: live shapes for `check`, `adopt` and autogenerate, and the
transport's own start-up checks (the nested `MSSQL.Catalog`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ...schema import TableName
from ...shapes import UNKNOWN_EXPRESSION, UNKNOWN_PREDICATE, IndexShape, TableShape, normalise_predicate
from ...versions import IndexCheck, Profile
from ..base import Dialect

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.engine import Connection


def _balanced(text: str) -> bool:
    """Whether every parenthesis in text closes within it ("(a) + (b)" is, "a) + (b" is not)."""
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


class Catalog(Dialect.Catalog):
    """Live shapes from five bulk queries over the sys catalog views (per database) and one over
    sys.databases, and the transport's own start-up checks.

    Every catalog name is spelled in its exact case (sys views and their columns lower case,
    INFORMATION_SCHEMA and its views and columns upper case): in a database with a case-sensitive
    collation (`_CS_`) identifiers, the catalog's own included, match only in their exact case."""

    # The column listing the neutral base reads (verify, online upgrades), in INFORMATION_SCHEMA's
    # exact case: `information_schema.columns` is "Invalid object name" in a case-sensitive database.
    EXISTING_COLUMNS = (
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS "
        "WHERE TABLE_SCHEMA NOT IN ('INFORMATION_SCHEMA', 'sys')"
    )

    # One query per catalog view, joined in Python; {sys} is sys, or [catalog].sys for another database.
    # Rows: (object_id, schema, table)
    SHAPE_TABLES = """\
SELECT t.object_id, s.name, t.name
FROM {sys}.tables t
INNER JOIN {sys}.schemas s ON s.schema_id = t.schema_id
WHERE t.is_ms_shipped = 0"""
    # Rows: (object_id, column, type, max_length (bytes; -1 = max), precision, scale,
    #        is_nullable, is_identity, is_computed, collation_name, default constraint's definition,
    #        computed column's definition, is_persisted), in column order; a definition the login may not
    #        read (no VIEW DEFINITION: NULL) of a default or computed column that is there reads HIDDEN
    SHAPE_COLUMNS = """\
SELECT c.object_id, c.name, ty.name, c.max_length, c.[precision], c.scale, c.is_nullable, c.is_identity, c.is_computed,
       c.collation_name, COALESCE(dc.[definition], CASE WHEN dc.object_id IS NOT NULL THEN '(?)' END),
       COALESCE(cc.[definition], CASE WHEN cc.object_id IS NOT NULL THEN '(?)' END), cc.is_persisted
FROM {sys}.columns c
INNER JOIN {sys}.types ty ON ty.user_type_id = c.user_type_id
INNER JOIN {sys}.tables t ON t.object_id = c.object_id
LEFT JOIN {sys}.default_constraints dc ON dc.parent_object_id = c.object_id AND dc.parent_column_id = c.column_id
LEFT JOIN {sys}.computed_columns cc ON cc.object_id = c.object_id AND cc.column_id = c.column_id
WHERE t.is_ms_shipped = 0
ORDER BY c.object_id, c.column_id"""
    HIDDEN = "(?)"  # no definition SQL Server keeps reads so: one this login cannot read
    # Rows: (object_id, index_id, name, type_desc, is_unique, has_filter, filter_definition, is_disabled,
    #        ignore_dup_key, fill_factor, is_padded, allow_row_locks, allow_page_locks); heaps left out
    SHAPE_INDEXES = """\
SELECT i.object_id, i.index_id, i.name, i.type_desc, i.is_unique, i.has_filter, i.filter_definition, i.is_disabled,
       i.ignore_dup_key, i.fill_factor, i.is_padded, i.allow_row_locks, i.allow_page_locks
FROM {sys}.indexes i
INNER JOIN {sys}.tables t ON t.object_id = i.object_id
WHERE t.is_ms_shipped = 0 AND i.type <> 0 AND i.is_hypothetical = 0"""
    # Rows: (object_id, index_id, column, key_ordinal (0 for included columns), is_included_column, is_descending_key)
    SHAPE_INDEX_COLUMNS = """\
SELECT ic.object_id, ic.index_id, c.name, ic.key_ordinal, ic.is_included_column, ic.is_descending_key
FROM {sys}.index_columns ic
INNER JOIN {sys}.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
INNER JOIN {sys}.tables t ON t.object_id = ic.object_id
WHERE t.is_ms_shipped = 0
ORDER BY ic.object_id, ic.index_id, ic.key_ordinal, ic.index_column_id"""
    # Rows: (object_id of the table, trigger): DML triggers on user tables
    SHAPE_TRIGGERS = """\
SELECT tr.parent_id, tr.name
FROM {sys}.triggers tr
INNER JOIN {sys}.tables t ON t.object_id = tr.parent_id
WHERE t.is_ms_shipped = 0 AND tr.parent_class = 1"""
    # Rows: (database, its default collation, 1 for the connection's own): once per check, server-wide.
    # A column created without COLLATE takes its database's default.
    SHAPE_DATABASES = """\
SELECT d.name, d.collation_name, CASE WHEN d.database_id = DB_ID() THEN 1 ELSE 0 END
FROM sys.databases d"""
    # SQL Server keeps CAST(x AS t) as CONVERT([t],[x]) (with a style of 0 where it adds one): both read as the CAST.
    _CONVERT = re.compile(r"^convert\((\w+(?:\((?:\w+|\d+(?:,\d+)?)\))?),(.+?)(?:,\(?0\)?)?\)$")

    @classmethod
    def expression(cls, text: str) -> str:
        """A definition from sys.default_constraints or sys.computed_columns as DDL would write it:
        lower case, no brackets, no enclosing parentheses, CONVERT as CAST."""
        text = re.sub(r"\s+", " ", text.replace("[", "").replace("]", "")).strip().lower()
        while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
            text = text[1:-1].strip()
        match = cls._CONVERT.match(text.replace(", ", ","))
        return f"cast({match[2]} as {match[1]})" if match else text

    @staticmethod
    def index_options(
        disabled: Any, ignore_dup_key: Any, fill_factor: Any, padded: Any, row_locks: Any, page_locks: Any
    ) -> tuple[str, ...]:
        """The options of a sys.indexes row that differ from CREATE INDEX's defaults (our DDL sets none)."""
        options = []
        if disabled:
            options.append("disabled")
        if ignore_dup_key:
            options.append("ignore_dup_key")
        if fill_factor not in (None, 0, 100):
            options.append(f"fillfactor {fill_factor}")
        if padded:
            options.append("pad_index")
        if row_locks is not None and not row_locks:
            options.append("no row locks")
        if page_locks is not None and not page_locks:
            options.append("no page locks")
        return tuple(options)

    @staticmethod
    def column_type(type_name: str, max_length: int, precision: int = 0, scale: int = 0) -> str:
        """A sys.types name and sys.columns sizes as DDL spells the type, lower case:
        nvarchar/-1 -> nvarchar(max), varchar/255 -> varchar(255), nvarchar/400 -> nvarchar(200);
        datetime2, datetimeoffset and time at their default scale 7 bare, as DDL writes them
        (`datetime2` is stored as scale 7: no drift), another scale with it (datetime2(3))."""
        name = type_name.strip().lower()
        if name in ("varchar", "char", "varbinary", "binary", "nvarchar", "nchar"):
            if max_length == -1:
                return f"{name}(max)"
            return f"{name}({max_length // 2 if name in ('nvarchar', 'nchar') else max_length})"
        if name in ("decimal", "numeric"):
            return f"{name}({precision},{scale})"
        if name in ("datetime2", "datetimeoffset", "time"):
            return name if scale == 7 else f"{name}({scale})"
        return name

    @staticmethod
    def predicate(has_filter: Any, filter_definition: str | None) -> str | None:
        """An index's predicate from sys.indexes: None unfiltered; UNKNOWN_PREDICATE where it is
        filtered but filter_definition is NULL (a login without VIEW DEFINITION sees has_filter only)."""
        if not has_filter:
            return None
        return UNKNOWN_PREDICATE if filter_definition is None else normalise_predicate(filter_definition)

    def shapes_from_rows(
        self,
        tables: Iterable[tuple],
        columns: Iterable[tuple],
        indexes: Iterable[tuple],
        index_columns: Iterable[tuple],
        catalog: str | None = None,
        triggers: Iterable[tuple] = (),
        collation: str | None = None,
    ) -> dict[tuple, tuple[TableName, TableShape]]:
        """The live shapes from the rows of SHAPE_TABLES, SHAPE_COLUMNS, SHAPE_INDEXES,
        SHAPE_INDEX_COLUMNS and SHAPE_TRIGGERS (pure: no connection). catalog: the database the rows
        were read from (None: the connection's own); collation: that database's default (None: unknown,
        collations not compared)."""
        table_key = self.dialect.table_key
        by_object: dict[int, TableShape] = {}
        out: dict[tuple, tuple[TableName, TableShape]] = {}
        for object_id, schema, table in tables:
            name = TableName(table, schema, catalog)
            by_object[object_id] = shape = TableShape()
            out[table_key(name)] = (name, shape)
        for row in columns:
            object_id, column, type_name, max_length, precision, scale, nullable, identity, computed = row[:9]
            column_collation, default, definition, persisted = row[9:13]
            shape = by_object.get(object_id)
            if shape is None:
                continue
            key = column.lower()
            shape.columns[key] = (self.column_type(type_name, max_length, precision, scale), bool(nullable))
            if identity:
                shape.identity.add(key)
            if computed:
                shape.computed.add(key)
            if definition == self.HIDDEN:
                shape.generated[key] = UNKNOWN_EXPRESSION
            elif definition is not None:
                shape.generated[key] = self.expression(definition) + (" persisted" if persisted else "")
            if default is not None:
                shape.defaults[key] = UNKNOWN_EXPRESSION if default == self.HIDDEN else self.expression(default)
            if collation is not None and column_collation is not None and column_collation != collation:
                shape.collations[key] = column_collation
        keys: dict[tuple[int, int], list[tuple[int, str]]] = {}
        included: dict[tuple[int, int], list[str]] = {}
        for object_id, index_id, column, key_ordinal, is_included, descending in index_columns:
            if is_included:
                included.setdefault((object_id, index_id), []).append(column.lower())
            else:
                keys.setdefault((object_id, index_id), []).append((key_ordinal, column.lower() + (" desc" if descending else "")))
        for object_id, index_id, name, type_desc, unique, has_filter, filter_definition, *options in indexes:
            shape = by_object.get(object_id)
            if shape is None or (type_desc or "").upper() == "HEAP":
                continue
            kind = (type_desc or "").upper()
            shape.indexes.append(
                IndexShape(
                    tuple(column for _, column in sorted(keys.get((object_id, index_id), []))),
                    bool(unique),
                    self.predicate(has_filter, filter_definition),
                    name,
                    clustered=kind.startswith("CLUSTERED"),
                    include=tuple(sorted(included.get((object_id, index_id), []))),
                    options=self.index_options(*options),
                )
            )
        for object_id, trigger in triggers:
            shape = by_object.get(object_id)
            if shape is not None:
                shape.triggers = tuple(sorted((*shape.triggers, trigger)))
        return out

    def read_shapes(self, connection: Connection, catalogs: Iterable[str] = ()) -> dict[tuple, tuple[TableName, TableShape]]:
        """The connection's database, and each named catalog (three-part names) through [catalog].sys;
        a server older than 2008 (no has_filter) is refused, saying so."""
        self.dialect.refuse_older_server(getattr(connection, "dialect", None), "check")
        out: dict[tuple, tuple[TableName, TableShape]] = {}
        databases = [tuple(row) for row in connection.exec_driver_sql(self.SHAPE_DATABASES)]
        own = next((collation for _, collation, current in databases if current), None)
        by_name = {name: collation for name, collation, _ in databases}
        for catalog in (None, *dict.fromkeys(catalogs)):
            sys_ = self.dialect._sys(catalog)

            def rows(sql: str, sys_: str = sys_) -> list[tuple]:
                return [tuple(row) for row in connection.exec_driver_sql(sql.format(sys=sys_))]

            out.update(
                self.shapes_from_rows(
                    rows(self.SHAPE_TABLES),
                    rows(self.SHAPE_COLUMNS),
                    rows(self.SHAPE_INDEXES),
                    rows(self.SHAPE_INDEX_COLUMNS),
                    catalog,
                    rows(self.SHAPE_TRIGGERS),
                    own if catalog is None else by_name.get(catalog),
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
                warnings.append(self.MISSING_EXPIRES_INDEX_WARNING[profile.expires_check].format(table=table) + self.EXPIRES_INDEX_ADVICE)
            if "check_rowversion_index" in checks and not count("check_rowversion_index"):
                warnings.append(
                    self.MISSING_ROWVERSION_INDEX_WARNING[profile.rowversion_check].format(table=table) + self.ROWVERSION_INDEX_ADVICE
                )
            if profile.headers_unicode:
                column_type = connection.exec_driver_sql(checks["check_headers_type"].sql).scalar()
                if column_type and column_type.lower() == "varchar":
                    warnings.append(self.NON_UNICODE_WARNING.format(table=table, type=column_type))
        return warnings
