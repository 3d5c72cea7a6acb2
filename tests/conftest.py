"""Shared fixtures and collection hooks; what they build lives in tests/support/.

When a database server cannot be reached its tests are skipped locally, but fail under CI
(CI=true), so a green CI always means they ran (support/databases.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .support import suite_cost, warm
from .support.bytecode import compile_package
from .support.console import browser_missing, console_missing
from .support.databases import close_pools, mysql_database, pg_database, under_ci
from .support.locks import widening_project
from .support.projects import Project, new_project
from .support.runtime import deployed
from .support.spark import demanded, spark_missing, spark_session


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return new_project(tmp_path / "project")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queues.db'}"


@pytest.fixture
def pg_url() -> str:
    """A fresh, empty PostgreSQL database, dropped afterwards."""
    yield from pg_database()


@pytest.fixture
def pg_url2() -> str:
    """A second fresh PostgreSQL database, for what moves between two databases."""
    yield from pg_database()


@pytest.fixture
def mysql_url() -> str:
    """A fresh, empty MariaDB/MySQL database, dropped afterwards."""
    yield from mysql_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request) -> str:
    """Each test runs on real SQLite and on real PostgreSQL."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def saga_db(request) -> str:
    """Saga tests run on real SQLite, PostgreSQL and MariaDB."""
    return request.getfixturevalue({"sqlite": "sqlite_url", "postgresql": "pg_url", "mysql": "mysql_url"}[request.param])


@pytest.fixture
def transport(project, db_url, monkeypatch):
    """The runtime's transport on support.runtime.TOPOLOGY, deployed on SQLite and on PostgreSQL."""
    deployed_transport = deployed(project, db_url, monkeypatch)
    yield deployed_transport
    deployed_transport.engine.dispose()


@pytest.fixture
def widening(project, pg_url):
    """Sales and error deployed with serial Seq; the compiled next revision widens both to bigserial."""
    return widening_project(project, pg_url)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The shared Spark session (local[2]); tests using it are marked `spark` when collected."""
    yield from spark_session(tmp_path_factory)


def pytest_addoption(parser):
    suite_cost.addoption(parser)


def pytest_configure(config):
    """The package's bytecode, written once: every CLI and `alembic` subprocess a test starts (over a
    thousand) then reads it, where PYTHONDONTWRITEBYTECODE=1 made each compile 130 modules again.
    Each test's cost is counted against its budget (support/suite_cost.py). The commands tests run
    as processes start warm (support/warm.py)."""
    compile_package()
    suite_cost.configure(config)
    warm.start(config)


def pytest_unconfigure(config):
    warm.stop()
    close_pools()


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (addopts): a worker per core and one more, as part of a test's time is spent waiting on
    a database server or a subprocess, not on this process's core. PYTEST_XDIST_AUTO_NUM_WORKERS says
    otherwise, as it does to pytest-xdist's own count."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(chosen) if chosen else (os.cpu_count() or 1) + 1


def _skipped_on_purpose(item) -> bool:
    """Skipped by a mark (an illustrative doc block, one that installs from the network), not for want of a server."""
    if item.get_closest_marker("skip"):
        return True
    return any(mark.args and mark.args[0] is True for mark in item.iter_markers("skipif"))


DELIBERATE = pytest.StashKey[bool]()


def _needs_spark(item) -> bool:
    """Uses the spark fixture, is marked spark (a doc block), or asks for the session through a `with_spark` parameter."""
    callspec = getattr(item, "callspec", None)
    with_spark = callspec is not None and callspec.params.get("with_spark") is True
    return with_spark or "spark" in getattr(item, "fixturenames", ()) or item.get_closest_marker("spark") is not None


def pytest_collection_modifyitems(config, items):
    spark_problem = spark_missing()
    console_problem, browser_problem = console_missing(), browser_missing()
    recorded = suite_cost.load_budget()["tests"]
    functions = suite_cost.by_function(recorded)
    for item in items:
        if suite_cost.costly(recorded, item.nodeid, functions):  # starts a process or creates a database: out of -m "not slow"
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("console") and not demanded("console"):
            problem = console_problem or (browser_problem if "browser" in getattr(item, "fixturenames", ()) else None)
            if problem is not None:
                item.add_marker(pytest.mark.skip(reason=problem))
        if _needs_spark(item):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.slow)
            if spark_problem is not None and not (demanded("spark") or (under_ci() and "Java" in spark_problem)):
                item.add_marker(pytest.mark.skip(reason=spark_problem))
        if _skipped_on_purpose(item):
            item.stash[DELIBERATE] = True
            continue
        callspec = getattr(item, "callspec", None)
        on_db_url = callspec is not None and callspec.params.get("db_url") == "postgresql"
        if "pg_url" in getattr(item, "fixturenames", ()) or on_db_url:
            item.add_marker(pytest.mark.postgresql)
        on_saga_db = callspec is not None and callspec.params.get("saga_db")
        if on_saga_db == "postgresql":
            item.add_marker(pytest.mark.postgresql)
        if "mysql_url" in getattr(item, "fixturenames", ()) or on_saga_db == "mysql":
            item.add_marker(pytest.mark.mysql)
    _longest_files_first(items)


def _longest_files_first(items) -> None:
    """The files the budget records as longest run first (a file's tests keep their order): the
    workers take the long tests early and end on short ones, instead of one worker finishing a long
    test alone while the others wait (every worker collects the same order, as pytest-xdist needs)."""
    seconds = suite_cost.load_budget().get("files", {})
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))


# Under CI a skipped PostgreSQL or MariaDB test is a failure: green must mean it ran. Decided where the
# test runs (a pytest-xdist worker or the one process), from the item, so the rule holds either way.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and under_ci()) or item.stash.get(DELIBERATE, False):
        return
    if item.get_closest_marker("postgresql") or item.get_closest_marker("mysql"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI: a PostgreSQL or MariaDB test must run, not skip ({reason})"
