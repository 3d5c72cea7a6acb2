"""Where a pipeline reads and writes: a table in a database, its layout, and how to connect.

Two ways in: a DBAPI connection (psycopg 3, sqlite3, pyodbc), opened inside Spark tasks so that
rows and the ledger row commit in one transaction; and a JDBC URL plus driver class for Spark's own
JDBC reader (archive). What differs by engine (drivers, connection strings, JDBC URLs, the layout
of its own tables) is the engine's pipeline section (`dialect.pipeline`). Nothing here imports pyspark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from .. import engines, wire
from ..engines.pipeline import Table
from ..schema import Kind, TableName
from ..urls import display_url
from .layouts import Layout, layout

# Where the engines' JDBC driver jars are: Debian's packages (libpostgresql-jdbc-java,
# libxerial-sqlite-jdbc-java, libjtds-java) install them here; SQLTRANSPORT_JDBC_DIR names another folder.
JDBC_DIR_VARIABLE = "SQLTRANSPORT_JDBC_DIR"
JAVA_DIR = Path(os.environ.get(JDBC_DIR_VARIABLE, "/usr/share/java"))


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
        return layout(self.layout_name or self.dialect.pipeline.layout, self.kind)

    @property
    def target(self) -> Table:
        """This table as the engine's pipeline statements take it."""
        lay = self.layout
        return Table(self.table, lay.columns, lay.order, lay.key, self.describe())

    @property
    def qualified(self) -> str:
        return self.dialect.qualified(self.table)

    def describe(self) -> str:
        """Where, without credentials: shown in progress lines and recorded in the ledger."""
        return f"{display_url(self.url)} {self.qualified}"

    def with_table(self, table: TableName, kind: Kind | None = None) -> Endpoint:
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
    key = engine_of(a).pipeline.database_key
    return key(ua) == key(ub)


# --------------------------------------------------------------------------- DBAPI
def dbapi_connect(url: str, must_exist: bool = False) -> Any:
    """A DBAPI connection with explicit transaction control (sqlite3 in autocommit; we BEGIN), opened
    as every connection is (db.pipeline_connection: within the connect timeout, a SQLite file in a
    folder that is not there refused). must_exist: a SQLite file that is not there is refused
    (db.NoDatabase), never created."""
    from ..db import pipeline_connection

    return pipeline_connection(url, must_exist=must_exist)


# --------------------------------------------------------------------------- JDBC
@dataclass(frozen=True)
class Jdbc:
    url: str
    driver: str
    jar: str
    properties: dict = field(default_factory=dict)


# The Debian package that installs each JDBC driver jar into JAVA_DIR.
JAR_PACKAGES = {"postgresql.jar": "libpostgresql-jdbc-java", "sqlite-jdbc.jar": "libxerial-sqlite-jdbc-java", "jtds.jar": "libjtds-java"}


def missing_jar(url: str) -> str | None:
    """What to install when the JDBC driver jar Spark needs for url is not in JAVA_DIR (else None)."""
    jar = engine_of(url).pipeline.jdbc_jar
    if jar is None or (JAVA_DIR / jar).is_file():
        return None
    package = JAR_PACKAGES.get(jar)
    install = f"sudo apt-get install {package}" if package else f"install {jar}"
    return (
        f"Spark reads {engine_of(url).name} through the JDBC driver {JAVA_DIR / jar}, which is missing: {install}, "
        f"or pass --jars PATH (or set {JDBC_DIR_VARIABLE} to the folder that holds {jar})"
    )


def jdbc(url: str) -> Jdbc:
    """The JDBC URL and driver Spark reads this database through (the engine's jar in JAVA_DIR)."""
    pipeline = engine_of(url).pipeline
    return Jdbc(pipeline.jdbc_url(make_url(url)), pipeline.jdbc_driver, str(JAVA_DIR / pipeline.jdbc_jar))


def jdbc_jars() -> list[str]:
    """Every engine's JDBC driver jar, where it is installed."""
    names = dict.fromkeys(d.pipeline.jdbc_jar for d in engines.ENGINES.values() if d.pipeline.jdbc_jar)
    return [str(JAVA_DIR / jar) for jar in names if (JAVA_DIR / jar).is_file()]
