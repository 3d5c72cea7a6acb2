"""CI integrations (docs/ci.md): `--format github` (each problem a GitHub workflow command on its
file, line and column; the markdown report in the job summary) on validate, compile --check and
check against real PostgreSQL, and the pre-commit hooks of .pre-commit-hooks.yaml run by the real
`pre-commit try-repo` on a project made by `init`."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from sqltransport_schema import cli
from sqltransport_schema.cli import github

from .support import warm
from .support.fleets import run_fleet
from .support.locks import libpq
from .support.projects import REPO, copy_tracked

ANNOTATION = re.compile(r"^::(?P<level>error|warning|notice)(?: (?P<props>[^:]*))?::(?P<message>.*)$")
BIN = Path(sys.executable).parent
GIT_ENV = {
    "GIT_AUTHOR_NAME": "ci test",
    "GIT_AUTHOR_EMAIL": "ci@example.com",
    "GIT_COMMITTER_NAME": "ci test",
    "GIT_COMMITTER_EMAIL": "ci@example.com",
}


def annotations(out: str) -> list[dict]:
    """The workflow commands printed, each as its level, properties (unescaped) and message."""
    found = []
    for line in out.splitlines():
        match = ANNOTATION.match(line)
        if match is None:
            continue
        props = dict(p.split("=", 1) for p in (match["props"] or "").split(",") if p)
        unescape = {k: v.replace("%3A", ":").replace("%2C", ",").replace("%25", "%") for k, v in props.items()}
        found.append({"level": match["level"], **unescape, "message": match["message"]})
    return found


def line_of(path: Path, text: str) -> tuple[int, int]:
    """(line, column) where `text` first appears in the file, 1-based, as annotations count."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return number, line.index(text) + 1
    raise AssertionError(f"{text!r} not in {path}")


@pytest.fixture
def initialised(tmp_path, monkeypatch) -> Path:
    """A project made by `init`, its topology compiled; the current folder (as a CI job's)."""
    root = tmp_path / "shop"
    assert cli.main(["init", str(root)]) == 0
    monkeypatch.chdir(root)
    assert cli.main(["compile", "-m", "initial"]) == 0
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    monkeypatch.delenv(github.SUMMARY_VARIABLE, raising=False)
    return root


def add_queue(root: Path, name: str) -> None:
    topology = root / "topology.yaml"
    topology.write_text(topology.read_text(encoding="utf-8").replace("queues:\n", f"queues:\n  - name: {name}\n", 1), encoding="utf-8")


# -- the workflow commands -----------------------------------------------------------------
def test_workflow_commands_are_escaped_as_the_runner_reads_them():
    a = github.Annotation("50% done\r\nnext: a, b", file="dir/a:b,c%.yaml", line=3, col=7, title="t: x, y")
    assert a.command() == "::error file=dir/a%3Ab%2Cc%25.yaml,line=3,col=7,title=t%3A x%2C y::50%25 done%0D%0Anext: a, b"
    assert github.Annotation("plain", level="notice").command() == "::notice::plain"


def test_a_topology_error_is_annotated_on_its_line(initialised, capsys, monkeypatch, tmp_path):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv(github.SUMMARY_VARIABLE, str(summary))
    topology = initialised / "topology.yaml"
    topology.write_text(topology.read_text(encoding="utf-8").replace("  - name: error", "  - name: error\n    schema: 5"), encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["validate", "--format", "github"]) == 2
    out, err = capsys.readouterr()
    line, col = line_of(topology, "schema: 5")
    col += len("schema: ")
    assert annotations(out) == [
        {
            "level": "error",
            "file": "topology.yaml",
            "line": str(line),
            "col": str(col),
            "title": "sqltransport-schema validate",
            "message": "queues[0].schema must be a name (a string), not a number",
        }
    ]
    assert f"error: topology.yaml:{line}:{col}: queues[0].schema" in err  # the text on stderr, as ever
    assert f"- `topology.yaml:{line}:{col}`: queues[0].schema must be a name" in summary.read_text(encoding="utf-8")


