"""Worker processes that load the migrations once and take target after target.

Alembic's context is process-global, so each worker runs one target at a time; the runner hands
out one target per idle worker and waits on the workers' pipes and process sentinels together, so
a worker that dies (SIGKILL, out of memory) is noticed at once: its target is reported LOST and a
new worker takes its place. A worker whose runner died exits after its current target (its pipe is
closed), so a killed run never leaves workers taking new targets; an upgrade's worker on Linux is
killed with its runner at once (the parent-death signal), mid-target, as the runner was.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from .file import Target
from .work import LOST, Migrations, Result, Settings, first_line  # noqa: F401 - Settings: a spawned worker's source


def _context() -> Any:
    # fork: a worker starts in milliseconds with the runner's imports; spawn where there is no fork
    return multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")


def _die_with(runner: int) -> None:
    """Have the kernel kill this worker when its runner dies (Linux's parent-death signal), so a
    killed runner never leaves a worker migrating (or waiting on a lock) beside the run that
    follows; elsewhere the closed pipe ends it after its target. A runner already gone: exit now."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            return
    if os.getppid() != runner:
        os._exit(0)


def _serve(connection: Connection, source: Migrations | Settings, kind: str, runners: list[Connection], runner: int = 0) -> None:
    """A worker's life: the migrations (the runner's, inherited through fork; else loaded here once),
    then each target sent until the pipe closes. runners: the runner's ends of every worker's pipe,
    which a forked worker inherits and closes, so that each pipe closes when the runner dies.
    runner: the runner's pid, for an upgrade's worker, which dies with it (_die_with)."""
    if runner:
        _die_with(runner)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the runner's to handle
    for inherited in runners:
        inherited.close()
    problem = ""
    try:
        migrations: Migrations | None = source if isinstance(source, Migrations) else Migrations(source)
    except Exception as error:  # noqa: BLE001 - reported as each target's failure
        problem, migrations = (source.describe or first_line)(error), None  # type: ignore[union-attr]
    while True:
        try:
            target = connection.recv()
        except (EOFError, OSError):
            return
        if target is None:
            return
        if migrations is None:
            result = Result(target.name, "failed", error=problem)
        else:
            result = migrations.upgrade(target) if kind == "upgrade" else migrations.status(target)
        result.pid = os.getpid()
        try:
            connection.send(result)
        except (BrokenPipeError, OSError):
            return  # the runner is gone


@dataclass
class _Worker:
    process: Any
    connection: Connection
    target: Target | None = None


class Pool:
    """Up to `size` worker processes, started as they are needed and kept across stages."""

    def __init__(self, migrations: Migrations, kind: str = "upgrade"):
        self.migrations, self.kind = migrations, kind
        self.workers: list[_Worker] = []
        self.on_start: Callable[[Target, int], None] = lambda target, pid: None

    def _start(self) -> _Worker:
        context = _context()
        source = self.migrations if context.get_start_method() == "fork" else self.migrations.settings
        parent, child = context.Pipe()
        flush()
        forked = context.get_start_method() == "fork"
        runners = [parent, *(w.connection for w in self.workers)] if forked else []
        # an upgrade's workers die with the runner (a status read may start them from a server's
        # request thread, whose end the parent-death signal would take for the runner's)
        runner = os.getpid() if self.kind == "upgrade" else 0
        process = context.Process(target=_serve, args=(child, source, self.kind, runners, runner), daemon=True)
        process.start()
        child.close()
        worker = _Worker(process, parent)
        self.workers.append(worker)
        return worker

    def run(self, targets: list[Target], parallel: int, stop: Callable[[], bool]) -> Iterator[Result]:
        """Each target's result as it comes; no new target starts once stop() is true (those running finish)."""
        for _lane, result in self.run_lanes([(targets, parallel, stop)]):
            yield result

    def run_lanes(self, lanes: list[tuple[list[Target], int, Callable[[], bool]]]) -> Iterator[tuple[int, Result]]:
        """Several lists of targets at once (stages with no dependency between them), each with its own
        number of workers and its own stop(): (the lane's index, a result) as each comes."""
        if _context().get_start_method() == "fork":
            self.migrations.prepare([t for targets, _, _ in lanes for t in targets])  # a worker forked after inherits the drivers
        waiting = [list(reversed(targets)) for targets, _, _ in lanes]
        busy: dict[int, list[_Worker]] = {lane: [] for lane in range(len(lanes))}

        def more(lane: int) -> bool:
            return bool(waiting[lane]) and not lanes[lane][2]()

        while any(more(lane) or busy[lane] for lane in busy):
            for lane in busy:
                while more(lane) and len(busy[lane]) < lanes[lane][1]:
                    busy[lane].append(self._hand(waiting[lane].pop()))
            running = [(lane, w) for lane, workers in busy.items() for w in workers]
            ready = wait([w.connection for _, w in running] + [w.process.sentinel for _, w in running])
            for lane, worker in running:
                if worker.connection not in ready and worker.process.sentinel not in ready:
                    continue
                result = self._result(worker, ready)
                if result is not None:
                    busy[lane].remove(worker)
                    yield lane, result

    def _hand(self, target: Target) -> _Worker:
        """The target sent to an idle worker (a new one when none is idle)."""
        idle = [w for w in self.workers if w.target is None and w.process.is_alive()]
        worker = idle[0] if idle else self._start()
        worker.target = target
        worker.connection.send(target)
        self.on_start(target, worker.process.pid)
        return worker

    def _result(self, worker: _Worker, ready: list) -> Result | None:
        """The worker's result (LOST when it died), or None when it has not finished yet."""
        target = worker.target
        assert target is not None
        try:
            result = worker.connection.recv() if worker.connection.poll() else None
        except (EOFError, OSError):
            result = None
        if result is None:
            if worker.process.is_alive() and worker.process.sentinel not in ready:
                return None
            worker.process.join(1)
            code = worker.process.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
            result = Result(target.name, LOST, error=f"the worker process died ({how}) while it ran this target", pid=worker.process.pid)
            self.workers.remove(worker)
            worker.connection.close()
        worker.target = None
        return result

    def close(self) -> None:
        for worker in self.workers:
            try:
                worker.connection.send(None)
            except (BrokenPipeError, OSError):
                pass
        for worker in self.workers:
            worker.process.join(5)
            if worker.process.is_alive():
                worker.process.kill()
            worker.connection.close()
        self.workers = []

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def flush() -> None:
    """Before forking: what the runner printed is written once, not again by each worker."""
    sys.stdout.flush()
    sys.stderr.flush()
