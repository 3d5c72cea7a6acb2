"""Which database a command means: the URL fallback chain, written once.

`alembic -x url=...` and the CLI's `--url` are the explicit choice; the chain is shared so that
migrations/env.py, check, adopt and the pipeline always land on the same database.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config

DEFAULT_URL = "sqlite:///sqltransport.db"
URL_VARIABLE = "SQLTRANSPORT_URL"


def database_url(explicit: str | None, config: Config) -> str:
    """explicit (`--url`, `-x url=`), else SQLTRANSPORT_URL, else sqlalchemy.url in alembic.ini, else a SQLite file."""
    return explicit or os.environ.get(URL_VARIABLE) or config.get_main_option("sqlalchemy.url") or DEFAULT_URL
