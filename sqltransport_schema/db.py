"""Connecting: the one place URLs become SQLAlchemy engines (migrations and runtime alike)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, event, exc, pool
from sqlalchemy.engine import Engine, make_url

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from .engines import Dialect


def normalise_url(url: str) -> str:
    """A bare postgresql:// URL means psycopg 3, the driver this package installs; mysql:// and
    mariadb:// mean PyMySQL."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif parsed.drivername in ("mysql", "mariadb"):
        parsed = parsed.set(drivername=parsed.drivername + "+pymysql")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, *, sqlite_writers: bool = True, **kwargs) -> Engine:
    """An engine whose transactions are real on every backend, SQLite included.

    On SQLite its transactions begin as writers and wait for the lock (sqlite_transactions);
    sqlite_writers=False for an engine that only reads (a catalog, a stamped revision)."""
    url = normalise_url(url)
    if url.startswith("sqlite"):
        kwargs.setdefault("poolclass", pool.NullPool)
    engine = create_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        sqlite_transactions(engine, writers=sqlite_writers)
    return engine


def sqlite_transactions(engine: Engine, writers: bool = True) -> Engine:
    """Take transaction control of a SQLite engine (before its first connection) so competing
    processes wait instead of failing with "database is locked": every transaction begins with
    BEGIN IMMEDIATE (BEGIN when not writers), every connection has a 30 s busy timeout.

    sqlite3 would commit before each DDL statement and begin lazily, as a reader; ours begins at once."""
    from . import engines

    sqlite = engines.get("sqlite")
    begin = sqlite.BEGIN_WRITER if writers else sqlite.BEGIN_READER

    @event.listens_for(engine, "connect")
    def _no_implicit_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        sqlite.wait_for_locks(dbapi_connection)

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql(begin)

    return engine


@contextmanager
def catalog_connection(url: str, error: type[Exception]) -> Iterator[tuple[Dialect, Connection]]:
    """(engine class, connection) for reading a database's catalog; an unsupported engine or a
    failure to reach or read the database is raised as `error` with one clear line."""
    from . import engines

    db = make_engine(url, sqlite_writers=False)
    try:
        engine = engines.for_sqlalchemy(db.dialect.name)
        with db.connect() as connection:
            yield engine, connection
    except (engines.UnsupportedEngine, NotImplementedError) as problem:
        raise error(str(problem)) from None
    except exc.SQLAlchemyError as problem:
        raise error(f"cannot read the database: {problem.__class__.__name__}: {str(problem).splitlines()[0]}") from None
    finally:
        db.dispose()
