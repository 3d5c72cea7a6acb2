"""Shared fixtures: throwaway migration projects and real databases.

PostgreSQL tests use the server at 127.0.0.1:5432, MariaDB tests the server at
127.0.0.1:3306 (root, no password), and a fresh database each. When a server cannot be
reached its tests are skipped locally, but fail under CI (CI=true), so a green CI always
means they ran.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config

from sqltransport_schema import cli

from .pipeline_support import demanded, spark, spark_missing  # noqa: F401  (spark: the shared Spark session fixture)

REPO = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get("SQLTRANSPORT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
MYSQL_ADMIN_URL = os.environ.get("SQLTRANSPORT_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306/test")


@dataclass
class Project:
    """A migration project in a temporary folder: alembic.ini, migrations/, topology.yaml."""

    root: Path

    @property
    def ini(self) -> Path:
        return self.root / "alembic.ini"

    @property
    def topology(self) -> Path:
        return self.root / "topology.yaml"

    @property
    def versions(self) -> Path:
        return self.root / "migrations" / "versions"

    def write_topology(self, text: str) -> None:
        self.topology.write_text(text, encoding="utf-8")

    def compile(self, message: str = "change", *extra: str) -> int:
        return cli.main(["compile", "-m", message, "-c", str(self.ini), "--topology", str(self.topology), *extra])

    def revisions(self) -> list[Path]:
        return sorted(self.versions.glob("*.py"), key=lambda p: p.stat().st_mtime_ns)

    def config(self, url: str, *x: str, stdout=None) -> Config:
        cfg = Config(str(self.ini), stdout=stdout) if stdout is not None else Config(str(self.ini))
        cfg.cmd_opts = argparse.Namespace(x=[f"url={url}", *x])
        cfg.attributes["configure_logging"] = False
        return cfg

    def upgrade(self, url: str, revision: str = "head", *x: str) -> None:
        command.upgrade(self.config(url, *x), revision)

    def downgrade(self, url: str, revision: str = "base", *x: str) -> None:
        command.downgrade(self.config(url, *x), revision)

    def offline(self, url: str, revision: str = "head") -> str:
        buffer = io.StringIO()
        cfg = self.config(url, stdout=buffer)
        cfg.output_buffer = buffer
        command.upgrade(cfg, revision, sql=True)
        return buffer.getvalue()

    def head(self) -> str | None:
        from alembic.script import ScriptDirectory

        return ScriptDirectory.from_config(Config(str(self.ini))).get_current_head()


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    (root / "migrations" / "versions").mkdir(parents=True)
    shutil.copy(REPO / "alembic.ini", root / "alembic.ini")
    for name in ("env.py", "script.py.mako"):
        shutil.copy(REPO / "migrations" / name, root / "migrations" / name)
    return Project(root)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queues.db'}"


def _admin(url: str, server: str):
    """An AUTOCOMMIT engine on the server's admin database; skipped locally, failed under CI, when unreachable."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure to reach the server
        engine.dispose()
        if _under_ci():
            pytest.fail(f"{server} is required under CI and could not be reached: {exc}")
        pytest.skip(f"{server} not reachable: {exc}")
    return engine


def _pg_admin():
    return _admin(PG_ADMIN_URL, "PostgreSQL at 127.0.0.1:5432")


def _throwaway_database(admin_url: str, server: str, create: str, drop: str):
    """Yield the URL of a fresh database (created with `create`, dropped with `drop`; {name} filled in)."""
    admin = _admin(admin_url, server)
    name = f"sqlts_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.exec_driver_sql(create.format(name=name))
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(drop.format(name=name))
        admin.dispose()


def _pg_database():
    return _throwaway_database(
        PG_ADMIN_URL, "PostgreSQL at 127.0.0.1:5432", 'CREATE DATABASE "{name}"', 'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    )


@pytest.fixture
def pg_url() -> str:
    """A fresh, empty PostgreSQL database, dropped afterwards."""
    yield from _pg_database()


@pytest.fixture
def pg_url2() -> str:
    """A second fresh PostgreSQL database, for what moves between two databases."""
    yield from _pg_database()


@pytest.fixture
def mysql_url() -> str:
    """A fresh, empty MariaDB/MySQL database, dropped afterwards."""
    yield from _throwaway_database(
        MYSQL_ADMIN_URL, "MariaDB at 127.0.0.1:3306", "CREATE DATABASE `{name}` CHARACTER SET utf8mb4", "DROP DATABASE IF EXISTS `{name}`"
    )


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


def connect(url: str):
    from sqltransport_schema.db import make_engine, normalise_url

    return make_engine(normalise_url(url))


def _skipped_on_purpose(item) -> bool:
    """Skipped by a mark (an illustrative doc block, one that installs from the network), not for want of a server."""
    if item.get_closest_marker("skip"):
        return True
    return any(mark.args and mark.args[0] is True for mark in item.iter_markers("skipif"))


_deliberate: set[str] = set()


def _needs_spark(item) -> bool:
    """Uses the spark fixture, is marked spark (a doc block), or asks for the session through a `with_spark` parameter."""
    callspec = getattr(item, "callspec", None)
    with_spark = callspec is not None and callspec.params.get("with_spark") is True
    return with_spark or "spark" in getattr(item, "fixturenames", ()) or item.get_closest_marker("spark") is not None


def pytest_collection_modifyitems(config, items):
    spark_problem = spark_missing()
    for item in items:
        if _needs_spark(item):
            item.add_marker(pytest.mark.spark)
            if spark_problem is not None and not (demanded("spark") or (_under_ci() and "Java" in spark_problem)):
                item.add_marker(pytest.mark.skip(reason=spark_problem))
        if _skipped_on_purpose(item):
            _deliberate.add(item.nodeid)
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


# Under CI a skipped PostgreSQL or MariaDB test is a failure: green must mean it ran.
_skipped_postgresql: list[str] = []


def _under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_runtest_logreport(report):
    if report.skipped and report.nodeid not in _deliberate and ("postgresql" in report.keywords or "mysql" in report.keywords):
        _skipped_postgresql.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if _under_ci() and _skipped_postgresql:
        print(f"\nCI: {len(_skipped_postgresql)} PostgreSQL or MariaDB test(s) were skipped; failing the run:")
        for nodeid in _skipped_postgresql:
            print(f"  {nodeid}")
        session.exitstatus = 1
