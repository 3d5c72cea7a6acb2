"""The PostgreSQL transport's statements and DDL stay token-equal to upstream's (tests/conformance/check.py,
against the digests of the releases it lists): a drift fails CI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECK = REPO / "tests" / "conformance" / "check.py"


def tool(name: str) -> str:
    """The project's console script beside this interpreter (the installed project), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed beside {sys.executable} nor on PATH: pip install -e .")
    return found


def test_postgresql_statements_and_ddl_are_token_equal_to_upstream():
    done = subprocess.run(
        [sys.executable, str(CHECK), "--engine", "postgresql",
         "--sqltransport-schema", tool("sqltransport-schema"), "--alembic", tool("alembic")],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("upstream statements token-equal")
