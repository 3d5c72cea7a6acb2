"""The command line, on top of everything else: it parses, calls one function, prints.

options.py   the shared options, declared once in a table; the Alembic configuration and topology path
output.py    the exit codes and the one way to print a result or an error
project.py   init (a new project)
topology.py  validate, compile, json-schema (topology.yaml alone)
database.py  check, adopt (a live database)
live_bus.py  status, retry, outbox cleanup (operating a live bus)
errorqueue.py archive, restore, purge (the error queue's archive)
pictures.py  graph (the topology or a live database as a diagram)
review.py    statements, grants, script (what a DBA reviews)
pipeline.py  pipeline move, plan, run, archive, replay, backfill (Spark)
fleet.py     fleet upgrade, status, script, json-schema (many databases)
console.py   console (the operator console in the browser; the console extra)
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Iterator
from typing import Any, NoReturn

from . import console, database, errorqueue, fleet, live_bus, pictures, pipeline, project, review, topology
from .options import add_options
from .output import DESCRIPTION, EXIT_ERROR, describe, emit_error, emit_invalid

# The order --help lists the commands in.
COMMANDS = (
    "init",
    "compile",
    "validate",
    "check",
    "adopt",
    "status",
    "retry",
    "archive",
    "restore",
    "purge",
    "outbox",
    "console",
    "graph",
    "statements",
    "grants",
    "script",
    "pipeline",
    "fleet",
    "json-schema",
)
PARSERS = {
    **project.PARSERS,
    **topology.PARSERS,
    **database.PARSERS,
    **live_bus.PARSERS,
    **errorqueue.PARSERS,
    **console.PARSERS,
    **pictures.PARSERS,
    **review.PARSERS,
    **pipeline.PARSERS,
    **fleet.PARSERS,
}


class Parser(argparse.ArgumentParser):
    """A usage mistake is one `error:` line too (argparse's own prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_ERROR)


class Version(argparse.Action):
    """--version: the version is read from the installed package's metadata when --version is
    given, not each time the parser is built (importing importlib.metadata and reading the metadata
    would cost every command a few tens of milliseconds)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        from ..util import package_version

        sys.stdout.write(f"{parser.prog} {package_version()}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser. Building it imports only the command modules and the light
    modules their options need (tests/test_cli.py holds it to that): each command imports its
    implementation when it runs."""
    parser = Parser(prog="sqltransport-schema", description=DESCRIPTION)
    add_options(parser, "debug")
    parser.add_argument("--version", action=Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        PARSERS[name](sub)
    for _, command in commands(parser):  # --debug after the command too; unset there, the top level's value stands
        add_options(command, "debug", debug={"default": argparse.SUPPRESS})
    return parser


def commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(prog, parser) of every subcommand under parser, pipeline's own included, in --help's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                yield command.prog, command
                yield from commands(command)


def main(argv: list[str] | None = None) -> int:
    """Run one command. Every failure, of the user's or ours, ends as one `error:` line (or a JSON
    error object under --format json) and exit 2, so that 1 always means the command's finding;
    --debug adds the traceback (and shows warnings), the exit code stays."""
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        if not args.debug:
            warnings.simplefilter("ignore")  # e.g. SQLAlchemy's about a DSN-less pyodbc URL: noise around the one line
        try:
            return args.func(args)
        except Exception as error:  # noqa: BLE001 - the one place errors become a line
            if args.debug:
                import traceback

                traceback.print_exc()
            from ..topology import TopologyError

            if isinstance(error, TopologyError):  # a topology read by any command: its file:line:column
                return emit_invalid(args, error)
            return emit_error(args, describe(error))
