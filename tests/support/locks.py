"""Sessions that hold and use PostgreSQL queues while a migration runs, and that migration run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid

import psycopg
from sqlalchemy.engine import make_url

from sqltransport_schema import engines
from sqltransport_schema.schema import TableName
from sqltransport_schema.versions import profile

from .commands import alembic
from .projects import REPO
from .warm import program

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
queues:
  - name: error
"""


PG = engines.get("postgresql")


def libpq(url: str) -> str:
    u = make_url(url)
    return f"host={u.host or '127.0.0.1'} port={u.port or 5432} dbname={u.database} user={u.username}"


def seq_type(url: str, table: str) -> str:
    with psycopg.connect(libpq(url)) as conn:
        return conn.execute(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'seq'",
            (f'"public"."{table}"',),
        ).fetchone()[0]


class Sender(threading.Thread):
    """Sends into a queue with the transport's own send statement, timing each send (subclasses run
    another of the transport's statements in `step`)."""

    statement = "send"
    pause = 0.02  # seconds between two statements

    def __init__(self, url: str, table: str) -> None:
        super().__init__(daemon=True)
        self.conninfo = libpq(url)
        self.sql, self.order = PG.runtime_statements(profile("9.1"), TableName(table))[self.statement].native("format")
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def step(self, conn: psycopg.Connection) -> None:
        values = {"Id": uuid.uuid4(), "TimeToBeReceivedMs": None, "Headers": "{}", "Body": b"x"}
        conn.execute(self.sql, tuple(values[name] for name in self.order))

    def run(self) -> None:
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                while not self.stop.is_set():
                    started = time.monotonic()
                    self.step(conn)
                    self.latencies.append(time.monotonic() - started)
                    time.sleep(self.pause)
        except BaseException as error:  # reported by the test
            self.error = error


def start_alembic(project, url: str, *x: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SQLTRANSPORT_URL", None)
    args = [program("alembic"), "-x", f"url={url}", *(f"-x{item}" for item in x), "upgrade", "head"]
    return subprocess.Popen(args, cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def widening_project(project, pg_url):
    """Sales and error deployed with serial Seq; the compiled next revision widens both to bigserial."""
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={pg_url}", "upgrade", "head").returncode == 0
    project.write_topology(TOPOLOGY + "postgresql:\n  seq_type: bigserial\n")
    assert project.compile("bigserial") == 0
    text = project.revisions()[-1].read_text()
    first, second = text.index('change_queue_seq_type("Sales"'), text.index('change_queue_seq_type("error"')
    assert first < second  # Sales is altered first, then the run waits on error
    return project


def hold(url: str, table: str) -> psycopg.Connection:
    """A reader's session with an open transaction that has read the queue (ACCESS SHARE, kept)."""
    conn = psycopg.connect(libpq(url) + " application_name=queue-reader")
    conn.execute(f'SELECT count(*) FROM "public"."{table}"')
    return conn
