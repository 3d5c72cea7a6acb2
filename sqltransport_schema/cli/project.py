"""`init`: start a project of one's own (the work is in project.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .options import add_command, add_options
from .output import EXIT_OK, emit_status


def cmd_init(args: argparse.Namespace) -> int:
    """start a new project: alembic.ini, migrations/ and a commented topology.yaml

    Write a new project into FOLDER: alembic.ini (SQLite next to it by default), migrations/ with
    the environment that runs the transport's DDL, and a commented topology.yaml to edit. Nothing is
    overwritten: a file that exists already is an error.
    """
    from .. import project

    folder = Path(args.folder)
    written = project.create(folder)
    lines = [f"wrote {path}" for path in written] + [
        "Next, in that folder: edit topology.yaml, then",
        '  sqltransport-schema compile -m "initial topology"',
        "  alembic upgrade head",
    ]
    emit_status(args, {"status": "created", "folder": str(folder), "files": [str(p) for p in written]}, lines)
    return EXIT_OK


def add_init(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "init", cmd_init, "sqltransport-schema init shop")
    p.add_argument("folder", nargs="?", default=".", help="where (default: %(default)s, the current folder; created if missing)")
    add_options(p, "format")


PARSERS = {"init": add_init}
