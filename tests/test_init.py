"""`sqltransport-schema init`: a project of one's own that works with the installed package alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sqltransport_schema import cli, project

from .support import catalog, warm
from .support.projects import REPO

BIN = Path(sys.executable).parent


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the package only: nothing of the repository's folders
    env.pop("SQLTRANSPORT_URL", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=300)


def test_init_then_compile_then_upgrade_builds_the_tables(tmp_path):
    folder = tmp_path / "shop"
    created = run(tmp_path, warm.program("sqltransport-schema"), "init", "shop")
    assert created.returncode == 0, created.stderr
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == sorted(project.FILES + (".gitignore",))
    compiled = run(folder, warm.program("sqltransport-schema"), "compile", "-m", "initial topology")
    assert compiled.returncode == 0, compiled.stderr
    upgraded = run(folder, warm.program("alembic"), "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    tables = {name for _, name in catalog.read(f"sqlite:///{folder / 'sqltransport.db'}")}
    assert tables == {"Sales", "Sales.Delayed", "error", "SubscriptionRouting"}


def test_git_add_after_an_upgrade_leaves_the_database_and_caches_out(tmp_path):
    """docs/teams.md's `git add .` after `alembic upgrade head`: the project's files, not sqltransport.db
    (a deployed state), Python's caches nor a fleet's journal (docs/fleets.md: beside the fleet file)."""
    assert run(tmp_path, warm.program("sqltransport-schema"), "init", "shop").returncode == 0
    folder = tmp_path / "shop"
    assert run(folder, warm.program("sqltransport-schema"), "compile", "-m", "initial topology").returncode == 0
    assert run(folder, warm.program("alembic"), "upgrade", "head").returncode == 0
    assert (folder / "sqltransport.db").is_file()
    for journal in ("fleet.journal.sqlite", "fleet.journal.sqlite-wal", "fleet.journal.sqlite-shm", "deploy/staging.journal.sqlite"):
        (folder / journal).parent.mkdir(exist_ok=True)
        (folder / journal).write_bytes(b"")
    assert run(folder, "git", "init", "-q").returncode == 0 and run(folder, "git", "add", ".").returncode == 0
    added = run(folder, "git", "diff", "--cached", "--name-only").stdout.split()
    revision = [name for name in added if name.startswith("migrations/versions/")]
    assert sorted(set(added) - set(revision)) == sorted(project.FILES + (".gitignore",)) and len(revision) == 1, added


def test_init_keeps_a_gitignore_the_folder_has(tmp_path):
    (tmp_path / ".gitignore").write_text("mine\n", encoding="utf-8")
    assert cli.main(["init", str(tmp_path)]) == 0
    assert (tmp_path / ".gitignore").read_text(encoding="utf-8") == "mine\n"


def test_init_refuses_a_folder_that_holds_a_project(tmp_path, capsys):
    assert cli.main(["init", str(tmp_path)]) == 0
    capsys.readouterr()
    assert cli.main(["init", str(tmp_path)]) == 2
    assert "exists already" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["alembic.ini", "migrations/env.py", "migrations/script.py.mako"])
def test_the_repository_uses_the_shipped_templates(name):
    """One text of each: the repository's own project files are init's."""
    assert (REPO / name).read_text(encoding="utf-8") == project.template(name)


def test_an_upgrade_prints_the_tools_lines_alone_and_verbose_adds_alembics(tmp_path):
    """alembic.ini keeps Alembic's INFO lines quiet ("Context impl SQLiteImpl.", "Will assume ... DDL.");
    each table as it is created and the revision still print, as they are (no `INFO  [logger]` before them);
    -x verbose=true shows Alembic's again."""
    assert run(tmp_path, warm.program("sqltransport-schema"), "init", "shop").returncode == 0
    folder = tmp_path / "shop"
    assert run(folder, warm.program("sqltransport-schema"), "compile", "-m", "initial topology").returncode == 0
    head = run(folder, warm.program("alembic"), "heads").stdout.split()[0]
    quiet = run(folder, warm.program("alembic"), "upgrade", "head")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.splitlines() == [
        'create queue "Sales" (transport 9.1)',
        'create queue "error" (transport 9.1)',
        'create delayed table "Sales.Delayed" (transport 9.1)',
        'create subscription table "SubscriptionRouting" (transport 9.1)',
        f"upgrade <base> -> {head}, initial topology",
    ]
    verbose = run(folder, warm.program("alembic"), "-x", "verbose=true", "-x", "url=sqlite:///other.db", "upgrade", "head")
    assert verbose.returncode == 0, verbose.stderr
    lines = verbose.stderr.splitlines()
    assert "INFO  [alembic.runtime.migration] Context impl SQLiteImpl." in lines
    assert f"INFO  [alembic.runtime.migration] Running upgrade  -> {head}, initial topology" in lines
    assert 'create queue "Sales" (transport 9.1)' in lines
    assert not any(line.startswith("upgrade ") for line in lines)  # said once, by Alembic

    # topology.yaml edited, compile forgotten: the upgrade says so on stderr and exits 0, having run what is compiled
    with (folder / "topology.yaml").open("a", encoding="utf-8") as topology:
        topology.write("  - name: audit\n")
    forgot = run(folder, warm.program("alembic"), "upgrade", "head")
    assert forgot.returncode == 0 and forgot.stderr.splitlines() == [
        "warning: topology.yaml differs from the migrations' head: 1 change not compiled yet "
        '(create queue "audit" (transport 9.1)). Run: sqltransport-schema compile -m "add audit"'
    ], forgot.stderr
