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


# What each --format choice prints; the commands whose outputs are alike take the same set.
FORMAT_CHOICES = {
    "text": "for people",
    "json": "for CI",
    "markdown": "a pull-request comment or CI job summary",
    "github": "GitHub Actions annotations and job summary",
    "prometheus": "Prometheus text",
    "mermaid": "Mermaid text",
    "dot": "Graphviz DOT text",
    "svg": "SVG through Graphviz",
}
FORMATS = {
    "plain": ("text", "json"),  # what a command did, or its product as SQL or JSON
    "report": ("text", "json", "markdown", "github"),  # a report CI posts: compile, check, validate, fleet status and upgrade
    "status": ("text", "json", "markdown", "github", "prometheus"),  # the report, or metrics
    "diagram": ("mermaid", "dot", "svg"),  # graph: a picture, not a report
}


def formats(kind: str) -> dict[str, Any]:
    """The changes to --format for a set of FORMATS: its choices, the first the default, each said in the help."""
    choices = FORMATS[kind]
    return {"choices": choices, "default": choices[0], "note": ", ".join(f"{c} {FORMAT_CHOICES[c]}" for c in choices)}


# Each option's help is what it means, the same in every command; a command may add a `note` (what
# it means there: which table, which rows), and `shown`, the parenthesis at the end (its default, or
# "required"), is the declaration's unless a command has its own default. --help prints
# "help: note (shown)". An option renamed because its old spelling meant something else elsewhere
# keeps that spelling working (`renamed_from`: hidden from --help, a note on stderr).
OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    # on every parser, before or after the command (a subcommand's leaves the top level's value alone unless given)
    "debug": (("--debug",), {"action": "store_true", "help": "show the traceback of an error, and warnings (exit codes stay the same)"}),
    "topology": (("--topology", "-t"), {"help": "topology file", "shown": TOPOLOGY_DEFAULT[1:-1]}),
    # what a command prints: the choices are one of FORMATS, which the help spells out
    "format": (("--format",), {**formats("plain"), "help": "output", "shown": "default: %(default)s"}),
    "config": (("--config", "-c"), {"default": DEFAULT_CONFIG, "help": "Alembic configuration", "shown": "default: %(default)s"}),
    # one chain everywhere (urls.chosen_url); graph and script read a database only when given one
    "url": (("--url",), {"help": "database URL", "shown": "default: SQLTRANSPORT_URL, else sqlalchemy.url in alembic.ini"}),
    "engine": (
        ("--engine",),
        {"required": True, "choices": tuple(engines.ENGINES), "help": "the database engine", "shown": "required"},
    ),
    # the database's role under tenant placement (docs/tenants.md): Alembic's -x role=tenant, a fleet target's role: tenant
    "tenant": (
        ("--tenant",),
        {
            "dest": "db_role",
            "action": "store_const",
            "const": "tenant",
            "default": "shared",
            "help": "a tenant database (-x role=tenant): its tables are those topology.yaml places in tenant databases",
            "shown": "default: the shared database",
        },
    ),
    "dry_run": (("--dry-run",), {"action": "store_true", "help": "report what would change; change nothing"}),
    "output": (("-o", "--output"), {"help": "write to this file instead of stdout"}),
    # a folder a command writes several files into (-o is a file)
    "out_dir": (("--out-dir", "-d"), {"required": True, "metavar": "FOLDER", "help": "the folder to write into", "shown": "required"}),
    "to_rev": (("--to",), {"dest": "to_rev", "help": "target revision", "shown": "default: head"}),
    "serve": (
        ("--serve",),
        {"metavar": "HOST:PORT", "help": "serve /metrics (Prometheus) and /healthz there until SIGTERM or Ctrl-C, instead of printing"},
    ),
    "min_interval": (
        ("--min-interval",),
        {"metavar": "DURATION", "help": "with --serve: read at most once per DURATION however often it is scraped (default: 5s)"},
    ),
    "from_rev": (
        ("--from",),
        {"dest": "from_rev", "metavar": "REV", "help": "the revision the database is at", "shown": "default: an empty database"},
    ),
    "map": (("--map",), {"action": "append", "default": [], "metavar": "OLD=NEW", "help": "destination of a removed queue (addresses)"}),
    "table": (("--table",), {"required": True, "help": "the table, as an address", "shown": "required"}),
    # consent to delete what a job copied from where it was (each command says what it deletes)
    "delete_source": (("--delete-source",), {"action": "store_true", "help": "delete the source rows once copied"}),
    "layout": (("--layout",), {"choices": LAYOUTS, "help": "table layout", "shown": "default: its engine's"}),
    "error_queue": (
        ("--error-queue",),
        {"default": DEFAULT_ERROR_QUEUE, "help": "the error queue's address", "shown": "default: %(default)s, where the blueprint puts it"},
    ),
    "message_id": (
        ("--message-id",),
        # one flag with several ids, or the flag repeated: both spellings the commands ever took
        {"action": "extend", "nargs": "+", "metavar": "ID", "help": "only these messages, by id", "shown": "repeatable"},
    ),
    # which messages of the error queue an action takes (retry, archive, restore): errorqueue.Selection
    "all": (("--all",), {"action": "store_true", "help": "every message of the error queue"}),
    "failed_queue": (
        ("--failed-queue",),
        {"metavar": "ADDRESS", "help": "the messages that failed in this queue (a bare name where the blueprint puts it)"},
    ),
    "older_than": (
        ("--older-than",),
        {"required": True, "type": older_than, "metavar": "DURATION", "help": "the age of what is deleted: 90m, 12h, 7d"},
    ),
    # A batch is one transaction; what it holds, and so its default size, is each command's (it passes both).
    "batch_size": (("--batch-size",), {"type": int, "help": "rows per transaction", "shown": "default: %(default)s"}),
    # Spark partitions of a job; each command passes its default.
    "partitions": (("--partitions",), {"type": int, "help": "how many Spark partitions", "shown": "default: %(default)s"}),
    # how many connections read a table at once (Spark's JDBC numPartitions); --partitions is a count of partitions
    "read_partitions": (
        ("--read-partitions",),
        {"type": int, "metavar": "N", "help": "parallel JDBC reads", "shown": "default: %(default)s"},
    ),
    # Spark (the pipeline commands that run partitions; fleet upgrade's targets, opt-in)
    "master": (
        ("--master",),
        {"help": "Spark master: local[N], spark://HOST:PORT", "shown": "default: local[*]; under spark-submit: its master"},
    ),
    "conf": (("--conf",), {"action": "append", "default": [], "metavar": "KEY=VALUE", "help": "Spark configuration (repeatable)"}),
    "jars": (("--jars",), {"default": "", "help": "extra JDBC driver jars, comma-separated (Debian's /usr/share/java ones are added)"}),
    "no_spark": (("--no-spark",), {"action": "store_true", "help": "run the partitions in this process, without Spark"}),
    # a check that changes nothing and exits 1 on a finding; each command says what it checks
    "check": (("--check",), {"action": "store_true", "help": "change nothing; exit 1 on a finding"}),
    "journal": (
        ("--journal",),
        {"help": "the fleet's journal, a SQLite file", "shown": "default: <fleet file>.journal.sqlite beside it"},
    ),
    # fleets (fleet upgrade, status, script)
    # --fleet alone: the default file (a one-database command given --fleet works on every target)
    "fleet": (
        ("--fleet",),
        {
            "nargs": "?",
            "const": "",
            "metavar": "FILE",
            "help": "the fleet file",
            "shown": "default: fleet.yaml beside the Alembic configuration",
        },
    ),
    "only": (("--only",), {"action": "append", "metavar": "GLOB", "help": "only the targets whose name matches (repeatable)"}),
    "stage": (("--stage",), {"metavar": "NAME", "help": "only this stage's targets"}),
    "read_timeout": (
        ("--read-timeout",),
        {
            "metavar": "DURATION",
            "help": "how long a database's connection, each read and each lock wait may take before it is reported timed out",
            "shown": "default: a fleet file's read_timeout, else 10s",
        },
    ),
    "exclude": (
        ("--exclude",),
        {"action": "append", "metavar": "GLOB", "help": "leave out the targets whose name matches, as the fleet file's skip: (repeatable)"},
    ),
    "parallel": (("--parallel",), {"metavar": "N", "type": positive, "help": "targets at once", "shown": "default: each stage's parallel"}),
}
SPARK = ("master", "conf", "jars", "no_spark")
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
    """Add the named options of OPTIONS to parser (or an argument group), in order. A change may give a
    `note` after the declared help and its own `shown`, never another help (one option, one meaning)."""
    unknown = set(changes) - set(names)
    if unknown:
        raise KeyError(f"changes to options not added: {', '.join(sorted(unknown))}")
    for name in names:
        flags, kwargs = OPTIONS[name]
        if "help" in changes.get(name, {}):
            raise KeyError(f"--help of {flags[0]} is its declaration's: give a note")
        kwargs = {**kwargs, **changes.get(name, {})}
        if isinstance(kwargs.get("default"), list):
            kwargs["default"] = list(kwargs["default"])  # each parser its own list, never the table's
        note, shown = kwargs.pop("note", None), kwargs.pop("shown", None)
        kwargs["help"] = kwargs["help"] + (f": {note}" if note else "") + (f" ({shown})" if shown else "")
        renamed_from = kwargs.pop("renamed_from", ())
        flags = kwargs.pop("flags", flags)
        if renamed_from:
            add_renamed(parser, *flags, renamed_from=renamed_from, **kwargs)
        else:
            parser.add_argument(*flags, **kwargs)


