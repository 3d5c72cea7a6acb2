"""Warm starts for the commands the tests run as processes.

Most of a command's cost in the suite was the interpreter importing SQLAlchemy and Alembic again
(~0.4 s of CPU, for a command that then works for a few milliseconds: about a third of the suite's
CPU). Each pytest process starts one server here that imports them once and forks a child per
command; the child takes the command's argv, environment, working folder and its stdin, stdout and
stderr (passed over a Unix socket), runs the real entry point and exits with its status, so the test
still meets a real process: its own exit code, streams, signals and interpreter shutdown. What it
does not meet is the cold import of the console script, which tests/test_package.py (installed
venvs), tests/test_cli.py (what building the parser imports) and .ci/run's README commands prove.

The commands reach the server through small client scripts named as the real ones
(`sqltransport-schema`, `alembic`, `python` for `-c CODE` only) in a folder of shims; each falls back
to exec'ing the real program when the server is not there (SQLTRANSPORT_TEST_COLD=1 starts none).
The server imports no module of this project: a child imports the package from its own PYTHONPATH,
as a fresh interpreter would (documentation blocks run a copy of the checkout).
"""

from __future__ import annotations

import array
import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys

SOCKET_VARIABLE = "SQLTRANSPORT_TEST_WARM"
COLD_VARIABLE = "SQLTRANSPORT_TEST_COLD"
# Imported once by the server; nothing a test shadows (pyodbc, prometheus_client) and nothing of this project.
PRELOAD = (
    "sqlalchemy",
    "sqlalchemy.dialects.postgresql",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.mysql",
    "sqlalchemy.dialects.mssql",
    "sqlalchemy.ext.compiler",
    "alembic.command",
    "alembic.config",
    "alembic.op",
    "alembic.autogenerate",
    "alembic.runtime.environment",
    "alembic.script",
    "yaml",
    "mako.template",
    "psycopg",
    "pymysql",
    "argparse",
    "logging.config",
    "runpy",
)
# What each shim name runs in the child: the console scripts' entry points (pyproject.toml, alembic's).
ENTRY_POINTS = {"sqltransport-schema": "sqltransport_schema.cli:main", "alembic": "alembic.config:main"}
SIGNALS_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
HEADER = struct.Struct("!I")


# -- the server ----------------------------------------------------------------------------------


def serve(path: str) -> dict | None:
    """Accept commands until stdin closes (the pytest process that started it ended). Returns the request
    in a forked child (which then runs it), None in the server when it stops."""
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them as the collector touches them
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin, selectors.EVENT_READ, "parent")
    running: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select():
            if key.data == "accept":
                connection, _ = listener.accept()
                try:
                    connection.settimeout(10)  # a client killed between connect and request must not stall the rest
                    request, fds = _receive(connection)
                    connection.settimeout(None)
                except (OSError, ValueError, struct.error):
                    connection.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    connection.close()
                    signal.set_wakeup_fd(-1)
                    os.close(wake_read)
                    os.close(wake_write)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    _take_streams(fds)
                    return request
                for fd in fds:
                    os.close(fd)
                running[pid] = connection
                selector.register(connection, selectors.EVENT_READ, pid)
            elif key.data == "reap":
                os.read(wake_read, 4096)
                _reap(running, selector)
            elif key.data == "parent":
                if not sys.stdin.buffer.read1(4096):
                    for pid in running:
                        _kill(pid, signal.SIGKILL)
                    return None
            else:  # a client forwards a signal, or went away (killed, timed out): so does its command
                pid = key.data
                try:
                    received = key.fileobj.recv(64)
                except OSError:
                    received = b""
                if not received:
                    selector.unregister(key.fileobj)
                    _kill(pid, signal.SIGKILL)
                for number in received:
                    _kill(pid, number)


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data, ancillary, _flags, _address = connection.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    (length,) = HEADER.unpack_from(data)
    while len(data) < HEADER.size + length:
        more = connection.recv(1 << 20)
        if not more:
            raise ConnectionError("the client went away mid-request")
        data += more
    return json.loads(data[HEADER.size : HEADER.size + length]), list(fds)


