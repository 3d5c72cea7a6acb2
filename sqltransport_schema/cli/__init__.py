"""The command line, on top of everything else: it parses, calls one function, prints.

options.py   the shared options, declared once in a table; the Alembic configuration and topology path
output.py    the exit codes and the one way to print a result or an error
topology.py  validate, compile, json-schema (topology.yaml alone)
database.py  check, adopt (a live database)
review.py    statements, grants, script (what a DBA reviews)
pipeline.py  pipeline move, plan, run, archive, replay, backfill (Spark)
"""

from __future__ import annotations

import argparse
import sys

from . import database, pipeline, review, topology
from .output import DESCRIPTION, EXIT_ERROR

# The order --help lists the commands in.
COMMANDS = ("compile", "validate", "check", "adopt", "statements", "grants", "script", "pipeline", "json-schema")
PARSERS = {**topology.PARSERS, **database.PARSERS, **review.PARSERS, **pipeline.PARSERS}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sqltransport-schema", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        PARSERS[name](sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_ERROR
