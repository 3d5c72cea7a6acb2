"""The command line itself: --debug wherever it is written keeps the exit codes, --version."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from sqltransport_schema import __version__
from sqltransport_schema.cli import build_parser, commands
from sqltransport_schema.cli.options import FORMATS, OPTIONS, Renamed

from .support.commands import CLOSED_PORT, run
from .support.projects import REPO


@pytest.mark.parametrize(
    "args",
    [
        ("--debug", "status", "--url", CLOSED_PORT),
        ("status", "--debug", "--url", CLOSED_PORT),
        ("status", "--url", CLOSED_PORT, "--debug"),
        ("--debug", "retry", "--all", "--url", CLOSED_PORT),
        ("retry", "--all", "--url", CLOSED_PORT, "--debug"),
        ("pipeline", "plan", "--debug", "-c", "nowhere.ini"),
    ],
)
def test_debug_before_or_after_the_command_keeps_exit_2(tmp_path, args):
    result = run(tmp_path, *args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith(("error: cannot reach the database", "error: nowhere.ini: no such"))


def test_without_debug_an_error_is_one_line(tmp_path):
    result = run(tmp_path, "status", "--url", CLOSED_PORT)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_version_comes_from_the_package_metadata(tmp_path):
    from importlib.metadata import version

    result = run(tmp_path, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"sqltransport-schema {version('sqltransport-schema')}\n"
    assert __version__ == version("sqltransport-schema")


# ------------------------------------------------------------------------------------ start-up cost
HEAVY = ("sqlalchemy", "alembic", "yaml", "mako")  # a third of a second to import, together
IMPLEMENTATIONS = ("runtime", "console", "pipeline", "fleet", "migrate", "topology", "db")  # the package's modules that import them


def test_building_the_parser_imports_no_implementation():
    """Every run builds the whole parser, and --help and --version do nothing else: it imports the
    command modules and the light modules their options need, never SQLAlchemy, Alembic, YAML or
    Mako, nor an implementation; each command imports its own when it runs. A default that --help
    shows is in defaults.py, where its module imports it from."""
    code = (
        "import json, sys, sqltransport_schema.cli as c; c.build_parser(); "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} "
        f"or m.split('.')[0] == 'sqltransport_schema' and m.split('.')[1:2] and m.split('.')[1] in {IMPLEMENTATIONS!r})))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


# ------------------------------------------------------------------------------------------ --help
def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    skip = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
    return [action for action in parser._actions if not isinstance(action, skip)]


def _shown_default(action: argparse.Action) -> str | None:
    """The default --help must state: None for a flag, an option without one, or an empty one."""
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, "", []):
        return None
    return str(action.default)


def _examples(parser: argparse.ArgumentParser) -> list[str]:
    return [line.strip() for line in (parser.epilog or "").splitlines() if line.strip().startswith("sqltransport-schema ")]


def help_problems(parser: argparse.ArgumentParser) -> list[str]:
    """What --help lacks: a command's description or example, an option's help or its default."""
    problems = []
    for prog, command in [(parser.prog, parser), *commands(parser)]:
        if command is not parser:
            if not (command.description or "").strip():
                problems.append(f"{prog}: no description")
            if len(_examples(command)) != 1:
                problems.append(f"{prog}: {len(_examples(command))} examples in its epilog, not one")
        formatter = command._get_formatter()
        for action in _options(command):
            name = "/".join(action.option_strings) or action.dest
            if not action.help or action.help is argparse.SUPPRESS:
                problems.append(f"{prog} {name}: no help")
                continue
            default = _shown_default(action)
            if default is not None and default not in formatter._expand_help(action):
                problems.append(f"{prog} {name}: help does not state its default {default!r}")
    return problems


def test_help_problems_finds_what_is_missing():
    """The walk itself can fail: a command without description, example or option help is reported."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = sub.add_parser("bare")
    bare.add_argument("--size", type=int, default=7)
    bare.add_argument("--told", default="x", help="(default: x)")
    assert [problem for problem in help_problems(parser) if " bare" in problem] == [
        "sqltransport-schema bare: no description",
        "sqltransport-schema bare: 0 examples in its epilog, not one",
        "sqltransport-schema bare --size: no help",
    ]


def test_every_command_has_a_description_an_example_and_every_option_help_with_its_default():
    assert help_problems(build_parser()) == []


def test_every_example_parses_as_its_own_command():
    parser = build_parser()
    examples = [(prog, example) for prog, command in commands(parser) for example in _examples(command)]
    assert len(examples) >= len(list(commands(parser)))
    for prog, example in examples:
        words = shlex.split(example)
        assert " ".join(words[: len(prog.split())]) == prog, example
        args = parser.parse_args(words[1:])  # a mistake exits 2 (Parser.error)
        assert callable(getattr(args, "func", None)), example


CHEAP = ("init", "validate", "compile", "json-schema", "statements", "grants", "script")


