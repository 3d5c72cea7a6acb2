"""Real servers for the tests: throwaway databases, and the CI rule that a missing server fails.

PostgreSQL tests use the server at 127.0.0.1:5432, MariaDB tests the server at
127.0.0.1:3306 (root, no password), and a fresh database each. When a server cannot be
reached its tests are skipped locally, but fail under CI (CI=true), so a green CI always
means they ran.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid

import pytest

from sqltransport_schema.util import process_alive

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


PG_DROP = 'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
# Every object a user makes has an OID from 16384 on (FirstNormalObjectId); a database CREATE DATABASE
# makes from template1 holds none, but for the public schema a reset makes again (checked on its own).
_USER_OBJECTS = " + ".join(
    f"(SELECT count(*) FROM pg_catalog.{catalog} WHERE oid >= 16384)"
    for catalog in (
        "pg_class", "pg_proc", "pg_type", "pg_constraint", "pg_trigger", "pg_rewrite", "pg_attrdef", "pg_policy",
        "pg_event_trigger", "pg_publication", "pg_largeobject_metadata", "pg_default_acl", "pg_collation",
        "pg_operator", "pg_opclass", "pg_opfamily", "pg_cast", "pg_conversion", "pg_language", "pg_transform",
        "pg_foreign_data_wrapper", "pg_foreign_server", "pg_ts_config", "pg_ts_dict", "pg_statistic_ext",
    )
)  # fmt: skip
# True when the database is as CREATE DATABASE makes it; a reset one that is not is dropped instead.
PG_FRESH = f"""
SELECT ({_USER_OBJECTS}) = 0
   AND (SELECT array_agg(extname::text) FROM pg_extension) = ARRAY['plpgsql']
   AND (SELECT array_agg(nspname::text ORDER BY nspname) FROM pg_namespace
        WHERE nspname NOT LIKE 'pg\\_temp\\_%' AND nspname NOT LIKE 'pg\\_toast\\_temp\\_%')
       = ARRAY['information_schema', 'pg_catalog', 'pg_toast', 'public']
   AND (SELECT nspowner::regrole::text || coalesce(nspacl::text, '') || coalesce(obj_description(oid, 'pg_namespace'), '')
        FROM pg_namespace WHERE nspname = 'public')
       = 'pg_database_owner{{pg_database_owner=UC/pg_database_owner,=U/pg_database_owner}}standard public schema'
   AND NOT EXISTS (SELECT FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = current_database())
   AND (SELECT datacl IS NULL AND datdba = 10 AND datconnlimit = -1 AND NOT datistemplate AND datallowconn
        FROM pg_database WHERE datname = current_database())
"""
# Back to what CREATE DATABASE makes: every schema a test made, and the public schema made again as PostgreSQL 15 makes it.
PG_RESET = """
DO $$
DECLARE schema_name text;
BEGIN
    FOR schema_name IN SELECT nspname FROM pg_namespace WHERE oid >= 16384 OR nspname = 'public' LOOP
        EXECUTE format('DROP SCHEMA %I CASCADE', schema_name);
    END LOOP;
