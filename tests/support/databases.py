"""Real servers for the tests: throwaway databases, and the CI rule that a missing server fails.

PostgreSQL tests use the server at 127.0.0.1:5432, MariaDB tests the server at
127.0.0.1:3306 (root, no password), and a fresh database each. When a server cannot be
reached its tests are skipped locally, but fail under CI (CI=true), so a green CI always
means they ran.
"""

from __future__ import annotations

import os
import uuid

import pytest

from . import suite_cost

PG_ADMIN_URL = os.environ.get("SQLTRANSPORT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
MYSQL_ADMIN_URL = os.environ.get("SQLTRANSPORT_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306/test")


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def admin(url: str, server: str):
    """An AUTOCOMMIT engine on the server's admin database; skipped locally, failed under CI, when unreachable."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure to reach the server
        engine.dispose()
        if under_ci():
            pytest.fail(f"{server} is required under CI and could not be reached: {exc}")
        pytest.skip(f"{server} not reachable: {exc}")
    return engine


def throwaway_database(admin_url: str, server: str, create: str, drop: str):
    """Yield the URL of a fresh database (created with `create`, dropped with `drop`; {name} filled in)."""
    engine = admin(admin_url, server)
    name = f"sqlts_test_{uuid.uuid4().hex[:12]}"
    with engine.connect() as connection:
        connection.exec_driver_sql(create.format(name=name))
    suite_cost.count("databases")
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with engine.connect() as connection:
            connection.exec_driver_sql(drop.format(name=name))
        engine.dispose()


def pg_database():
    return throwaway_database(
        PG_ADMIN_URL, "PostgreSQL at 127.0.0.1:5432", 'CREATE DATABASE "{name}"', 'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    )


def pg_databases(count: int):
    """Yield the URLs of `count` fresh PostgreSQL databases (a shared one and tenant ones), dropped afterwards."""
    import contextlib

    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(count):
            made = pg_database()
            urls.append(next(made))
            stack.callback(lambda made=made: next(made, None))
        yield urls


def mysql_database():
    return throwaway_database(
        MYSQL_ADMIN_URL, "MariaDB at 127.0.0.1:3306", "CREATE DATABASE `{name}` CHARACTER SET utf8mb4", "DROP DATABASE IF EXISTS `{name}`"
    )


def connect(url: str):
    from sqltransport_schema.db import make_engine, normalise_url

    return make_engine(normalise_url(url))