def _reap(running: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = running.pop(pid, None)
        if connection is None:
            continue
        try:
            selector.unregister(connection)
        except KeyError:
            pass
        try:
            connection.sendall(HEADER.pack(status))
        except OSError:
            pass
        connection.close()


def _kill(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def _take_streams(fds: list[int]) -> None:
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)


def run(request: dict) -> None:
    """In the forked child: become the command's process, as a fresh interpreter would be, and run it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for number in SIGNALS_FORWARDED:
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _reopen_streams()
    first = request["first_path_entry"]
    pythonpath = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:] = [first, *pythonpath, *BASE_PATH]
    sys.argv = list(request["argv"])
    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    if "code" in request:
        exec(compile(request["code"], "<string>", "exec"), main.__dict__)
        return
    module, function = ENTRY_POINTS[request["script"]].split(":")
    __import__(module)
    sys.exit(getattr(sys.modules[module], function)())


def _reopen_streams() -> None:
    """sys.stdin/stdout/stderr over the command's descriptors, buffered as a new interpreter's would be."""
    declared = os.environ.get("PYTHONIOENCODING", "")
    encoding, _, errors = declared.partition(":")
    encoding, errors = encoding or STREAM_ENCODING[0], errors or STREAM_ENCODING[1]
    sys.stdin = sys.__stdin__ = open(0, encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", encoding=encoding, errors=errors, closefd=False, buffering=1 if os.isatty(1) else -1)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", encoding=encoding, errors="backslashreplace", closefd=False, buffering=1)  # noqa: SIM115


# the server's own (its environment is the tests'): a fresh interpreter's choice for a pipe
STREAM_ENCODING = (sys.stdout.encoding if sys.stdout else "utf-8", sys.stdout.errors if sys.stdout else "strict")
# sys.path of a fresh interpreter, less the first entry (the script's folder, or '' for -c) and PYTHONPATH
BASE_PATH: list[str] = []


# -- the client (the shims' text) ------------------------------------------------------------------

SHIM = '''\
#!{python} -IS
# A warm start of `{name}` for the tests (tests/support/warm.py); without its server, the real one.
import array, json, os, signal, socket, struct, sys
REAL = {real!r}
def cold():
    os.execv(REAL[0], [*REAL, *sys.argv[1:]])
path = os.environ.get({variable!r})
request = {{"argv": [sys.argv[0], *sys.argv[1:]], "env": dict(os.environ), "cwd": os.getcwd()}}
{select}
if not path:
    cold()
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    client.connect(path)
except OSError:
    cold()
payload = json.dumps(request).encode()
client.sendmsg([struct.pack("!I", len(payload)) + payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
for number in {signals!r}:
    signal.signal(number, lambda number, _frame: client.send(bytes([number])))
status = b""
while len(status) < 4:
    more = client.recv(4 - len(status))
    if not more:
        sys.exit(255)
    status += more
status = struct.unpack("!I", status)[0]
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.waitstatus_to_exitcode(status))
'''
SELECT_SCRIPT = 'request.update(script={name!r}, first_path_entry=os.path.dirname(os.path.abspath(REAL[-1])))'
# `python -c CODE [ARG...]` only; any other use of the interpreter runs the real one.
SELECT_CODE = """\
if len(sys.argv) < 3 or sys.argv[1] != "-c":
    cold()
request.update(code=sys.argv[2], argv=["-c", *sys.argv[3:]], first_path_entry="")"""


def write_shims(folder, bin_dir) -> None:
    """The shims in folder, each exec'ing the real program of bin_dir (a virtual environment's bin) when cold."""
    from pathlib import Path

    folder, bin_dir = Path(folder), Path(bin_dir)
    folder.mkdir(parents=True, exist_ok=True)
    python = str(bin_dir / "python")
    common = {"python": sys.executable, "variable": SOCKET_VARIABLE, "signals": [int(s) for s in SIGNALS_FORWARDED]}
    for name in ENTRY_POINTS:
        real = [python, str(bin_dir / name)]
        text = SHIM.format(name=name, real=real, select=SELECT_SCRIPT.format(name=name), **common)
        _write_executable(folder / name, text)
    _write_executable(folder / "python", SHIM.format(name="python -c", real=[python], select=SELECT_CODE, **common))


def _write_executable(path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def virtual_environment(target, real, shims) -> None:
    """target: a virtual environment that is real's (symlinks) but for the shims' names, which start warm
    (`.venv/bin/alembic`, and `. .venv/bin/activate` puts target's bin on PATH)."""
    from pathlib import Path

    target, real = Path(target), Path(real)
    target.mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (target / entry.name).symlink_to(entry)
    (target / "bin").mkdir()
    for entry in (real / "bin").iterdir():
        mine = target / "bin" / entry.name
        if shims is not None and entry.name in ENTRY_POINTS:
            mine.symlink_to(Path(shims) / entry.name)
        elif entry.name.startswith("activate") and entry.is_file():
            mine.write_text(entry.read_text(encoding="utf-8").replace(str(real), str(target)), encoding="utf-8")
        else:
            mine.symlink_to(entry)


# -- the pytest process's side -----------------------------------------------------------------------


ACTIVE: Server | None = None  # this pytest process's, once started (start())


def start(config) -> None:
    """Start this process's server, if it runs tests (an xdist worker, or the one process of -n 0) and
    SQLTRANSPORT_TEST_COLD is not set; its socket goes into the environment every command inherits."""
    global ACTIVE
    import tempfile

    numprocesses = getattr(config.option, "numprocesses", None)
    if os.environ.get(COLD_VARIABLE) == "1" or (numprocesses and not os.environ.get("PYTEST_XDIST_WORKER")):
        return
    server = Server(tempfile.mkdtemp(prefix="sqlts-warm-"))
    if server.wait_ready():
        ACTIVE = server
        os.environ[SOCKET_VARIABLE] = server.socket
    else:
        server.close()


def stop() -> None:
    global ACTIVE
    import shutil

    if ACTIVE is not None:
        os.environ.pop(SOCKET_VARIABLE, None)
        ACTIVE.close()
        shutil.rmtree(ACTIVE.folder, ignore_errors=True)
        ACTIVE = None


def program(name: str) -> str:
    """The command to run as `name` (sqltransport-schema, alembic, or python for `-c CODE`): its warm
    shim while the server runs, else the real program of this interpreter's environment."""
    from pathlib import Path

    if ACTIVE is not None:
        return str(ACTIVE.bin / name)
    return sys.executable if name == "python" else str(Path(sys.executable).parent / name)


# What the tests' multiprocessing children import once, in multiprocessing's fork server (process_context).
PROCESS_PRELOAD = ("sqlalchemy", "psycopg", "alembic.script", "sqltransport_schema.runtime.pump", "sqltransport_schema.runtime.transport")


def process_context(*modules: str):
    """multiprocessing's context for the tests' child processes: each a fresh process forked from a
    server that imported PROCESS_PRELOAD (and modules) once, as spawn would but without each child
    importing SQLAlchemy again. The list is the server's, set before it first starts."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PROCESS_PRELOAD, *modules])
    return context


def bin_dirs() -> list[str]:
    """For PATH: the shims' folder first (while the server runs), then this interpreter's environment's bin."""
    from pathlib import Path

    return [*([str(ACTIVE.bin)] if ACTIVE is not None else []), str(Path(sys.executable).parent)]


class Server:
    """This pytest process's warm server and its shims (None of either when cold)."""

    def __init__(self, folder) -> None:
        import subprocess
        from pathlib import Path

        self.folder = Path(folder)
        self.bin = self.folder / "bin"
        self.socket = str(self.folder / "warm.sock")
        write_shims(self.bin, Path(sys.executable).parent)
        env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", SOCKET_VARIABLE)}
        self.log = open(self.folder / "warm.log", "wb")  # noqa: SIM115 - the server's own errors, for whoever debugs it
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.socket], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.log, env=env
        )

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        import time

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if os.path.exists(self.socket):
                return True
            time.sleep(0.01)
        return False

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except Exception:  # noqa: BLE001 - it is the test run's end either way
            self.process.kill()
        self.log.close()


if __name__ == "__main__":
    BASE_PATH[:] = sys.path[1:]  # started without PYTHONPATH: [0] is this file's folder, the rest a fresh interpreter's
    sys.path[:] = BASE_PATH
    request = serve(sys.argv[1])
    if request is not None:
        run(request)
