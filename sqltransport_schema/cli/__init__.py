"""The command line, on top of everything else: it parses, calls one function, prints.

options.py   the shared options, declared once in a table; the Alembic configuration and topology path
output.py    the exit codes and the one way to print a result or an error
project.py   init (a new project)
topology.py  validate, compile, json-schema (topology.yaml alone)
database.py  check, adopt (a live database)
operations.py status, retry (operating a live bus)
review.py    statements, grants, script (what a DBA reviews)
pipeline.py  pipeline move, plan, run, archive, replay, backfill (Spark)
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import NoReturn

from . import database, operations, pipeline, project, review, topology
from .output import DESCRIPTION, EXIT_ERROR, describe, emit_error

# The order --help lists the commands in.
COMMANDS = ("init", "compile", "validate", "check", "adopt", "status", "retry", "statements", "grants", "script", "pipeline", "json-schema")
PARSERS = {**project.PARSERS, **topology.PARSERS, **database.PARSERS, **operations.PARSERS, **review.PARSERS, **pipeline.PARSERS}


class Parser(argparse.ArgumentParser):
    """A usage mistake is one `error:` line too (argparse's own prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sqltransport-schema", description=DESCRIPTION)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error, and warnings")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        PARSERS[name](sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Every failure, of the user's or ours, ends as one `error:` line (or a JSON
    error object under --format json) and exit 2, so that 1 always means the command's finding."""
    args = build_parser().parse_args(argv)
    if args.debug:
        return args.func(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. SQLAlchemy's about a DSN-less pyodbc URL: noise around the one line
        try:
            return args.func(args)
        except Exception as error:  # noqa: BLE001 - the one place errors become a line
            return emit_error(args, describe(error))
