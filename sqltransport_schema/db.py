"""Connecting: the one place URLs become SQLAlchemy engines (migrations and runtime alike)."""

from __future__ import annotations

from sqlalchemy import create_engine, event, pool
from sqlalchemy.engine import Engine, make_url

SQLITE_BUSY_TIMEOUT_S = 30


def normalise_url(url: str) -> str:
    """A bare postgresql:// URL means psycopg 3, the driver this package installs; mysql:// and
    mariadb:// mean PyMySQL."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif parsed.drivername in ("mysql", "mariadb"):
        parsed = parsed.set(drivername=parsed.drivername + "+pymysql")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, **kwargs) -> Engine:
    """An engine whose transactions are real on every backend, SQLite included."""
    url = normalise_url(url)
    if url.startswith("sqlite"):
        kwargs.setdefault("poolclass", pool.NullPool)
        kwargs.setdefault("connect_args", {}).setdefault("timeout", SQLITE_BUSY_TIMEOUT_S)
    engine = create_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        # sqlite3 would commit before each DDL statement and begin lazily; take transaction control ourselves.
        @event.listens_for(engine, "connect")
        def _no_implicit_transactions(dbapi_connection, _record):
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(connection):
            connection.exec_driver_sql("BEGIN")

    return engine
