"""Which database a command means: the URL fallback chain, written once, and how a URL is shown.

`alembic -x url=...` and the CLI's `--url` are the explicit choice; the chain is shared so that
migrations/env.py, check, adopt and the pipeline always land on the same database.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config

DEFAULT_URL = "sqlite:///sqltransport.db"
URL_VARIABLE = "SQLTRANSPORT_URL"
CONFIG_OPTION = "sqlalchemy.url"

# Where chosen_url found the URL.
EXPLICIT, ENVIRONMENT, CONFIGURED, DEFAULT = "explicit", "environment", "configured", "default"


def chosen_url(explicit: str | None, config: Config | None) -> tuple[str, str]:
    """(URL, where it came from: EXPLICIT, ENVIRONMENT, CONFIGURED or DEFAULT): explicit (`--url`,
    `-x url=`), else SQLTRANSPORT_URL, else sqlalchemy.url in alembic.ini (config None: there is
    none), else a SQLite file."""
    if explicit:
        return explicit, EXPLICIT
    if os.environ.get(URL_VARIABLE):
        return os.environ[URL_VARIABLE], ENVIRONMENT
    configured = config.get_main_option(CONFIG_OPTION) if config is not None else None
    if configured:
        return configured, CONFIGURED
    return DEFAULT_URL, DEFAULT


def database_url(explicit: str | None, config: Config | None) -> str:
    """explicit (`--url`, `-x url=`), else SQLTRANSPORT_URL, else sqlalchemy.url in alembic.ini, else a SQLite file."""
    return chosen_url(explicit, config)[0]


def display_url(url: str) -> str:
    """A URL as people see it in output and in commands printed to paste: the password masked (***).
    Give it the URL as the user gave it (db.given_url of an engine), not the engine's own, which
    names the driver a bare scheme means (`postgresql+psycopg://` for `postgresql://`)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:  # not a URL SQLAlchemy reads: still never show what looks like a password
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def upgrade_command(url: str | None = None) -> str:
    """The `alembic upgrade head` an error or a warning suggests, for the database at url as the user gave
    it (db.given_url of an engine; its password masked, to fill in again): `alembic -x url=URL upgrade head`,
    so that the advice reaches the database the user named (a --url, a URL in their code), not the one
    alembic.ini names. Without a URL, the bare command."""
    import shlex

    return f"alembic -x url={shlex.quote(display_url(url))} upgrade head" if url else "alembic upgrade head"