END $$;
CREATE SCHEMA public AUTHORIZATION pg_database_owner;
GRANT USAGE ON SCHEMA public TO PUBLIC;
COMMENT ON SCHEMA public IS 'standard public schema';
"""


# A reset drops every object in one transaction, each object locked till it ends; the server's lock table
# is shared (max_locks_per_transaction x max_connections: 6,400 here) and a database of hundreds of tables
# filled it under another test's feet. A larger database is dropped, which locks none of its objects.
RESET_AT_MOST = 100


class PostgresPool:
    """This process's PostgreSQL databases that tests are done with, reset for the next test. Creating
    and dropping a database cost the server 0.24 s of CPU beside a test's own work (a 7.5 MB template
    written through the WAL, ~300 files made and unlinked), taking a reset one 0.1 s, over 500 times a
    run. A database comes back only if PG_FRESH holds after the reset, and it waits under a name no test
    knows (a stray session of its last test cannot reach it); anything else is dropped as before."""

    def __init__(self) -> None:
        self.free: list[str] = []
        self.swept = False
        self.dropping: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self.dropper: threading.Thread | None = None

    def drop_later(self, name: str) -> None:
        """Drop `name` (under a name no test knows) on a thread of its own: DROP DATABASE waits for a
        checkpoint that writes out every dirty buffer of the server (tens of seconds after a test that
        made thousands of tables), time the test's teardown and the next test need not wait."""
        if self.dropper is None:
            self.dropper = threading.Thread(target=self._drop_queued, name="pg-pool-dropper", daemon=True)
            self.dropper.start()
        self.dropping.put(name)

    def _drop_queued(self) -> None:
        while (name := self.dropping.get()) is not None:
            self._drop_now(name)

    def wait_for_drops(self) -> None:
        if self.dropper is not None:
            self.dropping.put(None)
            self.dropper.join()
            self.dropper = None

    def create(self, connection, name: str) -> None:
        """Database `name`, as CREATE DATABASE makes it: a pooled one renamed, or a new one."""
        if not self.swept:
            self.swept = True
            self.sweep(connection)
        while self.free:
            pooled = self.free.pop()
            try:
                connection.exec_driver_sql(f'ALTER DATABASE "{pooled}" RENAME TO "{name}"')
                return
            except Exception:  # noqa: BLE001 - reached after all: drop it, take another
                connection.exec_driver_sql(PG_DROP.format(name=pooled))
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')

    def release(self, connection, name: str) -> None:
        """The test is done with `name`: its sessions ended, the database reset and pooled, or dropped."""
        pooled = f"{POOL_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
        sessions = "FROM pg_stat_activity WHERE datname = %(name)s AND pid <> pg_backend_pid()"
        try:
            connection.exec_driver_sql(f"SELECT pg_terminate_backend(pid) {sessions}", {"name": name})
            for _ in range(100):  # a terminated session takes a moment to go
                if not connection.exec_driver_sql(f"SELECT count(*) {sessions}", {"name": name}).scalar():
                    break
                time.sleep(0.01)
            connection.exec_driver_sql(f'ALTER DATABASE "{name}" RENAME TO "{pooled}"')
        except Exception:  # noqa: BLE001 - still in use, or gone (a test that dropped its own)
            connection.exec_driver_sql(PG_DROP.format(name=name))
            return
        if self._reset(pooled):
            self.free.append(pooled)
        else:
            self.drop_later(pooled)

    @staticmethod
    def _reset(name: str) -> bool:
        import psycopg

        url = make_url_for(name)
        try:
            with psycopg.connect(url, autocommit=True) as session:
                relations = session.execute("SELECT count(*) FROM pg_class WHERE oid >= 16384").fetchone()[0]
                if relations > RESET_AT_MOST:
                    return False
                session.execute(PG_RESET)
                return bool(session.execute(PG_FRESH).fetchone()[0])
        except psycopg.Error:
            return False

    @staticmethod
    def sweep(connection) -> None:
        """Drop the pooled databases of pytest processes that are gone (killed before they dropped theirs),
        and vacuum pg_database: each create, rename and drop leaves a dead row in that shared catalog,
        which autovacuum had left for hours under the suite's churn (16,767 dead rows, 656 kB for 5 live)."""
        connection.exec_driver_sql("VACUUM pg_database")
        pattern = POOL_PREFIX.replace("_", "\\_") + "%"
        pooled = connection.exec_driver_sql(
            "SELECT datname FROM pg_database WHERE datname LIKE %(pattern)s", {"pattern": pattern}
        ).scalars()
        for name in list(pooled):
            pid = name[len(POOL_PREFIX) :].split("_")[0]
            if pid.isdigit() and not process_alive(int(pid)):
                connection.exec_driver_sql(PG_DROP.format(name=name))

    def close(self, connection) -> None:
        """Drop the pooled databases, four at a time: the checkpoints their drops ask for are shared by
        the drops waiting at once, where one after another each waited for its own."""
        from concurrent.futures import ThreadPoolExecutor

        self.wait_for_drops()
        free, self.free = self.free, []
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(self._drop_now, free))

    @staticmethod
    def _drop_now(name: str) -> None:
        import psycopg

        try:
            with psycopg.connect(make_url_for("postgres"), autocommit=True) as session:
                session.execute(PG_DROP.format(name=name))
        except psycopg.Error:
            pass  # left for the next run's sweep (its pid is in the name)


POOL_PREFIX = "sqlts_pool_"  # then the pytest process's pid: sweep() drops a gone process's


POSTGRES_POOL = PostgresPool()


def make_url_for(name: str) -> str:
    """libpq's URL of database `name` on the admin URL's server."""
    from sqlalchemy.engine import make_url

    url = make_url(PG_ADMIN_URL).set(drivername="postgresql", database=name)
    return url.render_as_string(hide_password=False)


def pg_database():
    """Yield the URL of a database as CREATE DATABASE makes it (from this process's PostgresPool)."""
    databases = pg_databases(1)
    try:
        yield next(databases)[0]
    finally:
        next(databases, None)


def pg_databases(count: int, names: list[str] | None = None):
    """Yield the URLs of `count` databases as CREATE DATABASE makes them (named `names`, or sqlts_test_...),
    given back to this process's PostgresPool afterwards."""
    engine = admin(PG_ADMIN_URL, "PostgreSQL at 127.0.0.1:5432")
    names = names or [f"sqlts_test_{uuid.uuid4().hex[:12]}" for _ in range(count)]
    made: list[str] = []
    try:
        with engine.connect() as connection:
            for name in names:
                POSTGRES_POOL.create(connection, name)
                made.append(name)
        suite_cost.count("databases", len(names))
        yield [PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name for name in names]
    finally:
        with engine.connect() as connection:
            for name in made:
                POSTGRES_POOL.release(connection, name)
        engine.dispose()


def close_pools() -> None:
    """Drop the pooled databases (at the end of this pytest process)."""
    POSTGRES_POOL.wait_for_drops()
    if POSTGRES_POOL.free:
        engine = admin(PG_ADMIN_URL, "PostgreSQL at 127.0.0.1:5432")
        with engine.connect() as connection:
            POSTGRES_POOL.close(connection)
        engine.dispose()


def mysql_database():
    return throwaway_database(
        MYSQL_ADMIN_URL, "MariaDB at 127.0.0.1:3306", "CREATE DATABASE `{name}` CHARACTER SET utf8mb4", "DROP DATABASE IF EXISTS `{name}`"
    )


def connect(url: str):
    from sqltransport_schema.db import make_engine, normalise_url

    return make_engine(normalise_url(url))