def test_the_cheap_examples_run_in_a_new_project(tmp_path):
    """The examples of the commands that need no database run as written in a folder `init` made
    (in --help's order: init first, then compile, so script has a revision to print)."""
    parser = build_parser()
    ran = []
    for prog, command in commands(parser):
        name = prog.split()[1]
        if name not in CHEAP or len(prog.split()) != 2:
            continue
        for example in _examples(command):
            result = run(tmp_path / "shop" if name != "init" else tmp_path, *shlex.split(example)[1:])
            assert result.returncode == 0, f"{example}\n{result.stderr}"
            ran.append(name)
    assert sorted(ran) == sorted(CHEAP)


def test_a_failure_is_described_by_its_class_not_its_module():
    """The project's errors (errors.SqltransportError) and Alembic's CommandError print their first
    line; a class of the package that is not on the root is unexpected, whatever its module."""
    from alembic.util import CommandError

    from sqltransport_schema import errors
    from sqltransport_schema.cli.output import describe

    assert describe(errors.Refused("refusing to drop queue Sales\nthe details")) == "refusing to drop queue Sales"
    assert describe(errors.Unsupported("grants are not supported on sqlite")) == "grants are not supported on sqlite"
    assert describe(CommandError("Can't locate revision identified by 'abc'")) == "Can't locate revision identified by 'abc'"
    assert describe(FileNotFoundError("topology.yaml: no such file")) == "topology.yaml: no such file"
    stray = type("Stray", (Exception,), {"__module__": "sqltransport_schema.check"})
    assert describe(stray("boom")) == "Stray: boom (unexpected; run with --debug for the traceback)"


# ------------------------------------------------------------------------------- one meaning per flag
# Options renamed because their spelling meant another thing elsewhere: the old one still parses,
# with a note on stderr, and nothing shows it (--from and --to are revisions in script and plan/run;
# -o a file, --partitions a count of Spark partitions, --role a database's role under tenant
# placement, --archive the error queue's archive table).
DEPRECATED = {
    "sqltransport-schema pipeline move": {"--from": "--from-url", "--to": "--to-url"},
    "sqltransport-schema grants": {"--role": "--login"},
    "sqltransport-schema pipeline export": {"-o": "--out-dir", "--output": "--out-dir", "--partitions": "--read-partitions"},
    "sqltransport-schema pipeline replay": {"--archive": "--in-dir"},
    "sqltransport-schema fleet script": {"-o": "--out-dir", "--output": "--out-dir"},
}
# Commands renamed: `pipeline archive` wrote Parquet, while `archive` moves the error queue's messages
# to its archive table.
DEPRECATED_COMMANDS = {"sqltransport-schema pipeline": {"archive": "export"}}
# A batch is one transaction and a partition Spark's in every command that takes them; how many
# suits what each command moves, so each says its own default (and what its batch holds). --format
# is what a command writes: its choices are each command's (prometheus for status, svg for graph),
# and so is the first of them, its default (text, or graph's mermaid).
DEFAULT_PER_COMMAND = {"--batch-size", "--partitions", "--format"}


def _meaning(flag: str, action: argparse.Action) -> tuple:
    """What an option string stands for: where its value goes, how it is read, what it is unset."""
    default = None if flag in DEFAULT_PER_COMMAND or action.default is argparse.SUPPRESS else action.default
    kind = type(action).__mro__[1] if isinstance(action, Renamed) else type(action)  # a renamed option stores as any other
    return (action.dest, kind, action.nargs, action.type, repr(default))


def meanings(parser: argparse.ArgumentParser) -> dict[str, dict[tuple, list[str]]]:
    """{option string: {meaning: the commands that give it that meaning}} over every command (the
    top level's --debug is the one each command leaves unset)."""
    found: dict[str, dict[tuple, list[str]]] = {}
    for prog, command in commands(parser):
        for action in _options(command):
            for flag in action.option_strings:
                found.setdefault(flag, {}).setdefault(_meaning(flag, action), []).append(prog)
    return found


def test_an_option_string_means_one_thing_in_every_command():
    assert {flag: found for flag, found in meanings(build_parser()).items() if len(found) > 1} == {}


def test_the_meaning_walk_finds_two_meanings():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.add_parser("bare").add_argument("--to", dest="to_url")
    assert len(meanings(parser)["--to"]) == 2


def _declared_help(flag: str) -> str | None:
    """The help OPTIONS declares for an option string (what every command's help of it starts with)."""
    return next((kwargs["help"] for flags, kwargs in OPTIONS.values() if flag in flags), None)


def help_texts(parser: argparse.ArgumentParser) -> dict[str, dict[str, list[str]]]:
    """{option string: {its help with the command's note and default cut off: the commands}}, for
    the option strings of OPTIONS: a command may say more after the declared help, never another."""
    found: dict[str, dict[str, list[str]]] = {}
    for prog, command in commands(parser):
        for action in _options(command):
            for flag in action.option_strings:
                declared = _declared_help(flag)
                if declared is not None and flag != "--debug":
                    said = declared if action.help.startswith(declared) else action.help
                    found.setdefault(flag, {}).setdefault(said, []).append(prog)
    return found


