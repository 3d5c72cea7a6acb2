"""MkDocs hooks (mkdocs.yml `hooks:`): the pages of the documentation site that are made at build time.

- reference/cli.md: the --help of every command, from the parser the command line itself builds
  (sqltransport_schema.cli.build_parser), so a renamed option or command shows in the site as it is.
- reference/options.md: a table of every command's options, from the same parser and the declarations
  of sqltransport_schema/cli/options.py (tests/test_cli.py holds each table to the command's --help).
- Files of the repository outside docs/ that the site publishes (PUBLISHED): the changelog and the
  benchmark results, each at a page of its own. docs/*.md link them by their place in the repository
  (`../CHANGELOG.md`, which works where the Markdown is read as it is); in the site such a link
  goes to the page. A link out of docs/ to any other file stays as written and fails the strict build.
- Fenced blocks marked for the docs tests (```sh deployed, ```sh spark, ```python no-run): Python-Markdown's
  fenced_code takes only a language after the fence, so the site gets the language alone. Left as written,
  a marked block is no block, and its closing fence opens one that swallows the headings after it.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
DOCS = "docs"
# repository path -> the page of the site that shows it
PUBLISHED = {"CHANGELOG.md": "changelog.md", "benchmarks/RESULTS.md": "benchmarks.md"}
CLI_PAGE = "reference/cli.md"
OPTIONS_PAGE = "reference/options.md"
HELP_COLUMNS = "100"  # argparse wraps --help to the terminal's width: the page's is fixed
MARKED_FENCE = re.compile(r"^(?P<fence>[ \t]*(?:`{3,}|~{3,})[\w#.+-]+)[ \t]+[\w -]+?[ \t]*$", re.MULTILINE)
LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?P<anchor>#[^)\s]*)?\)")

CLI_INTRO = """# Command line

Every command of `sqltransport-schema`, with the `--help` it prints: this page is generated from the
parser the command line builds, so it always matches the installed version. Every command exits 0 on
success, 1 for its finding (uncompiled changes, drift, moves pending) and 2 on any error, printed as
one `error: ...` line; `--debug` adds the traceback. Alembic's own commands (`alembic upgrade head`,
`alembic check`) are Alembic's; the `-x` options a migration takes are in the [guides](../index.md),
e.g. [Migrations on a live bus](../live-migrations.md). [Options](options.md) has every command's
options as tables.
"""

OPTIONS_INTRO = """# Options

Every option of every command, generated from the declarations in `sqltransport_schema/cli/options.py`
and the parser the command line builds; the help of each is what `--help` prints. An option string
means one thing in every command that takes it: the options several commands share are declared once,
with one help text, after which a command may add what it means there (after a colon) and its own
default. `--format` takes one set of choices wherever the outputs are alike. The database is found the
same way by every command that reads one: `--url`, else `SQLTRANSPORT_URL`, else `sqlalchemy.url` in
the Alembic configuration (`-c`, default `alembic.ini`); `graph` and `script` read a database only when
given `--url`. The [command line](cli.md) page has each command's whole `--help`.
"""


def cli_reference() -> str:
    """The command-line reference page: the top level's --help, then each command's, as nested sections."""
    from sqltransport_schema.cli import build_parser, commands

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = build_parser()
        parts = [CLI_INTRO, "## sqltransport-schema", "", "```text", parser.format_help().rstrip(), "```"]
        for prog, command in commands(parser):
            depth = prog.count(" ") + 1  # `sqltransport-schema compile` under the top level, `... pipeline move` under pipeline
            parts += ["", f"{'#' * depth} {prog}", "", "```text", command.format_help().rstrip(), "```"]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(parts) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def option_rows(command) -> list[tuple[str, str, str]]:  # noqa: ANN001 - an argparse.ArgumentParser
    """(option strings, value, help) of each option of a command, in the order of its --help (group by group), -h aside."""
    import argparse

    formatter = command._get_formatter()
    rows = []
    in_help_order = [action for group in command._action_groups for action in group._group_actions]
    for action in in_help_order:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or not action.option_strings:
            continue
        if action.help is argparse.SUPPRESS:
            continue
        value = "" if action.nargs == 0 else formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
        rows.append((", ".join(action.option_strings), value, formatter._expand_help(action) if action.help else ""))
    return rows


def options_reference() -> str:
    """The options page: the options several commands share (one meaning each), then each command's."""
    from sqltransport_schema.cli import build_parser, commands
    from sqltransport_schema.cli.options import OPTIONS, Renamed

    parser = build_parser()
    found = list(commands(parser))
    users: dict[str, list[str]] = {}
    renamed = []
    for prog, command in found:
        name = prog.removeprefix("sqltransport-schema ")
        for action in command._actions:
            for flag in action.option_strings[:1]:
                users.setdefault(flag, []).append(name)
            if isinstance(action, Renamed):
                renamed += [(name, old, action.option_strings[0]) for old in action.renamed_from]
    parts = [OPTIONS_INTRO, "## Shared options", "", "| Option | Meaning | Commands |", "|---|---|---|"]
    for flags, kwargs in OPTIONS.values():
        if flags[0] != "--debug" and len(users.get(flags[0], ())) > 1:
            parts.append(f"| `{', '.join(flags)}` | {_cell(kwargs['help'])} | {', '.join(users[flags[0]])} |")
    parts += ["", "## Renamed options", "", "The old spelling still works, with a note on stderr; `--help` shows the new one.", ""]
    parts += ["| Command | Old | New |", "|---|---|---|"] + [f"| {name} | `{old}` | `{new}` |" for name, old, new in renamed]
    parts += ["", "`pipeline archive` is `pipeline export` (the error queue's archive is the `archive` command's)."]
    for prog, command in found:
        rows = option_rows(command)
        if not rows:
            continue
        parts += ["", f"## {prog.removeprefix('sqltransport-schema ')}", "", "| Option | Value | Help |", "|---|---|---|"]
        parts += [f"| `{flags}` | {f'`{value}`' if value else ''} | {_cell(text)} |" for flags, value, text in rows]
    return "\n".join(parts) + "\n"


def on_files(files, config):
    for source, page in PUBLISHED.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    files.append(File.generated(config, OPTIONS_PAGE, content=options_reference()))
    return files


def on_page_markdown(markdown, page, config, files):
    """Links that leave docs/ for a published file go to its page; marked fences keep their language."""
    markdown = MARKED_FENCE.sub(r"\g<fence>", markdown)
    here = posixpath.dirname(posixpath.join(DOCS, page.file.src_uri))

    def published(match: re.Match) -> str:
        target = match.group("target")
        if "://" in target:
            return match.group(0)
        page_uri = PUBLISHED.get(posixpath.normpath(posixpath.join(here, target)))
        if page_uri is None:
            return match.group(0)
        relative = posixpath.relpath(page_uri, posixpath.dirname(page.file.src_uri) or ".")
        return f"]({relative}{match.group('anchor') or ''})"

    return LINK.sub(published, markdown)
