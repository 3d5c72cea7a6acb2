"""The tests' warm starts (support/warm.py) behave as the cold programs do: what a command sees
(argv, environment, folder, sys.path, streams) and what its caller sees (exit code, output, a
signal's death), and each shim runs the real program when no server is there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .support import warm

# What a command sees of its process, printed as one line per fact.
INTROSPECT = """\
import os, sys
print(sys.argv[1:])
print(os.getcwd())
print(os.environ.get("WARM_PROBE"))
print(sys.path[0] == "", os.environ.get("PYTHONPATH", "-") in sys.path)
print(sys.stdin.read().upper())
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""

pytestmark = pytest.mark.skipif(warm.ACTIVE is None, reason="the warm server is off (SQLTRANSPORT_TEST_COLD=1)")


def _run(program: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, **env}
    return subprocess.run(program, cwd=tmp_path, env=environ, input="piped in", capture_output=True, text=True, timeout=60, check=False)


def test_python_code_sees_what_a_fresh_interpreter_sees(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    args = ["-c", INTROSPECT, "3", "two words"]
    cold = _run([sys.executable, *args], tmp_path, WARM_PROBE="é", PYTHONPATH=str(shadow))
    warmed = _run([warm.program("python"), *args], tmp_path, WARM_PROBE="é", PYTHONPATH=str(shadow))
    assert (warmed.returncode, warmed.stdout, warmed.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert cold.returncode == 3 and "['3', 'two words']" in cold.stdout and "PIPED IN" in cold.stdout


def test_a_module_shadowed_on_pythonpath_is_the_shadow(tmp_path):
    """A module a test shadows (a missing driver) is imported from PYTHONPATH, not from the server."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pyodbc.py").write_text('raise ImportError("libodbc.so.2: cannot open shared object file")\n')
    args = ["-c", "import sqlalchemy, pyodbc"]
    cold = _run([sys.executable, *args], tmp_path, PYTHONPATH=str(shadow))
    warmed = _run([warm.program("python"), *args], tmp_path, PYTHONPATH=str(shadow))
    assert (warmed.returncode, warmed.stdout) == (cold.returncode, cold.stdout) == (1, "")
    assert cold.stderr.endswith("ImportError: libodbc.so.2: cannot open shared object file\n")
    assert warmed.stderr.endswith("ImportError: libodbc.so.2: cannot open shared object file\n")


def test_an_uncaught_exception_is_a_traceback_and_exit_1(tmp_path):
    warmed = _run([warm.program("python"), "-c", "raise ValueError('boom')"], tmp_path)
    assert warmed.returncode == 1 and warmed.stderr.startswith("Traceback") and "ValueError: boom" in warmed.stderr


def test_a_signal_reaches_the_command_and_its_death_the_caller(tmp_path):
    ready = tmp_path / "ready"
    code = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    process = subprocess.Popen([warm.program("python"), "-c", code], cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM


def test_a_killed_client_takes_its_command_with_it(tmp_path):
    """subprocess.run's timeout SIGKILLs the shim: its command must not run on."""
    pid_file = tmp_path / "pid"
    code = f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(60)"
    process = subprocess.Popen([warm.program("python"), "-c", code], cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    process.kill()
    process.wait(timeout=30)
    command = int(pid_file.read_text())
    while time.monotonic() < deadline:
        try:
            os.kill(command, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    pytest.fail(f"the command {command} ran on after its client was killed")


def test_without_the_server_each_shim_runs_the_real_program(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != warm.SOCKET_VARIABLE}
    for program, args in (("sqltransport-schema", ["--version"]), ("python", ["-c", "import sys; print(sys.executable)"])):
        result = subprocess.run([warm.program(program), *args], env=env, capture_output=True, text=True, timeout=60, check=True)
        assert result.stdout.strip() in (f"sqltransport-schema {_version()}", sys.executable)


def _version() -> str:
    from sqltransport_schema import __version__

    return __version__
