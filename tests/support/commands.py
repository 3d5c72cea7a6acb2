"""The project's commands as a user runs them: the sqltransport-schema script and `alembic` in subprocesses, the CLI in-process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sqltransport_schema import cli

from .projects import REPO
from .warm import program

CLOSED_PORT = "postgresql://postgres@127.0.0.1:1/nowhere"


def run(cwd: Path, *args: str, shadow: Path | None = None) -> subprocess.CompletedProcess:
    path = [str(shadow)] if shadow else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(REPO)])}
    env.pop("SQLTRANSPORT_URL", None)
    return subprocess.run(
        [program("sqltransport-schema"), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=120
    )


def alembic(project, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SQLTRANSPORT_URL", None)
    return subprocess.run([program("alembic"), *args], cwd=project.root, env=env, capture_output=True, text=True, check=False, timeout=300)


def failed_line(result: subprocess.CompletedProcess) -> str:
    """The one FAILED line; no traceback."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    failed = [line for line in (result.stderr + result.stdout).splitlines() if line.startswith("FAILED: ")]
    assert len(failed) == 1, result.stderr + result.stdout
    return failed[0]


def adopt_cli(project, url, capsys, *extra):
    capsys.readouterr()
    code = cli.main(["adopt", "--url", url, "-c", str(project.ini), "--format", "json", *extra])
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else None)


def check_cli(project, url, capsys):
    capsys.readouterr()
    return cli.main(["check", "--url", url, "-c", str(project.ini)])
