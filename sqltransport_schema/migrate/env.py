"""What migrations/env.py runs: pick the URL, configure Alembic, run online or offline."""

from __future__ import annotations

from logging.config import fileConfig
from typing import TYPE_CHECKING

from alembic import context as alembic_context
from sqlalchemy import MetaData, pool

from .. import engines
from ..db import make_engine, normalise_url
from ..revisions import head_blueprint
from ..urls import database_url
from .autogen import TARGET_OPTION, model_tables_only
from .operations import DISCARD_OPTION, OFFLINE_HOOK_OPTION, PROTECTED_OPTION
from .write import REVISION_OPTION

if TYPE_CHECKING:
    from alembic.runtime.environment import EnvironmentContext

TRUE = ("1", "true", "yes", "on")


def run(context: EnvironmentContext = alembic_context, target_metadata: MetaData | None = None) -> None:
    """target_metadata: the project's own SQLAlchemy models, if Alembic also manages those;
    transport tables are compared with the topology by migrate.autogen either way."""
    config = context.config
    revision = config.attributes.get(REVISION_OPTION)
    if revision is not None:
        # `compile` writing a revision (migrate.write): its operations come from topology.yaml;
        # no database is read, so any dialect does, and logging stays as the caller set it.
        context.configure(dialect_name="sqlite", **revision(context.script))
        context.run_migrations()
        return
    if config.config_file_name and config.attributes.get("configure_logging", True):
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    x_args = context.get_x_argument(as_dictionary=True)
    url = normalise_url(database_url(x_args.get("url"), config))
    options = {
        DISCARD_OPTION: x_args.get("discard_messages", "").lower() in TRUE,
        PROTECTED_OPTION: frozenset(name.strip() for name in x_args.get("drop_protected", "").split(",") if name.strip()),
    }
    if context.is_offline_mode():
        options[OFFLINE_HOOK_OPTION] = config.attributes.get(OFFLINE_HOOK_OPTION)
        context.configure(url=url, literal_binds=True, transactional_ddl=True, **options)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(url, poolclass=pool.NullPool)
    compare = {
        "target_metadata": target_metadata if target_metadata is not None else MetaData(),
        "include_name": model_tables_only(target_metadata),
        TARGET_OPTION: lambda: head_blueprint(context.script)[1],
    }
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "sqlite":  # a database the migrations create starts in WAL (docs/runtime.md)
                engines.get("sqlite").new_database_in_wal(connection.connection.dbapi_connection)
            context.configure(connection=connection, transactional_ddl=True, **compare, **options)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()
