"""The options several commands share, each declared once in a table (as Alembic's config.py
declares its own), and what turns them into values: the Alembic configuration, the topology file.

A command adds the ones it takes by name, in the order its --help lists them; `changes` adjusts
one use (its flags, or any argparse keyword such as `required` or `help`). An option string means
one thing in every command (tests/test_cli.py holds them to it); a renamed one keeps its old
spelling working through `renamed_from`, hidden from --help, with a note on stderr.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import engines, errors
from ..defaults import DEFAULT_ERROR_QUEUE

if TYPE_CHECKING:
    from collections.abc import Callable

    from alembic.config import Config

TOPOLOGY_DEFAULT = "(default: sqltransport.topology in alembic.ini, else ./topology.yaml)"
LAYOUTS = ("mssql", "postgresql")
DEFAULT_CONFIG = "alembic.ini"


def older_than(text: str) -> Any:
    """An age: a duration as the lock options write one, or days (90m, 12h, 7d), as a timedelta."""
    from datetime import timedelta

    from ..util import duration_ms

    milliseconds = duration_ms(text)
    if milliseconds is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age: give a number and its unit, e.g. 90m, 12h or 7d")
    return timedelta(milliseconds=milliseconds)


def positive(text: str) -> int:
    """A whole number of at least 1 (--parallel)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return value


OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    # on every parser, before or after the command (a subcommand's leaves the top level's value alone unless given)
    "debug": (("--debug",), {"action": "store_true", "help": "show the traceback of an error, and warnings (exit codes stay the same)"}),
    "topology": (("--topology", "-t"), {"help": f"topology file {TOPOLOGY_DEFAULT}"}),
    "format": (
        ("--format",),
        {"choices": ("text", "json"), "default": "text", "help": "for people or CI (default: %(default)s)"},
    ),
    "config": (("--config", "-c"), {"default": DEFAULT_CONFIG, "help": "Alembic configuration (default: %(default)s)"}),
    "url": (("--url",), {"help": "database URL (default: SQLTRANSPORT_URL, else sqlalchemy.url in alembic.ini)"}),
    "engine": (
        ("--engine",),
        {"required": True, "choices": tuple(engines.ENGINES), "help": "the engine whose SQL to print"},
    ),
    # the database's role under tenant placement (docs/tenants.md); Alembic's spelling is -x role=tenant
    "tenant": (
        ("--tenant",),
        {
            "dest": "db_role",
            "action": "store_const",
            "const": "tenant",
            "default": "shared",
            "help": "a tenant database: its tables are those topology.yaml places in tenant databases (default: the shared database)",
        },
    ),
    "dry_run": (("--dry-run",), {"action": "store_true", "help": "report what would change; change nothing"}),
    "output": (("-o", "--output"), {"help": "write to this file instead of stdout"}),
    "to_rev": (("--to",), {"dest": "to_rev", "help": "target revision (default: head)"}),
    "serve": (
        ("--serve",),
        {"metavar": "HOST:PORT", "help": "serve /metrics (Prometheus) and /healthz there until SIGTERM or Ctrl-C, instead of printing"},
    ),
    "min_interval": (
        ("--min-interval",),
        {"metavar": "DURATION", "help": "with --serve: read at most once per DURATION however often it is scraped (default: 5s)"},
    ),
    "from_rev": (("--from",), {"dest": "from_rev", "help": "revision the database is at (default: an empty database)"}),
    "map": (("--map",), {"action": "append", "default": [], "metavar": "OLD=NEW", "help": "destination of a removed queue (addresses)"}),
    "table": (("--table",), {"required": True, "help": "queue table as an address: audit, error@[dbo]"}),
    # consent to delete what a job copied from where it was (each command says what it deletes)
    "delete_source": (("--delete-source",), {"action": "store_true", "help": "delete the source rows once copied"}),
    "layout": (("--layout",), {"choices": LAYOUTS, "help": "table layout (default: its engine's)"}),
    "error_queue": (
        ("--error-queue",),
        {"default": DEFAULT_ERROR_QUEUE, "help": "the error queue's address (default: %(default)s, where the blueprint puts it)"},
    ),
    "message_id": (
        ("--message-id",),
        # one flag with several ids, or the flag repeated: both spellings the commands ever took
        {"action": "extend", "nargs": "+", "metavar": "ID", "help": "only these messages (NServiceBus.MessageId; repeatable)"},
    ),
    # A batch is one transaction; what it holds, and so its default size, is each command's (it passes both).
    # which messages of the error queue an action takes (retry, archive, restore): errorqueue.Selection
    "all": (("--all",), {"action": "store_true", "help": "every message of the error queue"}),
    "failed_queue": (("--failed-queue",), {"metavar": "ADDRESS", "help": "the messages that failed in this queue"}),
    "older_than": (("--older-than",), {"required": True, "type": older_than, "metavar": "DURATION", "help": "age: 90m, 12h, 7d"}),
    "batch_size": (("--batch-size",), {"type": int, "help": "rows per transaction (default: %(default)s)"}),
    # Spark partitions of a job; each command passes its default.
    "partitions": (("--partitions",), {"type": int, "help": "Spark partitions (default: %(default)s)"}),
    # Spark (the pipeline commands that run partitions)
    "master": (("--master",), {"help": "Spark master (default: local[*]; under spark-submit: its master)"}),
    "conf": (("--conf",), {"action": "append", "default": [], "metavar": "KEY=VALUE", "help": "Spark configuration (repeatable)"}),
    "jars": (("--jars",), {"default": "", "help": "extra JDBC driver jars, comma-separated (Debian's /usr/share/java ones are added)"}),
    "no_spark": (("--no-spark",), {"action": "store_true", "help": "run the partitions in this process, without Spark"}),
    # a check that changes nothing and exits 1 on a finding; each command says what it checks
    "check": (("--check",), {"action": "store_true"}),
    "journal": (("--journal",), {"help": "the fleet's journal, a SQLite file (default: <fleet file>.journal.sqlite beside it)"}),
    # fleets (fleet upgrade, status, script)
    # --fleet alone: the default file (a one-database command given --fleet works on every target)
    "fleet": (
        ("--fleet",),
        {"nargs": "?", "const": "", "metavar": "FILE", "help": "the fleet file (default: fleet.yaml beside the Alembic configuration)"},
    ),
    "only": (("--only",), {"action": "append", "metavar": "GLOB", "help": "only the targets whose name matches (repeatable)"}),
    "stage": (("--stage",), {"metavar": "NAME", "help": "only this stage's targets"}),
    "read_timeout": (
        ("--read-timeout",),
        {
            "metavar": "DURATION",
            "help": "how long a database's connection, each read and each lock wait may take before it is reported timed "
            "out (default: a fleet file's read_timeout, else 10s)",
        },
    ),
    "exclude": (
        ("--exclude",),
        {"action": "append", "metavar": "GLOB", "help": "leave out the targets whose name matches, as the fleet file's skip: (repeatable)"},
    ),
    "parallel": (("--parallel",), {"metavar": "N", "type": positive, "help": "targets at once (default: each stage's parallel)"}),
}
SPARK = ("master", "conf", "jars", "no_spark")
# --format of the commands whose report is also a pull-request comment (compile, check); github:
# each problem as a GitHub Actions annotation, the report in the job summary (cli/github.py)
MARKDOWN_FORMAT = {
    "choices": ("text", "json", "markdown", "github"),
    "help": "output for people, CI, a pull-request comment, or GitHub Actions annotations and job summary (default: %(default)s)",
}
# --format of validate: github puts each problem on its line in the pull request
GITHUB_FORMAT = {
    "choices": ("text", "json", "github"),
    "help": "output for people, CI, or GitHub Actions annotations and job summary (default: %(default)s)",
}
HELP_WIDTH = 100  # a description's lines in --help