def test_a_file_outside_the_current_folder_is_named_relative_to_the_workspace(initialised, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_WORKSPACE", str(initialised.parent))
    (initialised / "topology.yaml").write_text('transport_version: "9.1"\nendpoints:\n  - name: 7\n', encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["validate", "--format", "github"]) == 2
    (found,) = annotations(capsys.readouterr().out)
    assert (found["file"], found["line"], found["col"]) == ("shop/topology.yaml", "3", "11")


def test_valid_topology_prints_no_annotation_and_writes_the_summary(initialised, capsys, monkeypatch, tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv(github.SUMMARY_VARIABLE, str(summary))
    capsys.readouterr()
    assert cli.main(["validate", "--format", "github"]) == 0
    out = capsys.readouterr().out
    assert annotations(out) == [] and "topology.yaml: valid (4 tables)" in out
    assert summary.read_text(encoding="utf-8").startswith("earlier step\n### sqltransport-schema validate: valid")  # appended


def test_an_uncompiled_change_is_annotated_where_the_topology_makes_its_table(initialised, capsys, monkeypatch, tmp_path):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv(github.SUMMARY_VARIABLE, str(summary))
    add_queue(initialised, "audit")
    capsys.readouterr()
    assert cli.main(["compile", "--check", "--format", "github"]) == 1
    out = capsys.readouterr().out
    line, col = line_of(initialised / "topology.yaml", "audit")
    (found,) = annotations(out)
    assert (found["file"], found["line"], found["col"]) == ("topology.yaml", str(line), str(col))
    assert (
        found["message"]
        == 'create queue "audit" (transport 9.1): not compiled yet: run sqltransport-schema compile -m "describe the change"'
    )
    assert "topology.yaml holds 1 change(s) not compiled yet:" in out  # the text lines follow, for the log
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("### sqltransport-schema compile: pending") and "```mermaid" in text  # the report with its picture
    monkeypatch.delenv(github.SUMMARY_VARIABLE)
    assert cli.main(["compile", "-m", "audit"]) == 0
    capsys.readouterr()
    assert cli.main(["compile", "--check", "--format", "github"]) == 0
    assert annotations(capsys.readouterr().out) == []


@pytest.mark.postgresql
def test_drift_is_annotated_on_the_line_of_its_table(initialised, pg_url, capsys, monkeypatch, tmp_path):
    url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SQLTRANSPORT_URL", None)
    upgrade = subprocess.run(
        [warm.program("alembic"), "-x", f"url={url}", "upgrade", "head"], cwd=initialised, env=env, capture_output=True, text=True
    )
    assert upgrade.returncode == 0, upgrade.stderr
    capsys.readouterr()
    assert cli.main(["check", "--url", url, "--format", "github"]) == 0
    assert annotations(capsys.readouterr().out) == []
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute('ALTER TABLE "public"."error" ADD COLUMN note text')
        conn.execute('CREATE TABLE "public"."scratch" (id int)')
    summary = tmp_path / "summary.md"
    monkeypatch.setenv(github.SUMMARY_VARIABLE, str(summary))
    assert cli.main(["check", "--url", url, "--format", "github"]) == 1
    out = capsys.readouterr().out
    line, col = line_of(initialised / "topology.yaml", "error")
    by_title = {a["title"]: a for a in annotations(out)}
    extra = by_title["sqltransport-schema check: extra_column"]
    assert (extra["level"], extra["file"], extra["line"], extra["col"]) == ("error", "topology.yaml", str(line), str(col))
    assert extra["message"].startswith("public.error: ") and "note" in extra["message"]
    unmanaged = by_title["sqltransport-schema check: unmanaged_table"]  # information: a notice, at no line
    assert unmanaged["level"] == "notice" and "file" not in unmanaged
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("### sqltransport-schema check: drift (1 difference(s))") and "```mermaid" in text


def test_an_error_is_one_annotation_and_the_same_exit(initialised, capsys):
    assert cli.main(["check", "--url", "postgresql://postgres@127.0.0.1:1/nowhere", "--format", "github"]) == 2
    out, err = capsys.readouterr()
    (found,) = annotations(out)
    assert found["level"] == "error" and "file" not in found
    assert err.startswith("error: ")


FLEET = """targets:
  - name: current
    url: sqlite:///tenants/current.db
  - name: drifted
    url: sqlite:///tenants/drifted.db
  - name: fresh
    url: sqlite:///tenants/fresh.db
  - name: gone
    url: sqlite:///nowhere/gone.db
query:
  url: sqlite:///control.db
  sql: SELECT name, url FROM tenants
"""


def test_fleet_status_annotates_each_target_needing_attention_on_its_fleet_file_line(initialised, tmp_path):
    """SQLite tenant files: one at the head, one drifted, one never upgraded, one unreachable from
    the file's list, one unreachable from the control database's query (no line names it)."""
    (initialised / "tenants").mkdir()
    with sqlite3.connect(initialised / "control.db") as control:
        control.execute("CREATE TABLE tenants (name TEXT, url TEXT)")
        control.execute("INSERT INTO tenants VALUES ('queried', 'sqlite:///nowhere/queried.db')")
    (initialised / "fleet.yaml").write_text(FLEET, encoding="utf-8")
    upgrade = run_fleet(initialised, "upgrade", "--only", "current", "--only", "drifted")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    with sqlite3.connect(initialised / "tenants" / "drifted.db") as drifted:
        drifted.execute('ALTER TABLE "error" ADD COLUMN note TEXT')
    summary = tmp_path / "summary.md"
    result = run_fleet(initialised, "status", "--check", "--format", "github", GITHUB_STEP_SUMMARY=str(summary))
    assert result.returncode == 1, result.stdout + result.stderr
    found = {a["title"].rsplit(": ", 1)[1]: a for a in annotations(result.stdout)}
    fleet = initialised / "fleet.yaml"
    assert sorted(found) == ["behind", "drifted", "unreachable"]  # one per state seen; the names below
    by_name = {a["message"].split(":", 1)[0]: a for a in annotations(result.stdout)}
    assert sorted(by_name) == ["drifted", "fresh", "gone", "queried"]
    for name in ("drifted", "fresh", "gone"):
        line, col = line_of(fleet, f"name: {name}")
        a = by_name[name]
        assert (a["level"], a["file"], a["line"], a["col"]) == ("error", "fleet.yaml", str(line), str(col + len("name: ")))
    assert "file" not in by_name["queried"] and "unreachable" in by_name["queried"]["title"]
    assert "extra column" in by_name["drifted"]["message"] and "1 behind" in by_name["fresh"]["message"]
    assert "current" not in by_name and "current: at " in result.stdout  # at the head: a log line, no annotation
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("### sqltransport-schema fleet status: attention") and "| gone | unreachable |" in text
    assert "```mermaid" in text

    healthy = run_fleet(initialised, "status", "--check", "--format", "github", "--only", "current", GITHUB_STEP_SUMMARY=str(summary))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert annotations(healthy.stdout) == []
    assert summary.read_text(encoding="utf-8").count("### sqltransport-schema fleet status: ok") == 1


# -- the pre-commit hooks ------------------------------------------------------------------
def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True, check=True)
    return result.stdout.strip()


@pytest.fixture(scope="session")
def hooks_repo(tmp_path_factory) -> tuple[Path, str, Path]:
    """(a git repository of this project as it is now, its commit, PRE_COMMIT_HOME): one clone and
    one hook environment for the session (pre-commit installs the package once per commit)."""
    root = copy_tracked(tmp_path_factory.mktemp("hooks") / "sqltransport-schema")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "as tested")
    return root, git(root, "rev-parse", "HEAD"), tmp_path_factory.mktemp("pre-commit-home")


