"""Where a pipeline reads and writes: a table in a database, its layout, and how to connect.

Two ways in: a DBAPI connection (psycopg 3, sqlite3, pyodbc), opened inside Spark tasks so that
rows and the ledger row commit in one transaction; and a JDBC URL plus driver class for Spark's own
JDBC reader (archive). Nothing here imports pyspark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote as urlquote

from sqlalchemy.engine import make_url

from .. import engines
from ..runtime import wire
from ..schema import Kind, TableName
from .layouts import ENGINE_LAYOUT, Layout, layout

# Debian's JDBC driver packages (libpostgresql-jdbc-java, libxerial-sqlite-jdbc-java, libjtds-java)
JAVA_DIR = Path(os.environ.get("SQLTRANSPORT_JDBC_DIR", "/usr/share/java"))
JDBC = {
    # engine: (jar, driver class)
    "postgresql": ("postgresql.jar", "org.postgresql.Driver"),
    "sqlite": ("sqlite-jdbc.jar", "org.sqlite.JDBC"),
    "mssql": ("jtds.jar", "net.sourceforge.jtds.jdbc.Driver"),
}


@dataclass(frozen=True)
class Endpoint:
    """One table of one database: the unit a pipeline reads from or writes to."""

    url: str
    table: TableName
    kind: Kind = Kind.QUEUE
    layout_name: str | None = None  # None: the engine's own layout

    @property
    def dialect(self) -> engines.Dialect:
        return engine_of(self.url)

    @property
    def layout(self) -> Layout:
        return layout(self.layout_name or ENGINE_LAYOUT[self.dialect.name], self.kind)

    @property
    def qualified(self) -> str:
        return self.dialect.qualified(self.table)

    def describe(self) -> str:
        """Where, without credentials: shown in progress lines and recorded in the ledger."""
        parsed = make_url(self.url)
        where = parsed.render_as_string(hide_password=True)
        return f"{where} {self.qualified}"

    def with_table(self, table: TableName, kind: Kind | None = None) -> "Endpoint":
        return Endpoint(self.url, table, kind or self.kind, self.layout_name)


def engine_of(url: str) -> engines.Dialect:
    backend = make_url(url).get_backend_name()
    return engines.for_sqlalchemy(backend)


def table_name(text: str, engine: engines.Dialect | None = None) -> TableName:
    """A table given as a canonical address (`Sales`, `Sales@[public]`, `Sales@[dbo]@[nsb]`)."""
    address = wire.parse_address(text)
    schema = address.schema
    if engine is not None and not engine.has_schemas:
        schema = None
    return TableName(address.table, schema, address.catalog)


def same_database(a: str, b: str) -> bool:
    """Two URLs naming one database (then a move is one transaction per partition, and SQLite's
    single writer lock is never held twice)."""
    ua, ub = make_url(a), make_url(b)
    if ua.get_backend_name() != ub.get_backend_name():
        return False
    if ua.get_backend_name() == "sqlite":
        return os.path.realpath(ua.database or "") == os.path.realpath(ub.database or "")
    return (ua.host, ua.port, ua.database, ua.username) == (ub.host, ub.port, ub.database, ub.username)


# --------------------------------------------------------------------------- DBAPI
def dbapi_connect(url: str):
    """A DBAPI connection with explicit transaction control (sqlite3 in autocommit; we BEGIN)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        import psycopg

        from psycopg.conninfo import make_conninfo

        return psycopg.connect(make_conninfo(**_libpq(parsed)))
    if backend == "sqlite":
        import sqlite3

        path = parsed.database or ":memory:"
        conn = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 60000")
        return conn
    if backend == "mssql":
        try:
            import pyodbc
        except ImportError as exc:  # pragma: no cover - no SQL Server here
            raise RuntimeError("writing to SQL Server needs pyodbc: pip install -e '.[mssql]'") from exc
        return pyodbc.connect(_odbc(parsed), autocommit=False)  # pragma: no cover
    raise ValueError(f"no pipeline connection for {backend!r}")


def _libpq(parsed) -> dict:
    """libpq connection parameters (make_conninfo quotes them: a password may hold ' or \\)."""
    parts = {"host": parsed.host or "127.0.0.1", "port": parsed.port or 5432, "dbname": parsed.database,
             "user": parsed.username, "password": parsed.password}
    parts.update({k: v for k, v in parsed.query.items() if isinstance(v, str)})
    return {k: str(v) for k, v in parts.items() if v is not None}


def _odbc(parsed) -> str:  # pragma: no cover - no SQL Server here
    driver = parsed.query.get("driver", "ODBC Driver 18 for SQL Server")
    server = parsed.host + (f",{parsed.port}" if parsed.port else "")
    text = f"DRIVER={{{driver}}};SERVER={server};DATABASE={parsed.database or ''};"
    if parsed.username:
        text += f"UID={parsed.username};PWD={parsed.password or ''};"
    else:
        text += "Trusted_Connection=yes;"
    return text + "TrustServerCertificate=yes;"


# --------------------------------------------------------------------------- JDBC
@dataclass(frozen=True)
class Jdbc:
    url: str
    driver: str
    jar: str
    properties: dict = field(default_factory=dict)


def jdbc(url: str) -> Jdbc:
    """The JDBC URL and driver Spark reads this database through (drivers from Debian's /usr/share/java).

    PostgreSQL gets `stringtype=unspecified` (uuid columns) and `reWriteBatchedInserts=true`; SQL Server
    goes through jTDS (`jdbc:jtds:sqlserver://`), which Spark handles with its generic dialect, so the
    pipeline always reads SQL Server through an explicit query naming the columns.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    jar, driver = JDBC[backend]
    jar_path = str(JAVA_DIR / jar)
    if backend == "postgresql":
        query = {"stringtype": "unspecified", "reWriteBatchedInserts": "true"}
        if parsed.username:
            query["user"] = parsed.username
        if parsed.password:
            query["password"] = parsed.password
        text = f"jdbc:postgresql://{parsed.host or '127.0.0.1'}:{parsed.port or 5432}/{parsed.database}?" + "&".join(
            f"{k}={urlquote(str(v))}" for k, v in query.items())
        return Jdbc(text, driver, jar_path)
    if backend == "sqlite":
        return Jdbc(f"jdbc:sqlite:{os.path.abspath(parsed.database)}", driver, jar_path)
    # SQL Server through jTDS
    props = f";user={parsed.username};password={parsed.password or ''}" if parsed.username else ";useNTLMv2=true"
    text = f"jdbc:jtds:sqlserver://{parsed.host}:{parsed.port or 1433}/{parsed.database or ''}{props}"
    return Jdbc(text, driver, jar_path)