def add_command(
    sub: argparse._SubParsersAction, name: str, command: Callable[..., Any], example: str, *, group: bool = False
) -> argparse.ArgumentParser:
    """A subcommand that runs `command`, whose docstring is its help: the first line the summary in its
    parent's list, the rest (one paragraph) the description in its own --help, so what a command says it
    does is written once, beside what it does. `example` is one command line (tests/test_cli.py parses
    it). With group=True, `command` adds the group's own subcommands and only lends its docstring."""
    summary, _, description = inspect.getdoc(command).partition("\n")
    parser = sub.add_parser(
        name,
        help=summary,
        description=textwrap.fill(" ".join(description.split()), HELP_WIDTH),
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if not group:
        parser.set_defaults(func=command)
    return parser


def add_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *names: str, **changes: dict[str, Any]) -> None:
    """Add the named options of OPTIONS to parser (or an argument group), in order."""
    unknown = set(changes) - set(names)
    if unknown:
        raise KeyError(f"changes to options not added: {', '.join(sorted(unknown))}")
    for name in names:
        flags, kwargs = OPTIONS[name]
        kwargs = {**kwargs, **changes.get(name, {})}
        if isinstance(kwargs.get("default"), list):
            kwargs["default"] = list(kwargs["default"])  # each parser its own list, never the table's
        parser.add_argument(*kwargs.pop("flags", flags), **kwargs)


class Renamed(argparse._StoreAction):
    """An option whose old spellings still parse, each after a deprecation note on stderr; --help,
    usage and errors name the new spelling only (add_renamed)."""

    def __init__(self, option_strings: list[str], dest: str, renamed_from: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.renamed_from = renamed_from

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        if option_string in self.renamed_from:
            command = parser.prog.partition(" ")[2] or parser.prog
            sys.stderr.write(f"warning: {option_string} is deprecated for {command}; use {self.option_strings[0]}\n")
        super().__call__(parser, namespace, values, option_string)


def add_renamed(parser: argparse.ArgumentParser, flag: str, renamed_from: tuple[str, ...], **kwargs: Any) -> argparse.Action:
    """Add option `flag` that the old spellings `renamed_from` still reach: they stay in the parser's
    table (so they parse) but leave the action's own option strings (so nothing shows them)."""
    action = parser.add_argument(flag, *renamed_from, action=Renamed, renamed_from=renamed_from, **kwargs)
    action.option_strings = [flag]
    return action


def add_spark_options(parser: argparse.ArgumentParser) -> None:
    add_options(parser.add_argument_group("Spark"), *SPARK)


def read_timeout(args: argparse.Namespace, file_value: float | None = None) -> float:
    """--read-timeout in seconds, else the fleet file's read_timeout (file_value), else DEFAULT_READ_TIMEOUT."""
    from ..defaults import DEFAULT_READ_TIMEOUT
    from ..util import parse_duration

    given = getattr(args, "read_timeout", None)
    return parse_duration(given, "--read-timeout", zero=False) if given else (file_value or DEFAULT_READ_TIMEOUT)


def load_config(path: str) -> Config:
    """The Alembic configuration at path, quiet: commands report what they wrote themselves."""

    from alembic.config import Config

    if not Path(path).is_file():
        raise errors.NotFound(f"{path}: no such Alembic configuration; run from the project folder or pass -c")
    # quiet: compile reports what it wrote itself (and keeps --format json clean)
    return Config(path, cmd_opts=argparse.Namespace(quiet=True, x=None))


def topology_path(args: argparse.Namespace, config: Config | None = None) -> Path:
    """--topology, else sqltransport.topology in the Alembic configuration, else ./topology.yaml."""
    if args.topology:
        return Path(args.topology)
    if config is not None:
        configured = config.get_main_option("sqltransport.topology")
        if configured:
            return Path(config.config_file_name).parent / configured
    return Path("topology.yaml")
