"""The command line itself: --debug wherever it is written keeps the exit codes, --version."""

from __future__ import annotations

import pytest

from sqltransport_schema import __version__

from .test_user_errors import CLOSED_PORT, run


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