def try_repo(hooks_repo, project: Path) -> subprocess.CompletedProcess:
    root, commit, home = hooks_repo
    # PIP_NO_COMPILE: the hook environment's pip skips byte-compiling every file it installs (Python compiles what runs)
    env = {**os.environ, **GIT_ENV, "PRE_COMMIT_HOME": str(home), "PIP_NO_COMPILE": "1"}
    env.pop("SQLTRANSPORT_URL", None)
    command = [str(BIN / "pre-commit"), "try-repo", str(root), "--ref", commit, "--all-files", "--color", "never"]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pre_commit_hooks_pass_a_compiled_project_and_fail_an_uncompiled_change(initialised, hooks_repo):
    git(initialised, "init", "-q")
    git(initialised, "add", "-A")
    git(initialised, "commit", "-q", "-m", "initial")
    clean = try_repo(hooks_repo, initialised)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert re.search(r"sqltransport-schema validate\.+Passed", clean.stdout)
    assert re.search(r"sqltransport-schema compile --check\.+Passed", clean.stdout)
    add_queue(initialised, "audit")
    git(initialised, "add", "topology.yaml")  # staged, as a commit has it (pre-commit sets unstaged changes aside)
    changed = try_repo(hooks_repo, initialised)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert re.search(r"sqltransport-schema validate\.+Passed", changed.stdout)
    assert re.search(r"sqltransport-schema compile --check\.+Failed", changed.stdout)
    assert "topology.yaml holds 1 change(s) not compiled yet:" in changed.stdout
    assert 'create queue "audit" (transport 9.1)' in changed.stdout


