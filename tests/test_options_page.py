"""The options page of the documentation (tools/mkdocs_hooks.py, reference/options.md): generated from
the parser and the declarations of cli/options.py, and held here to what each command's --help says."""

from __future__ import annotations

import re
import sys

import pytest

from sqltransport_schema.cli import build_parser, commands

from .support.projects import REPO

pytest.importorskip("mkdocs")
sys.path.insert(0, str(REPO / "tools"))
import mkdocs_hooks  # noqa: E402


def _sections(page: str) -> dict[str, str]:
    """{command: its table} of the page (the sections after the shared and renamed options)."""
    return {title: body for title, body in re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", page, re.MULTILINE | re.DOTALL)}


def _table(body: str) -> list[tuple[str, str]]:
    """(the first option string, the help) of each row of a command's table."""
    rows = []
    for line in body.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`-"):
            rows.append((cells[0].strip("`").split(", ")[0], cells[2].replace("\\|", "|")))
    return rows


def _listed(help_text: str) -> list[str]:
    """The first option string of each option --help lists (-h aside), on a terminal too wide to wrap."""
    flags = []
    for line in help_text.splitlines():
        if re.match(r"^  -", line):
            first = re.split(r"[ ,]", line.strip())[0]
            if first not in ("-h", "--help"):
                flags.append(first)
    return flags


def test_each_commands_table_lists_its_options_with_the_help_that_help_prints(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at the terminal's width: one line per option
    sections = _sections(mkdocs_hooks.options_reference())
    checked = 0
    for prog, command in commands(build_parser()):
        name = prog.removeprefix("sqltransport-schema ")
        rows = _table(sections[name])
        text = command.format_help()
        assert [flag for flag, _ in rows] == _listed(text), name
        flat = " ".join(text.split())
        assert [said for _, said in rows if said not in flat] == [], name
        checked += 1
    assert checked == len(list(commands(build_parser())))


def test_the_table_walk_finds_an_option_help_does_not_list():
    """The comparison itself can fail: a row for an option the command does not take."""
    body = _sections(mkdocs_hooks.options_reference())["init"] + "| `--bogus` | | a row too many |\n"
    assert "--bogus" in [flag for flag, _ in _table(body)]
    assert "--bogus" not in _listed(dict(commands(build_parser()))["sqltransport-schema init"].format_help())


def test_the_shared_options_say_what_their_declarations_say():
    from sqltransport_schema.cli.options import OPTIONS

    declared = {flags[0]: kwargs["help"] for flags, kwargs in OPTIONS.values()}
    body = _sections(mkdocs_hooks.options_reference())["Shared options"]
    rows = [[cell.strip() for cell in line.split(" | ")] for line in body.splitlines() if line.startswith("| `-")]
    assert rows
    for flags, meaning, _ in rows:
        assert meaning == " ".join(declared[flags.strip("| `").split(", ")[0]].split()), flags


def test_the_site_lists_the_options_page():
    assert f"reference/{mkdocs_hooks.OPTIONS_PAGE.split('/')[-1]}" in (REPO / "mkdocs.yml").read_text(encoding="utf-8")
