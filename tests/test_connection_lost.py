"""A connection lost under `alembic upgrade` (issue 39): the server ends the upgrade's session in
the middle of the run (pg_terminate_backend, as a crash or a failover does: a real disconnect, no
mock). The FAILED line says the connection was lost, not that the database refused anything, and
that running the same command again goes on from where it stopped; the rerun does, and ends in
sync with the topology."""

from __future__ import annotations

import os
import subprocess

import pytest
import sqlalchemy as sa

from sqltransport_schema import cli
from sqltransport_schema.db import failure, make_engine

from .support import catalog
from .support.commands import alembic
from .support.projects import REPO
from .support.warm import program

ENDPOINTS = 40


def topology() -> str:
    endpoints = "".join(f"  - name: Endpoint{i:02d}\n    instances: [a, b]\n" for i in range(ENDPOINTS))
    return f'transport_version: "9.1"\nendpoints:\n{endpoints}queues:\n  - name: error\n'


def terminate_upgrade(url: str) -> int:
    """End every other session on the upgrade's database, as the server does when it goes down."""
    database = url.rsplit("/", 1)[1]
    query = f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{database}' AND pid <> pg_backend_pid()"
    return catalog.execute(url.rsplit("/", 1)[0] + "/postgres", query)[0][0]


def test_a_connection_lost_mid_upgrade_says_so_and_the_rerun_goes_on(project, pg_url):
    project.write_topology(topology())
    assert project.compile("initial") == 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SQLTRANSPORT_URL", None)
    command = [program("alembic"), "-x", f"url={pg_url}", "upgrade", "head"]
    process = subprocess.Popen(command, cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, terminated = [], 0
    for line in process.stdout:  # the log, then Alembic's FAILED line
        lines.append(line.rstrip("\n"))
        if not terminated and sum("create queue" in seen for seen in lines) == 30:  # mid-run: queues created, not committed
            terminated = terminate_upgrade(pg_url)
    assert process.wait(timeout=300) == 255 and terminated >= 1, "\n".join(lines[-5:])
    failed = [line for line in lines if line.startswith("FAILED: ")]
    assert failed == [lines[-1]], "\n".join(lines[-5:])
    assert failed[0].startswith("FAILED: the connection to the server was lost (")
    assert "refused" not in failed[0]
    assert failed[0].endswith("Once the server is back, run the same command again: it goes on from where it stopped")
    assert "Traceback" not in "\n".join(lines)

    rerun = alembic(project, "-x", f"url={pg_url}", "upgrade", "head")
    assert rerun.returncode == 0, rerun.stderr
    assert catalog.execute(pg_url, "SELECT version_num FROM alembic_version") == [(project.head(),)]
    assert cli.main(["check", "--url", pg_url, "--config", str(project.ini)]) == 0


def test_a_lost_connection_is_not_called_a_refusal(pg_url):
    """The line db.failure gives any command whose session the server ends mid-statement."""

    engine = make_engine(pg_url)
    try:
        with engine.connect() as conn:
            terminate = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with pytest.raises(sa.exc.OperationalError) as lost:
                conn.exec_driver_sql(f"SELECT pg_terminate_backend({terminate})")
        assert failure(lost.value).startswith("the connection to the server was lost (")
        assert "run the same command again" in failure(lost.value)
    finally:
        engine.dispose()
