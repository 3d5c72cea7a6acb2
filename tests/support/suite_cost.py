"""What each test costs the suite, counted, and the budget it is held to (tests/suite-budget.json).

A test's wall time on a shared 2-core machine says little, so the guard counts the two things that
made the suite slow and that do not vary from run to run:

- `processes`: processes the test starts (the interpreter's audit events "subprocess.Popen" and
  "os.fork"; multiprocessing's spawn raises neither and goes uncounted). A Python
  process costs 0.1-0.4 s of CPU before it does any work, importing what the test process has already.
- `databases`: PostgreSQL and MariaDB databases it creates (support/databases.py counts each one).

What a module- or session-scoped fixture's setup starts counts against no test: it is shared, which is
what the guard wants more of. A parameter that is not recorded (a documentation block's id holds its
line) is held to the most its function's recorded parameters count.

Each test's counts travel on its report (`user_properties`), so they reach pytest-xdist's controller
as they are. A test that counts more than its budget allows fails at teardown, naming what to do: make
it cheaper, or record the new budget (`pytest --record-suite-budget`) so the raise is reviewed in the
diff. A test absent from the budget may start nothing; a recorded count allows half as much again
(`allowed`), as a test that waits for a condition may poll once more on a loaded machine. Seconds are recorded per file too and printed
(a `suite-cost:` line, and `--suite-cost-json FILE` for CI) when a file takes more than twice its
recorded time; time never fails a run, as it depends on what else the machine does.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

BUDGET = Path(__file__).resolve().parents[1] / "suite-budget.json"
COUNTED = ("processes", "databases")
# A file's time is reported once it passes SLOWER x its recorded seconds + GRACE_S.
SLOWER, GRACE_S = 2.0, 5.0

# Not "os.posix_spawn": Python 3.13's subprocess raises it too, under its own "subprocess.Popen".
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.fork"})

_counts = dict.fromkeys(COUNTED, 0)


def count(what: str, n: int = 1) -> None:
    """Add to the running test's count (support/databases.py calls it for each database it creates)."""
    _counts[what] += n


def _audit(event: str, _args: tuple) -> None:
    if event in PROCESS_EVENTS:
        _counts["processes"] += 1


def allowed(recorded: int) -> int:
    """What a test may count: its record and half as much again (none when it recorded none)."""
    return recorded + recorded // 2


def function_of(nodeid: str) -> str:
    """The test function a parametrized node belongs to (`f[sqlite]` -> `f`)."""
    return nodeid.split("[", 1)[0]


