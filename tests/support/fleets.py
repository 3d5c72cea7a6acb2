"""Fleets for the tests: many throwaway PostgreSQL databases (or SQLite files), a fleet file
naming them, the fleet command in a subprocess, and what each database recorded of its
migrations (every DDL command and every stamp, by triggers in the database itself)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import uuid
from contextlib import contextmanager
from pathlib import Path

from .databases import PG_ADMIN_URL
from .databases import pg_databases as databases_of
from .projects import REPO
from .warm import program

SECRET = "fleet-s3cret-pw"  # trust authentication ignores it; no output may show it

# Each stamp the migrations write (one row per revision applied) and each DDL command, recorded in
# the migration's own transaction: a run that was killed leaves nothing; a revision run twice leaves two.
RECORDER = """
CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num));
CREATE TABLE fleet_stamps (version_num TEXT NOT NULL);
CREATE TABLE fleet_ddl (tag TEXT NOT NULL, identity TEXT);
CREATE FUNCTION fleet_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO fleet_stamps VALUES (NEW.version_num); RETURN NEW; END $$;
CREATE TRIGGER fleet_stamp AFTER INSERT OR UPDATE ON alembic_version FOR EACH ROW EXECUTE FUNCTION fleet_stamp();
CREATE FUNCTION fleet_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
    IF r.schema_name IS DISTINCT FROM 'pg_temp' THEN INSERT INTO public.fleet_ddl VALUES (r.command_tag, r.object_identity); END IF;
  END LOOP;
END $$;
CREATE EVENT TRIGGER fleet_ddl ON ddl_command_end EXECUTE FUNCTION fleet_ddl();
"""


def example_project(folder: Path) -> Path:
    """The repository's example project (four revisions) copied to folder/example: the fleet tests' migrations."""
    root = folder / "example"
    root.mkdir()
    shutil.copy(REPO / "alembic.ini", root / "alembic.ini")
    shutil.copy(REPO / "topology.yaml", root / "topology.yaml")
    shutil.copytree(REPO / "migrations", root / "migrations", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def revisions(root: Path) -> list[str]:
    """The revisions of the project at root, oldest first."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    return [r.revision for r in reversed(list(ScriptDirectory.from_config(Config(str(root / "alembic.ini"))).walk_revisions()))]


def pg_url(name: str, password: str | None = None) -> str:
    base = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://").rsplit("/", 1)[0]
    if password:
        base = base.replace("postgres@", f"postgres:{password}@", 1)
    return f"{base}/{name}"


@contextmanager
def pg_databases(count: int, record: bool = False):
    """`count` fresh databases (names a fleet's url_template spells), given back afterwards; with record,
    each holds RECORDER."""
    import psycopg

    prefix = f"sqlts_fleet_{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}_t{i:03d}" for i in range(count)]
    databases = databases_of(count, names)
    try:
        next(databases)
        if record:
            for name in names:
                with psycopg.connect(pg_url(name), autocommit=True) as connection:
                    connection.execute(RECORDER)
        yield names
    finally:
        next(databases, None)


def stamps(url: str) -> list[str]:
    """The database's alembic_version (empty before the first upgrade)."""
    import sqlalchemy as sa

    from sqltransport_schema.db import make_engine

    engine = make_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            if not sa.inspect(connection).has_table("alembic_version"):
                return []
            return sorted(r[0] for r in connection.exec_driver_sql("SELECT version_num FROM alembic_version"))
    finally:
        engine.dispose()


def recorded(name: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(every stamp written, in order; every DDL command and its object) of a RECORDER database."""
    import psycopg

    with psycopg.connect(pg_url(name), autocommit=True) as connection:
        stamped = [r[0] for r in connection.execute("SELECT version_num FROM fleet_stamps")]
        ddl = [(r[0], r[1]) for r in connection.execute("SELECT tag, identity FROM fleet_ddl")]
    return stamped, ddl


def fleet_env(**extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), **extra}
    env.pop("SQLTRANSPORT_URL", None)
    return env


def fleet_command(*args: str) -> list[str]:
    return [program("sqltransport-schema"), "fleet", *args]


def run_fleet(cwd: Path, *args: str, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(fleet_command(*args), cwd=cwd, env=fleet_env(**env), capture_output=True, text=True, check=False, timeout=timeout)


def journal_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    connection = sqlite3.connect(str(path), timeout=30)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in connection.execute("SELECT * FROM attempts ORDER BY run, target, attempt")]
    except sqlite3.OperationalError:
        return []
    finally:
        connection.close()
