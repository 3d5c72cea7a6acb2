"""`init`: a new project of one's own (alembic.ini, migrations/, topology.yaml, .gitignore) from the templates
shipped in the package, so it works with the installed package alone. The repository's own
alembic.ini and migrations/ are these same files (tests/test_init.py holds them equal)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from . import errors

# The template files, relative to the templates folder and to the new project alike.
FILES = ("alembic.ini", "topology.yaml", "migrations/env.py", "migrations/script.py.mako")
# Written too unless the folder has one already (a git repository's own is kept): it keeps the
# SQLite database and Python's caches out of `git add .`. Shipped without its dot (package data).
GITIGNORE = ".gitignore"


class ProjectExists(errors.UsageError, FileExistsError):
    """The folder already holds a file init would write; nothing is overwritten."""


def template(name: str) -> str:
    """The text of one shipped template file."""
    return resources.files("sqltransport_schema").joinpath("templates", name.lstrip(".")).read_text(encoding="utf-8")


def create(folder: Path) -> list[Path]:
    """Write a new project into folder (created if missing); refuses before writing anything if
    any of its files exists already."""
    existing = [folder / name for name in FILES if (folder / name).exists()]
    if existing:
        raise ProjectExists(f"{existing[0]} exists already; run init in an empty folder (nothing was written)")
    written = []
    for name in FILES + (() if (folder / GITIGNORE).exists() else (GITIGNORE,)):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template(name), encoding="utf-8")
        written.append(path)
    (folder / "migrations" / "versions").mkdir(exist_ok=True)
    return written