def test_an_option_string_has_one_help_text_in_every_command():
    assert {flag: found for flag, found in help_texts(build_parser()).items() if len(found) > 1} == {}


def test_the_help_walk_finds_two_help_texts():
    """The walk itself can fail: a command whose --url says something else than the declaration."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.add_parser("bare").add_argument("--url", help="the Parquet folder")
    assert sorted(help_texts(parser)["--url"]) == ["database URL", "the Parquet folder"]


def test_a_change_may_not_give_another_help():
    from sqltransport_schema.cli.options import add_options

    with pytest.raises(KeyError, match="--help of --url is its declaration's"):
        add_options(argparse.ArgumentParser(), "url", url={"help": "the shared database"})


def test_format_takes_one_of_the_sets_of_choices():
    """Commands whose outputs are alike take the same --format choices: one of FORMATS."""
    sets = {
        prog: tuple(action.choices)
        for prog, command in commands(build_parser())
        for action in _options(command)
        if "--format" in action.option_strings
    }
    assert {prog: choices for prog, choices in sets.items() if choices not in FORMATS.values()} == {}
    assert {sets[f"sqltransport-schema {name}"] for name in ("compile", "check", "validate", "fleet upgrade", "fleet status")} == {
        FORMATS["report"]
    }


def test_an_option_several_commands_take_is_declared_once_in_options():
    declared = {flag for flags, _ in OPTIONS.values() for flag in flags}
    shared = {flag for flag, found in meanings(build_parser()).items() if sum(map(len, found.values())) > 1}
    assert sorted(shared - declared) == []


def test_the_renamed_spellings_are_the_deprecated_ones_and_help_hides_them():
    parser = build_parser()
    renamed = {
        prog: {old: action.option_strings[0] for action in _options(command) if isinstance(action, Renamed) for old in action.renamed_from}
        for prog, command in commands(parser)
    }
    assert {prog: spellings for prog, spellings in renamed.items() if spellings} == DEPRECATED
    for prog, spellings in DEPRECATED.items():
        text = dict(commands(parser))[prog].format_help()
        assert [old for old in spellings if re.search(rf"{old}(?![-\w])", text)] == []


def test_an_old_spelling_still_parses_with_a_note_on_stderr(capsys):
    args = build_parser().parse_args(["pipeline", "move", "--from", "sqlite:///a.db", "--from-table", "A", "--to", "sqlite:///b.db"])
    assert (args.from_url, args.to_url) == ("sqlite:///a.db", "sqlite:///b.db")
    assert capsys.readouterr().err == (
        "warning: --from is deprecated for pipeline move; use --from-url\nwarning: --to is deprecated for pipeline move; use --to-url\n"
    )


def test_a_renamed_command_still_parses_with_a_note_on_stderr_and_help_hides_it(capsys):
    parser = build_parser()
    args = parser.parse_args(["pipeline", "archive", "--url", "sqlite://", "--table", "error", "-o", "out"])
    assert (args.pipeline_command, args.func.__name__, args.out_dir) == ("export", "cmd_export", "out")
    assert capsys.readouterr().err == (
        "warning: sqltransport-schema pipeline archive is deprecated; use sqltransport-schema pipeline export\n"
        "warning: -o is deprecated for pipeline export; use --out-dir\n"
    )
    for prog, renamed in DEPRECATED_COMMANDS.items():
        text = dict(commands(parser))[prog].format_help()
        assert [old for old in renamed if re.search(rf"\b{old}\b", text)] == []
    with pytest.raises(SystemExit):
        parser.parse_args(["pipeline", "nothing"])
    assert "archive" not in capsys.readouterr().err.partition("choose from")[2]


@pytest.mark.parametrize("command", [["retry"], ["pipeline", "replay", "--url", "sqlite://", "--table", "error", "--in-dir", "a"]])
def test_message_id_takes_several_ids_after_one_flag_or_the_flag_repeated(command):
    args = build_parser().parse_args([*command, "--message-id", "a", "b", "--message-id", "c"])
    assert args.message_id == ["a", "b", "c"]


def test_validate_prints_its_report_as_markdown(capsys):
    from sqltransport_schema.cli import main

    assert main(["validate", "--topology", str(REPO / "topology.yaml"), "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("### sqltransport-schema validate: valid\n\n`")


@pytest.mark.parametrize("command", [["pipeline", "export", "--out-dir", "out"], ["pipeline", "replay", "--in-dir", "out"]])
def test_a_pipeline_job_finds_its_database_as_every_command_does(tmp_path, monkeypatch, capsys, command):
    """--url is not required: without it, SQLTRANSPORT_URL, else alembic.ini's; with neither, one error line, exit 2."""
    from sqltransport_schema.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SQLTRANSPORT_URL", raising=False)
    assert main([*command, "--table", "error", "--no-spark"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no database: pass --url URL (or set SQLTRANSPORT_URL), or run where alembic.ini names one")
    assert err.count("\n") == 1
