"""SQL Server's catalog reads: live shapes for `check`, `adopt` and autogenerate, and the
transport's own start-up checks (the nested `MSSQL.Catalog`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...schema import TableName
from ...shapes import IndexShape, TableShape, normalise_predicate
from ...versions import IndexCheck, Profile
from ..base import Dialect

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.engine import Connection


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
