"""The tests' PostgreSQL databases come from a pool (support/databases.py): a database a test is done
with is reset and handed to the next test only when it is as CREATE DATABASE makes it; anything a
reset cannot prove fresh is dropped."""

from __future__ import annotations

import psycopg
import pytest

from .support.databases import PG_FRESH, POSTGRES_POOL, pg_database

pytestmark = pytest.mark.postgresql


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def taken_and_given_back(work) -> str:
    """Take a database, run work(session) in it, give it back; the name it waits under in the pool."""
    databases = pg_database()
    url = next(databases)
    with psycopg.connect(libpq(url), autocommit=True) as session:
        work(session)
    before = list(POSTGRES_POOL.free)
    next(databases, None)
    added = [name for name in POSTGRES_POOL.free if name not in before]
    return added[0] if added else ""


def test_a_database_a_test_filled_comes_back_as_created():
    def fill(session):
        session.execute("CREATE SCHEMA sales")
        session.execute('CREATE TABLE sales."Orders" (id bigserial PRIMARY KEY, body text)')
        session.execute("CREATE TABLE public.error (id uuid PRIMARY KEY)")
        session.execute("CREATE FUNCTION public.f() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        session.execute("CREATE TYPE public.mood AS ENUM ('ok')")
        session.execute("REVOKE USAGE ON SCHEMA public FROM PUBLIC")

    pooled = taken_and_given_back(fill)
    assert pooled, "the reset database was not pooled"
    databases = pg_database()
    url = next(databases)  # the pooled one, renamed for this test
    try:
        with psycopg.connect(libpq(url), autocommit=True) as session:
            assert session.execute(PG_FRESH).fetchone()[0] is True
            assert session.execute("SELECT count(*) FROM pg_class WHERE oid >= 16384").fetchone()[0] == 0
            assert session.execute("SELECT has_schema_privilege('public', 'public', 'USAGE')").fetchone()[0] is True
    finally:
        next(databases, None)


def test_what_a_reset_cannot_undo_is_dropped():
    def set_a_setting(session):
        session.execute("CREATE TABLE t (id int)")
        name = session.execute("SELECT current_database()").fetchone()[0]
        session.execute(f'ALTER DATABASE "{name}" SET work_mem = \'8MB\'')

    assert taken_and_given_back(set_a_setting) == ""


def test_a_session_left_open_does_not_reach_the_pooled_database():
    """A test's stray session is ended and the database renamed: the old name reaches nothing."""
    stray = []

    def leave_open(session):
        stray.append(session.info.dbname)
        stray.append(psycopg.connect(libpq(session.info.dsn) if "://" in session.info.dsn else session.info.dsn, autocommit=True))

    pooled = taken_and_given_back(leave_open)
    name, session = stray
    assert pooled and pooled != name
    assert session.closed or session.broken or _fails(session)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={name}").close()


def _fails(session) -> bool:
    try:
        session.execute("SELECT 1")
    except psycopg.Error:
        return True
    return False
