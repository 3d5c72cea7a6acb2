"""Every shell and Python block of README.md and docs/*.md runs as written, in a copy of the
repository (a fresh clone's files, `.venv` the test's own virtual environment) against real
databases, so the docs cannot go stale. Blocks whose info string says `no-run` (```python no-run)
are illustrative and skipped; ```text marks a synopsis; `deployed` (```python deployed) runs the block
after `alembic upgrade head` of the example topology, as the text before it says; `spark` blocks need
the spark extra and skip without it, like the Spark tests (`console`
blocks the console extra, likewise); `prometheus` blocks need Debian's `prometheus`
package (promtool) and skip without it, failing under CI, as tests/support/prometheus.py does; `install`
blocks (README's install from a built wheel) are tests/test_package.py's. The one substitution: the documented
PostgreSQL database `postgresql://postgres@127.0.0.1/app` is a throwaway database of the test, which
a documented `createdb -h 127.0.0.1 -U postgres app` creates (the test drops it first)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .support import warm
from .support.databases import PG_ADMIN_URL, admin, under_ci
from .support.projects import REPO, copy_tracked
from .support.warm import virtual_environment

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.DOTALL | re.MULTILINE)
DOCUMENTED_PG = "postgresql://postgres@127.0.0.1/app"
# How the docs create that database: the test's throwaway database is dropped first and created by it.
DOCUMENTED_CREATEDB = "createdb -h 127.0.0.1 -U postgres app"
SKIP = "no-run"
# The first README block makes the virtual environment the others use; the test has one already.
FRESH_CLONE = "fresh-clone"
# Runs against the example topology deployed first (`alembic -x url=... upgrade head`), as the text before it says.
DEPLOYED = "deployed"
# Needs the spark extra (```sh spark): skipped without it, as the Spark tests are.
SPARK = "spark"
# Needs the console extra (```sh console): skipped without it, as the console's tests are (marked console).
CONSOLE = "console"
# Needs promtool (```sh prometheus): skipped without it locally, failed under CI (.ci/run installs it).
PROMETHEUS = "prometheus"
# README's install into a project of one's own (```sh install): tests/test_package.py runs those blocks, against
# the wheel it builds and in a fresh virtual environment outside the checkout; not collected here.
INSTALL = "install"


def blocks() -> list:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            words = match.group("info").split()
            kind = RUNNABLE.get(words[0]) if words else None
            if kind is None or INSTALL in words[1:]:
                continue
            line = text[: match.start()].count("\n") + 1
            body = "\n".join(part[len(match.group("indent")) :] for part in match.group("body").splitlines())
            marks = [pytest.mark.skip(reason="illustrative (no-run)")] if SKIP in words[1:] else []
            if SPARK in words[1:]:
                marks.append(pytest.mark.spark)
            if CONSOLE in words[1:]:
                marks.append(pytest.mark.console)
            if PROMETHEUS in words[1:]:
                marks.append(pytest.mark.skipif(shutil.which("promtool") is None and not under_ci(), reason="needs promtool"))
            if FRESH_CLONE in words[1:]:
                marks = [
                    pytest.mark.skipif(
                        os.environ.get("SQLTRANSPORT_DOCS_FRESH_CLONE") != "1",
                        reason="installs from the network: SQLTRANSPORT_DOCS_FRESH_CLONE=1",
                    )
                ]
            found.append(pytest.param(kind, body, DEPLOYED in words[1:], id=f"{path.relative_to(REPO)}:{line}", marks=marks))
    return found


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """The repository's files as a clone has them, with .venv the running interpreter's environment
    (its commands started warm, support/warm.py)."""
    root = copy_tracked(tmp_path / "clone")
    virtual_environment(root / ".venv", Path(sys.executable).parent.parent, warm.ACTIVE and warm.ACTIVE.bin)
    return root


@pytest.mark.postgresql
@pytest.mark.parametrize("kind, body, deployed", blocks())
def test_documented_block_runs(kind, body, deployed, sandbox, pg_url):
    url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    body = body.replace(DOCUMENTED_PG, url)
    if DOCUMENTED_CREATEDB in body:
        name = url.rsplit("/", 1)[1]
        with admin(PG_ADMIN_URL, "PostgreSQL").connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE "{name}"')
        body = body.replace(DOCUMENTED_CREATEDB, f"createdb -h 127.0.0.1 -U postgres {name}")
    env = {**os.environ, "PYTHONPATH": str(sandbox), "EDITOR": "true"}
    env.pop("SQLTRANSPORT_URL", None)
    env["PATH"] = f"{sandbox / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
    if deployed:
        alembic = [str(sandbox / ".venv" / "bin" / "alembic"), "-x", f"url={url}", "upgrade", "head"]
        subprocess.run(alembic, cwd=sandbox, env=env, capture_output=True, text=True, check=True, timeout=180)
    if kind == "python":
        command = [warm.program("python"), "-c", body]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", body]
    result = subprocess.run(command, cwd=sandbox, env=env, capture_output=True, text=True, check=False, timeout=180)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def test_the_home_page_lists_every_guide():
    """docs/index.md's guide list names every page of docs/ (a page no list names is found by nobody)."""
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    guides = index[index.index("## Guides") : index.index("## Reference")]
    linked = set(re.findall(r"\]\(([\w-]+\.md)\)", guides))
    pages = {path.name for path in (REPO / "docs").glob("*.md")} - {"index.md"}
    assert pages - linked == set(), f"docs/index.md's Guides list misses {sorted(pages - linked)}"


