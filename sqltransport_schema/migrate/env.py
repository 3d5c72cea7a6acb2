"""What migrations/env.py runs: pick the URL, configure Alembic, run online or offline."""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context as alembic_context
from sqlalchemy import create_engine, event, pool
from sqlalchemy.engine import make_url

from .operations import DISCARD_OPTION

DEFAULT_URL = "sqlite:///sqltransport.db"
TRUE = ("1", "true", "yes", "on")


def database_url(config) -> str:
    """-x url=... wins, then SQLTRANSPORT_URL, then sqlalchemy.url in alembic.ini."""
    x_args = alembic_context.get_x_argument(as_dictionary=True)
    url = x_args.get("url") or os.environ.get("SQLTRANSPORT_URL") or config.get_main_option("sqlalchemy.url") or DEFAULT_URL
    return normalise_url(url)


def normalise_url(url: str) -> str:
    """A bare postgresql:// URL means psycopg 3, the driver this package installs."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, **kwargs):
    """An engine whose DDL runs inside a transaction on every backend, SQLite included."""
    engine = create_engine(url, poolclass=pool.NullPool, **kwargs)
    if engine.dialect.name == "sqlite":
        # sqlite3 would commit before each DDL statement; take transaction control ourselves.
        @event.listens_for(engine, "connect")
        def _no_implicit_transactions(dbapi_connection, _record):
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(connection):
            connection.exec_driver_sql("BEGIN")

    return engine


def run(context=alembic_context) -> None:
    config = context.config
    if config.config_file_name and config.attributes.get("configure_logging", True):
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    url = database_url(config)
    x_args = context.get_x_argument(as_dictionary=True)
    options = {DISCARD_OPTION: x_args.get("discard_messages", "").lower() in TRUE}
    if context.is_offline_mode():
        context.configure(url=url, literal_binds=True, transactional_ddl=True, **options)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, transactional_ddl=True, **options)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()