def by_function(tests: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Each recorded function's most of each count over its parameters (built once per budget: a lookup
    per test scanned the whole budget, 0.5 s of every pytest process's collection)."""
    most: dict[str, dict[str, int]] = {}
    for nodeid, counted in tests.items():
        mine = most.setdefault(function_of(nodeid), dict.fromkeys(COUNTED, 0))
        for what in COUNTED:
            mine[what] = max(mine[what], counted.get(what, 0))
    return most


def recorded_for(
    tests: dict[str, dict[str, int]], nodeid: str, functions: dict[str, dict[str, int]] | None = None
) -> dict[str, int] | None:
    """A test's record; for a parameter not recorded (a documentation block's id holds its line, which
    moves when the text above it changes), the most any recorded parameter of its function counts
    (`functions`: by_function(tests), when the caller looks up many). None when neither is recorded."""
    if nodeid in tests:
        return tests[nodeid]
    return (functions if functions is not None else by_function(tests)).get(function_of(nodeid))


def costly(tests: dict[str, dict[str, int]], nodeid: str, functions: dict[str, dict[str, int]] | None = None) -> bool:
    """Starts a process or creates a database, by its record (or its function's, for a new parameter)."""
    recorded = recorded_for(tests, nodeid, functions)
    return recorded is not None and any(recorded.get(what, 0) for what in COUNTED)


def load_budget(path: Path = BUDGET) -> dict:
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return {"tests": {}, "files": {}}


def addoption(parser) -> None:
    group = parser.getgroup("suite cost")
    group.addoption(
        "--record-suite-budget",
        action="store_true",
        help="raise tests/suite-budget.json to what this run counted (each test's counts; each file's seconds)",
    )
    group.addoption("--suite-cost-json", metavar="FILE", help="write each file's counts and seconds, and what went over, as JSON")
    group.addoption("--suite-budget", metavar="FILE", type=Path, default=BUDGET, help="the budget file (default tests/suite-budget.json)")


class SuiteCost:
    """The plugin: counts in the process that runs the tests, totals where the reports arrive."""

    def __init__(self, config) -> None:
        self.config = config
        self.path = config.getoption("suite_budget")
        self.budget = load_budget(self.path)
        self.functions: dict[str, dict[str, int]] | None = None  # by_function(budget), at the first teardown
        self.recording = config.getoption("record_suite_budget")
        self.tests: dict[str, dict[str, int]] = {}
        self.seconds: dict[str, float] = defaultdict(float)
        self.started = 0.0

    # -- where the test runs -----------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        for what in COUNTED:
            _counts[what] = 0
        self.started = time.perf_counter()
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        """A module- or session-scoped fixture is shared: what its setup starts counts against no test
        (under xdist, which test sets it up first varies from run to run)."""
        before = dict(_counts)
        yield
        if fixturedef.scope != "function":
            for what in COUNTED:
                _counts[what] = before[what]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if call.when != "teardown":
            return
        report = outcome.get_result()
        counted = {what: _counts[what] for what in COUNTED}
        report.user_properties.append(("suite_cost", {**counted, "seconds": time.perf_counter() - self.started}))
        if self.recording or not report.passed:
            return
        if self.functions is None:
            self.functions = by_function(self.budget["tests"])
        recorded = recorded_for(self.budget["tests"], item.nodeid, self.functions)
        recorded = recorded or {}
        over = [f"{counted[w]} {w} (recorded {recorded.get(w, 0)})" for w in COUNTED if counted[w] > allowed(recorded.get(w, 0))]
        if over:
            report.outcome = "failed"
            report.longrepr = (
                f"suite cost: {item.nodeid} started {', '.join(over)}: make it cheaper (the CLI in-process, a fixture "
                "shared where tests only read), or raise its budget with `pytest --record-suite-budget` (tests/suite-budget.json)"
            )

    # -- where the reports arrive (the controller under xdist, else the same process) -----
    def pytest_runtest_logreport(self, report):
        for name, value in report.user_properties:
            if name == "suite_cost":
                self.tests[report.nodeid] = {what: value[what] for what in COUNTED}
                self.seconds[report.nodeid.split("::")[0]] += value["seconds"]

    def _files_over_time(self) -> dict[str, dict[str, float]]:
        recorded = self.budget.get("files", {})
        return {
            path: {"seconds": round(seconds, 1), "recorded": recorded[path]}
            for path, seconds in sorted(self.seconds.items())
            if path in recorded and seconds > SLOWER * recorded[path] + GRACE_S
        }

    def pytest_terminal_summary(self, terminalreporter):
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            return
        slow = self._files_over_time()
        for path, found in slow.items():
            terminalreporter.write_line(f"suite-cost: {path} took {found['seconds']} s, recorded {found['recorded']} s")
        if self.recording:
            self._record()
            terminalreporter.write_line(f"suite-cost: recorded {len(self.tests)} test(s) in {self.path}")
        target = self.config.getoption("suite_cost_json")
        if target:
            files: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(COUNTED, 0))
            for nodeid, counted in self.tests.items():
                for what in COUNTED:
                    files[nodeid.split("::")[0]][what] += counted[what]
            for path, seconds in self.seconds.items():
                files[path]["seconds"] = round(seconds, 2)
            Path(target).write_text(json.dumps({"files": files, "slower_than_recorded": slow}, indent=1, sort_keys=True) + "\n")

    def _record(self) -> None:
        """Raise, never lower, what is recorded: runs with other extras installed count other tests."""
        budget = load_budget(self.path)
        tests = budget.setdefault("tests", {})
        for nodeid, counted in self.tests.items():
            kept = {what: max(counted[what], tests.get(nodeid, {}).get(what, 0)) for what in COUNTED}
            tests[nodeid] = {what: n for what, n in kept.items() if n}
        # A test that starts nothing is kept (as {}) only beside a costly parameter of its function, so
        # that its record, not its function's, decides it (the quick loop keeps `f[sqlite]` of a
        # costly `f[postgresql]`).
        costly_functions = {function_of(nodeid) for nodeid, counted in tests.items() if counted}
        tests = {nodeid: counted for nodeid, counted in tests.items() if counted or function_of(nodeid) in costly_functions}
        files = budget.setdefault("files", {})
        for path, seconds in self.seconds.items():
            files[path] = round(max(seconds, files.get(path, 0.0)), 1)
        budget["tests"] = dict(sorted(tests.items()))
        budget["files"] = dict(sorted(files.items()))
        self.path.write_text(json.dumps(budget, indent=1) + "\n", encoding="utf-8")


def configure(config) -> None:
    if not _hooked:  # an audit hook cannot be removed: one per process, whatever configures it
        sys.addaudithook(_audit)
        _hooked.append(True)
    config.pluginmanager.register(SuiteCost(config), "suite_cost")


_hooked: list[bool] = []