def _readme_blocks() -> list[tuple[str, str]]:
    """(kind, body) of README's runnable blocks, in order."""
    return _runnable_blocks(DOCS[0])


def _runnable_blocks(page: Path) -> list[tuple[str, str]]:
    """(kind, body) of a page's runnable blocks, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        words = match.group("info").split()
        if words and RUNNABLE.get(words[0]) and SKIP not in words[1:]:
            found.append((RUNNABLE[words[0]], match.group("body")))
    return found


def test_the_workflow_creates_the_postgresql_database_before_it_uses_it():
    """The first block of docs/workflow.md (README's reference, moved there) that names the database `app`
    creates it first, as a newcomer must."""
    body = next(body for _, body in _runnable_blocks(REPO / "docs" / "workflow.md") if DOCUMENTED_PG in body)
    assert DOCUMENTED_CREATEDB in body and body.index(DOCUMENTED_CREATEDB) < body.index(DOCUMENTED_PG)


# README's first screen: its start, up to its first `## ` heading that is none of these (or its end).
FIRST_SCREEN_HEADINGS = ("## Two commands", "## Quickstart", "## Where to go next")
FIRST_SCREEN_LINES = 80


def _first_screen() -> list[str]:
    lines = DOCS[0].read_text(encoding="utf-8").splitlines()
    end = next((i for i, line in enumerate(lines) if line.startswith("## ") and line.strip() not in FIRST_SCREEN_HEADINGS), len(lines))
    return lines[:end]


def test_readmes_first_screen_is_a_quickstart():
    """README's first screen (issue 56): at most 80 lines, what it is, the two commands .ci/run takes from it
    (```sh fresh-clone, in that order), a five-step quickstart and links into docs/; no reference section."""
    screen = _first_screen()
    assert len(screen) <= FIRST_SCREEN_LINES, f"README's first screen is {len(screen)} lines (at most {FIRST_SCREEN_LINES})"
    text = "\n".join(screen) + "\n"
    fresh = [m.group("body").strip() for m in FENCE.finditer(text) if m.group("info").split() == ["sh", FRESH_CLONE]]
    assert fresh == [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/alembic upgrade head",
        ".venv/bin/python -m pytest",
    ]
    steps = [line for line in text.splitlines() if re.search(r"#\s*[1-5]\. ", line)]
    assert [re.search(r"#\s*([1-5])\. ", line).group(1) for line in steps] == ["1", "2", "3", "4", "5"], steps
    assert all(f"(docs/{page})" in text for page in ("workflow.md", "tour.md", "index.md"))
    assert {REPO / "docs" / "workflow.md", REPO / "docs" / "tour.md"} <= set(DOCS)  # the moved blocks run here
    headings = [line for line in DOCS[0].read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    assert headings == list(FIRST_SCREEN_HEADINGS), "README holds only its first screen: reference sections live in docs/"


def test_every_page_is_in_the_sites_navigation():
    """mkdocs.yml's nav names every page of docs/ (the guides and the reference's), as the home page lists them."""
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    named = set(re.findall(r"([\w/-]+\.md)\s*$", nav, re.MULTILINE))
    pages = {str(path.relative_to(REPO / "docs")) for path in (REPO / "docs").rglob("*.md")}
    assert pages - named == set(), f"mkdocs.yml's nav misses {sorted(pages - named)}"


def test_a_newcomer_sends_and_receives_on_sqlite_with_no_server(sandbox):
    """README has a send and receive that needs no server: it runs as written, with no PostgreSQL
    URL anywhere in it (so with no server up) and nothing but the clone's files."""
    serverless = [(kind, body) for kind, body in _readme_blocks() if ".send(" in body and ".receive(" in body and "://" in body]
    serverless = [(kind, body) for kind, body in serverless if all(s not in body for s in ("postgresql://", "mssql://", "mysql://"))]
    assert serverless, "README shows no send and receive that runs without a server"
    kind, body = serverless[0]
    env = {**os.environ, "PYTHONPATH": str(sandbox), "PGHOST": "127.0.0.1", "PGPORT": "1", "EDITOR": "true"}  # no server to reach
    env.pop("SQLTRANSPORT_URL", None)
    command = [warm.program("python"), "-c", body] if kind == "python" else ["bash", "-e", "-o", "pipefail", "-c", body]
    result = subprocess.run(command, cwd=sandbox, env=env, capture_output=True, text=True, check=False, timeout=180)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.stdout.strip().endswith("""b'{"OrderId": 42}'""") and (sandbox / "sqltransport.db").is_file()


def test_the_fleet_guide_starts_in_a_fresh_folder(sandbox, tmp_path):
    """docs/fleets.md's first block runs as written in an empty folder (issue 56: it assumed a project and
    failed with `alembic.ini: no such Alembic configuration`); no page names a revision id that exists only in
    the example's migrations."""
    page = REPO / "docs" / "fleets.md"
    kind, body = _runnable_blocks(page)[0]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    env = {**os.environ, "PATH": f"{sandbox / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SQLTRANSPORT_URL", None)
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=fresh, env=env, capture_output=True, text=True, timeout=180)
    assert kind == "sh" and result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert len(list(fresh.glob("*/tenants/*.db"))) == 5
    example = {path.name.split("_")[1] for path in (REPO / "migrations" / "versions").glob("*.py")}
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        runnable = "".join(m.group("body") for m in FENCE.finditer(text) if SKIP not in m.group("info").split())
        named = {rev for rev in example if re.search(rf"--to\s+{rev}\b|--from\s+{rev}\b", runnable)}
        assert not named, f"{path.relative_to(REPO)} runs with the example's revision ids {sorted(named)}"
