"""MkDocs hooks (mkdocs.yml `hooks:`): the pages of the documentation site that are made at build time.

- reference/cli.md: the --help of every command, from the parser the command line itself builds
  (sqltransport_schema.cli.build_parser), so a renamed option or command shows in the site as it is.
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
HELP_COLUMNS = "100"  # argparse wraps --help to the terminal's width: the page's is fixed
MARKED_FENCE = re.compile(r"^(?P<fence>[ \t]*(?:`{3,}|~{3,})[\w#.+-]+)[ \t]+[\w -]+?[ \t]*$", re.MULTILINE)
LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?P<anchor>#[^)\s]*)?\)")

CLI_INTRO = """# Command line

Every command of `sqltransport-schema`, with the `--help` it prints: this page is generated from the
parser the command line builds, so it always matches the installed version. Every command exits 0 on
success, 1 for its finding (uncompiled changes, drift, moves pending) and 2 on any error, printed as
one `error: ...` line; `--debug` adds the traceback. Alembic's own commands (`alembic upgrade head`,
`alembic check`) are Alembic's; the `-x` options a migration takes are in the [guides](../index.md),
e.g. [Migrations on a live bus](../live-migrations.md).
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


def on_files(files, config):
    for source, page in PUBLISHED.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
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
