"""Read what a real database holds, straight from its catalog (for assertions)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .databases import connect


@dataclass
class TableInfo:
    columns: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (type, nullable)
    indexes: dict[str, str] = field(default_factory=dict)  # name -> definition text
    rows: int = 0


def read(url: str) -> dict[tuple[str | None, str], TableInfo]:
    """(schema, table) -> TableInfo for every table except Alembic's own."""
    engine = connect(url)
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                return _sqlite(connection)
            return _postgresql(connection)
    finally:
        engine.dispose()


def _sqlite(connection) -> dict:
    out: dict = {}
    names = [
        r[0]
        for r in connection.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT IN ('alembic_version', 'sqltransport_blueprint', 'sqlite_sequence')"
        )
    ]
    for name in names:
        info = TableInfo()
        quoted = '"' + name.replace('"', '""') + '"'
        for row in connection.exec_driver_sql(f"PRAGMA table_xinfo({quoted})"):
            col, type_, notnull, pk = row[1], row[2], row[3], row[5]
            info.columns[col] = (type_.upper(), not notnull and not pk)
        for index, sql in connection.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", (name,)
        ):
            info.indexes[index] = sql
        info.rows = _count(connection, quoted)
        out[(None, name)] = info
    return out


def _postgresql(connection) -> dict:
    out: dict = {}
    skip = ["pg_catalog", "information_schema"]
    for schema, table, column, type_, nullable, default in connection.exec_driver_sql(
        "SELECT table_schema, table_name, column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema <> ALL(%s) AND table_name NOT IN ('alembic_version', 'sqltransport_blueprint') "
        "ORDER BY table_schema, table_name, ordinal_position",
        (skip,),
    ):
        info = out.setdefault((schema, table), TableInfo())
        type_ = type_.upper()
        if default and default.startswith("nextval("):
            type_ += " SERIAL"
        info.columns[column] = (type_, nullable == "YES")
    for schema, table, index, definition in connection.exec_driver_sql(
        "SELECT schemaname, tablename, indexname, indexdef FROM pg_indexes WHERE schemaname <> ALL(%s)", (skip,)
    ):
        if (schema, table) in out:
            out[(schema, table)].indexes[index] = definition
    for (schema, table), info in out.items():
        quoted = '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'
        info.rows = _count(connection, quoted)
    return out


def _count(connection, quoted: str) -> int:
    # no_parameters: a '%' or '?' inside a quoted name must reach the server as written
    return connection.execution_options(no_parameters=True).exec_driver_sql(f"SELECT count(*) FROM {quoted}").scalar()


def schemas(url: str) -> set[str]:
    engine = connect(url)
    try:
        with engine.connect() as connection:
            return {r[0] for r in connection.exec_driver_sql("SELECT nspname FROM pg_namespace")}
    finally:
        engine.dispose()


def execute(url: str, *statements: str, params=None) -> list:
    """Run statements in one transaction; returns the rows of the last one (if any)."""
    engine = connect(url)
    try:
        with engine.begin() as connection:
            result = None
            for statement in statements:
                result = connection.exec_driver_sql(statement, params) if params is not None else connection.exec_driver_sql(statement)
            return list(result) if result is not None and result.returns_rows else []
    finally:
        engine.dispose()


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def key(url: str, table: str, schema: str | None = None):
    return (None, table) if is_sqlite(url) else (schema or "public", table)