# -- docs/ci.md's workflow files -----------------------------------------------------------
CI_DOC = REPO / "docs" / "ci.md"
YAML_BLOCK = re.compile(r"^```yaml\n(?P<body>.*?)^```$", re.DOTALL | re.MULTILINE)
INSTALL = re.compile(r"^pip install ")  # done by the test's environment (the package under test)


def documented_yaml() -> list:
    import yaml

    return [yaml.safe_load(match["body"]) for match in YAML_BLOCK.finditer(CI_DOC.read_text(encoding="utf-8"))]


def github_workflow() -> dict:
    (workflow,) = [doc for doc in documented_yaml() if "jobs" in doc]
    return workflow


def gitlab_job() -> dict:
    (job,) = [doc["schema"] for doc in documented_yaml() if "schema" in doc]
    return job


def run_commands(commands: list[str], sandbox: Path, env: dict) -> None:
    for command in commands:
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=sandbox, env=env, capture_output=True, text=True)
        assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"


@pytest.fixture
def sandbox(tmp_path) -> Path:
    """The repository's files as a clone has them: the project the workflows check out."""
    return copy_tracked(tmp_path / "checkout")


def job_env(variables: dict, pg_url: str, **more: str) -> dict:
    """The job's variables, the database being the test's throwaway one (the service's, in CI)."""
    env = {**os.environ, **{k: str(v) for k, v in variables.items()}, "PYTHONPATH": str(REPO), **more}
    env["PATH"] = os.pathsep.join([*warm.bin_dirs(), env["PATH"]])
    assert env["SQLTRANSPORT_URL"].startswith("postgresql://postgres:postgres@")  # the service's database
    env["SQLTRANSPORT_URL"] = pg_url.replace("postgresql+psycopg://", "postgresql://")
    return env


def test_the_pre_commit_config_names_the_hooks_this_repository_ships():
    import yaml

    shipped = {hook["id"] for hook in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}
    (config,) = [doc for doc in documented_yaml() if "repos" in doc]
    assert {hook["id"] for repo in config["repos"] for hook in repo["hooks"]} == shipped


@pytest.mark.postgresql
def test_the_github_workflow_runs(sandbox, pg_url, tmp_path):
    workflow = github_workflow()
    job = workflow["jobs"]["schema"]
    assert job["services"]["postgres"]["image"].startswith("postgres:")
    steps = job["steps"]
    commands = [step["run"] for step in steps if "run" in step and not INSTALL.match(step["run"])]
    assert [c.split()[0:2] for c in commands] == [
        ["sqltransport-schema", "validate"],
        ["sqltransport-schema", "compile"],
        ["alembic", "upgrade"],
        ["sqltransport-schema", "check"],
        ["sqltransport-schema", "script"],
    ]
    summary = tmp_path / "summary.md"
    run_commands(commands, sandbox, job_env(job["env"], pg_url, GITHUB_STEP_SUMMARY=str(summary), GITHUB_WORKSPACE=str(sandbox)))
    (upload,) = [step for step in steps if step.get("uses", "").startswith("actions/upload-artifact")]
    assert (sandbox / upload["with"]["path"]).read_text(encoding="utf-8").startswith("-- sqltransport-schema deployment script")
    text = summary.read_text(encoding="utf-8")
    for title in ("validate: valid", "compile: up-to-date", "check: in sync"):
        assert f"### sqltransport-schema {title}" in text


@pytest.mark.postgresql
def test_the_gitlab_job_runs(sandbox, pg_url):
    job = gitlab_job()
    assert any(service["name"].startswith("postgres:") for service in job["services"])
    commands = [command for command in job["script"] if not INSTALL.match(command)]
    assert len(commands) == 5
    run_commands(commands, sandbox, job_env(job["variables"], pg_url))
    for artifact in job["artifacts"]["paths"]:
        assert (sandbox / artifact).stat().st_size > 0
    assert (sandbox / "check.md").read_text(encoding="utf-8").startswith("### sqltransport-schema check: in sync")
