"""PostgreSQL's catalog reads (check, adopt, autogenerate): `PostgreSQL.Catalog`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...schema import TableName
from ...shapes import IndexShape, TableShape, normalise_predicate, normalise_type
from ..base import Dialect

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.engine import Connection


class Catalog(Dialect.Catalog):
    """Live shapes from three bulk queries over pg_catalog (tables, columns, indexes)."""

    USER_SCHEMAS = "n.nspname NOT IN ('information_schema') AND n.nspname !~ '^pg_'"
    SHAPE_TABLES = (
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p') AND " + USER_SCHEMAS
    )
    ALL_TABLES = SHAPE_TABLES  # pg_class shows every table; information_schema only those the login may use
    SHAPE_COLUMNS = (
        "SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped AND " + USER_SCHEMAS
    )
    SHAPE_INDEXES = (
        "SELECT n.nspname, t.relname, i.relname, ix.indisunique, pg_get_expr(ix.indpred, ix.indrelid), "
        "ARRAY(SELECT pg_get_indexdef(ix.indexrelid, k, true) FROM generate_series(1, ix.indnkeyatts) AS k) "
        "FROM pg_index ix JOIN pg_class t ON t.oid = ix.indrelid JOIN pg_class i ON i.oid = ix.indexrelid "
        "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE t.relkind IN ('r', 'p') AND " + USER_SCHEMAS
    )

    @staticmethod
    def _index_column(text: str) -> str:
        if len(text) >= 2 and text[0] == text[-1] == '"':
            return text[1:-1].replace('""', '"').lower()
        return text.lower()

    def read_shapes(self, connection: Connection, catalogs: Iterable[str] = ()) -> dict[tuple, tuple[TableName, TableShape]]:
        table_key = self.dialect.table_key
        out: dict[tuple, tuple[TableName, TableShape]] = {}
        for schema, table in connection.exec_driver_sql(self.SHAPE_TABLES):
            name = TableName(table, schema)
            out[table_key(name)] = (name, TableShape())
        for schema, table, column, type_, nullable in connection.exec_driver_sql(self.SHAPE_COLUMNS):
            entry = out.get(table_key(TableName(table, schema)))
            if entry is not None:
                entry[1].columns[column.lower()] = (normalise_type(type_), bool(nullable))
        for schema, table, index, unique, predicate, columns in connection.exec_driver_sql(self.SHAPE_INDEXES):
            entry = out.get(table_key(TableName(table, schema)))
            if entry is not None:
                shape = IndexShape(tuple(self._index_column(c) for c in columns), bool(unique), normalise_predicate(predicate), index)
                entry[1].indexes.append(shape)
        return out
