"""The suite's cost guard (support/suite_cost.py) and the quick loop CONTRIBUTING.md gives: a test that
starts a process it has no budget for fails, a recorded budget lets it pass, and the quick loop
selects no test that starts a process or creates a database."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from .support.projects import REPO
from .support.suite_cost import allowed, costly, load_budget, recorded_for

CONFTEST = """\
from tests.support import suite_cost

def pytest_addoption(parser):
    suite_cost.addoption(parser)

def pytest_configure(config):
    suite_cost.configure(config)
"""
SPAWNS = """\
import subprocess

def test_spawns():
    subprocess.run(["true"], check=True)
    subprocess.run(["true"], check=True)

def test_spawns_nothing():
    assert sum(range(3)) == 3
"""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(folder)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "--suite-budget", "budget.json", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_process_without_a_budget_fails_and_a_recorded_budget_passes(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_spawn.py").write_text(SPAWNS)

    unbudgeted = _pytest(tmp_path)
    assert unbudgeted.returncode == 1, unbudgeted.stdout
    assert "suite cost: test_spawn.py::test_spawns started 2 processes (recorded 0)" in unbudgeted.stdout
    assert "2 passed, 1 error" in unbudgeted.stdout  # the calls pass; the teardown of the one that spawns fails

    recorded = _pytest(tmp_path, "--record-suite-budget")
    assert recorded.returncode == 0, recorded.stdout
    budget = json.loads((tmp_path / "budget.json").read_text())
    assert budget["tests"] == {"test_spawn.py::test_spawns": {"processes": 2}}
    assert set(budget["files"]) == {"test_spawn.py"}

    again = _pytest(tmp_path, "--suite-cost-json", "cost.json")
    assert again.returncode == 0, again.stdout
    cost = json.loads((tmp_path / "cost.json").read_text())
    assert cost["files"]["test_spawn.py"]["processes"] == 2 and cost["files"]["test_spawn.py"]["databases"] == 0

    (tmp_path / "test_spawn.py").write_text(SPAWNS.replace("    subprocess.run", "    for _ in range(2):\n        subprocess.run"))
    doubled = _pytest(tmp_path)  # 4 processes where 2 were recorded: over the half as much again allowed
    assert doubled.returncode == 1 and "started 4 processes (recorded 2)" in doubled.stdout


def test_a_record_allows_half_as_much_again_and_none_allows_none():
    assert [allowed(n) for n in (0, 1, 2, 3, 10)] == [0, 1, 3, 4, 15]


def test_a_parameter_not_recorded_is_held_to_its_functions_most():
    tests = {"t.py::f[a:10]": {"processes": 2}, "t.py::f[a:20]": {"processes": 5, "databases": 1}, "t.py::f[sqlite]": {}}
    assert recorded_for(tests, "t.py::f[a:12]") == {"processes": 5, "databases": 1}  # the block moved two lines
    assert recorded_for(tests, "t.py::f[sqlite]") == {} and not costly(tests, "t.py::f[sqlite]")
    assert costly(tests, "t.py::f[a:12]") and recorded_for(tests, "t.py::g") is None and not costly(tests, "t.py::g")


def test_the_quick_loop_selects_no_test_that_starts_a_process_or_creates_a_database(request):
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    command = re.search(r"```sh quick-loop\n(.*?)\n```", text, re.DOTALL).group(1)
    assert command == '.venv/bin/python -m pytest -m "not slow"'
    items = request.session.items  # this run's collection, markers added: what -m "not slow" selects from
    if len({item.nodeid.split("::")[0] for item in items}) > 70:  # the whole suite (or the quick loop) is collected here
        selected = {item.nodeid for item in items if item.get_closest_marker("slow") is None}
    else:  # run alone: collect as written, with the interpreter running this test, in one process
        selected = _collected_quick_loop()
    recorded = load_budget()["tests"]
    assert not [nodeid for nodeid in selected if costly(recorded, nodeid)]
    modules = {nodeid.split("::")[0] for nodeid in selected}
    assert len(selected) > 1500 and len(modules) > 70, (len(selected), len(modules))


def _collected_quick_loop() -> set[str]:
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "not slow", "-n", "0", "-p", "no:cacheprovider", "--collect-only", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stdout[-2000:]
    return {line for line in collected.stdout.splitlines() if "::" in line}