def add_selection(parser: argparse.ArgumentParser, *names: str, **changes: dict[str, Any]) -> None:
    """Which messages an error-queue command takes (errorqueue.Selection): exactly one of the named
    options among --all, --failed-queue and --message-id, after --url and --error-queue."""
    add_options(parser, "url", "error_queue")
    add_options(parser.add_mutually_exclusive_group(required=True), *names, **changes)


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


def add_renamed(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *flags: str, renamed_from: tuple[str, ...], **kwargs: Any
) -> argparse.Action:
    """Add option `flags` that the old spellings `renamed_from` still reach: they stay in the parser's
    table (so they parse) but leave the action's own option strings (so nothing shows them)."""
    action = parser.add_argument(*flags, *renamed_from, action=Renamed, renamed_from=renamed_from, **kwargs)
    action.option_strings = list(flags)
    return action


class _Names(dict):
    """A subcommand table that also holds the old names of renamed subcommands (Subcommands.rename):
    `in` finds them, so they parse, but listing it (--help, usage, an invalid choice) names none."""

    def __init__(self) -> None:
        super().__init__()
        self.renamed: dict[str, str] = {}

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self.renamed


class Subcommands(argparse._SubParsersAction):
    """A group's subcommands (add_subparsers(action=Subcommands)), of which a renamed one keeps its
    old name working: hidden from --help, a note on stderr, as a renamed option (Renamed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name_parser_map = self.choices = _Names()

    def rename(self, old: str, new: str) -> None:
        self.choices.renamed[old] = new

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        new = self.choices.renamed.get(values[0])
        if new is not None:
            sys.stderr.write(f"warning: {parser.prog} {values[0]} is deprecated; use {parser.prog} {new}\n")
            values = [new, *values[1:]]
        super().__call__(parser, namespace, values, option_string)


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
