"""A fleet run killed and started again, and two runs at once, on real PostgreSQL: the databases'
own alembic_version and migration lock are the truth, so every database ends at the head with each
revision run once (the stamps and DDL commands each database records, tests/support/fleets.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from sqltransport_schema import engines

from .support.fleets import fleet_command, fleet_env, journal_rows, pg_databases, pg_url, recorded, run_fleet, stamps
from .test_fleet_postgresql import PASSWORD, example, no_secret, revisions, write_fleet  # noqa: F401 - example: the fixture

pytestmark = [pytest.mark.postgresql, pytest.mark.slow]
STAGES = "stages:\n  - name: canary\n    targets: [t000, t001]\n  - name: rest\n    parallel: 3\n"


def start(root, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        fleet_command("upgrade", *args), cwd=root, env=fleet_env(**PASSWORD), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(condition, journal, timeout: float = 240.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = journal_rows(journal)
        if condition(rows):
            return rows
        time.sleep(0.05)
    raise AssertionError(f"the journal never showed it: {journal_rows(journal)}")


def upgraded(rows) -> int:
    return len({r["target"] for r in rows if r["outcome"] == "upgraded"})


def each_revision_once(names, revs) -> None:
    for name in names:
        assert stamps(pg_url(name)) == [revs[-1]], name
        stamped, ddl = recorded(name)
        assert sorted(stamped) == sorted(revs), (name, stamped)  # each revision's stamp written (committed) once
        created = [identity for tag, identity in ddl if tag == "CREATE TABLE"]
        assert len(created) == len(set(created)) and created, (name, created)


def migration_lock(name: str) -> psycopg.Connection:
    """A session holding the database's migration lock, as another migration of it would."""
    dialect = engines.get("postgresql")
    connection = psycopg.connect(pg_url(name), autocommit=True)
    connection.execute("SELECT pg_advisory_lock(%s)", (dialect.advisory_lock_id(dialect.MIGRATION_LOCK_NAME),))
    return connection


def test_the_runner_killed_at_three_points_and_rerun_finishes_with_each_revision_once(example):
    revs = revisions(example)
    journal = example / "fleet.journal.sqlite"
    with pg_databases(12, record=True) as names:
        write_fleet(example, names, STAGES)
        points = [
            lambda rows: any(r["outcome"] == "running" for r in rows),  # the first target mid-migration
            lambda rows: upgraded(rows) >= 3,  # the canary done, the rest under way
            lambda rows: upgraded(rows) >= 7,
        ]
        for point in points:
            runner = start(example)
            wait_for(point, journal)
            runner.send_signal(signal.SIGKILL)  # the runner alone: its workers finish their target and exit
            runner.communicate(timeout=60)
            assert runner.returncode == -signal.SIGKILL
        assert upgraded(journal_rows(journal)) < 12  # the kills left work to do
        final = run_fleet(example, "upgrade", **PASSWORD)
        assert final.returncode == 0, final.stdout + final.stderr
        assert f"every target reached {revs[-1]} (12 target(s))" in final.stdout
        each_revision_once(names, revs)
        rows = journal_rows(journal)
        assert any(r["outcome"] == "interrupted" for r in rows)  # what a killed run left, marked by the next
        assert not any(r["outcome"] == "running" for r in rows)
        no_secret(final.stdout, final.stderr, journal=journal)


def test_a_killed_worker_is_replaced_and_its_target_run_again(example):
    revs = revisions(example)
    journal = example / "fleet.journal.sqlite"
    with pg_databases(4, record=True) as names:
        write_fleet(example, names, "stages:\n  - name: all\n    parallel: 2\n")
        holder = migration_lock(names[0])  # t000's migration waits on it: its worker is surely mid-run
        try:
            runner = start(example)
            rows = wait_for(lambda rows: any(r["target"] == "t000" and r["outcome"] == "running" for r in rows), journal)
            worker = next(r["worker"] for r in rows if r["target"] == "t000" and r["outcome"] == "running")
            os.kill(worker, signal.SIGKILL)
            wait_for(lambda rows: any(r["outcome"] == "lost" for r in rows), journal)
        finally:
            holder.close()
        out, err = runner.communicate(timeout=240)
        assert runner.returncode == 0, out + err
        assert "lost t000 (all): the worker process died (killed by signal 9)" in err
        attempts = [r["outcome"] for r in journal_rows(journal) if r["target"] == "t000"]
        assert attempts == ["lost", "upgraded"]
        each_revision_once(names, revs)


def test_two_runs_at_once(example):
    revs = revisions(example)
    with pg_databases(6, record=True) as names:
        write_fleet(example, names, "stages:\n  - name: all\n    parallel: 2\n")
        first, second = start(example), start(example, "--journal", str(example / "second.sqlite"))
        for runner in (first, second):
            out, err = runner.communicate(timeout=300)
            assert runner.returncode == 0, out + err
        each_revision_once(names, revs)
        outcomes = [r["outcome"] for path in ("fleet.journal.sqlite", "second.sqlite") for r in journal_rows(example / path)]
        assert outcomes.count("upgraded") == 6  # each database upgraded by one run; the other found it done


def test_a_second_run_skips_a_database_another_migration_holds_with_a_clear_line(example):
    revs = revisions(example)
    with pg_databases(3) as names:
        write_fleet(example, names)
        holder = migration_lock(names[1])
        try:
            busy = run_fleet(example, "upgrade", "-x", "if_busy=skip", **PASSWORD)
        finally:
            holder.close()
        assert busy.returncode == 1, busy.stdout + busy.stderr
        assert "skipped t001 (all): another migration of this database is running; skipped (-x if_busy=skip), nothing was changed" in (
            busy.stdout
        )
        assert busy.stdout.splitlines()[-1] == "resume: sqltransport-schema fleet upgrade -x if_busy=skip"
        assert stamps(pg_url(names[1])) == [] and stamps(pg_url(names[0])) == [revs[-1]]
        assert run_fleet(example, "upgrade", **PASSWORD).returncode == 0
        assert stamps(pg_url(names[1])) == [revs[-1]]


def _gone(pid: int) -> bool:
    """The process has ended (a zombie waiting for a reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_runner_takes_its_workers_and_the_rerun_says_what_it_left(example):
    """SIGKILL of the runner's pid alone, its worker waiting on a held lock: the worker is gone within
    5 s (not waiting out the lock beside the next run), and the rerun's first line names the
    interrupted run, what it finished and the target it cut off."""
    revs = revisions(example)
    journal = example / "fleet.journal.sqlite"
    with pg_databases(3, record=True) as names:
        write_fleet(example, names, "stages:\n  - name: all\n    parallel: 1\n")
        holder = migration_lock(names[2])  # t002's migration waits on it
        try:
            runner = start(example)
            rows = wait_for(lambda rows: any(r["target"] == "t002" and r["outcome"] == "running" for r in rows), journal)
            worker = next(r["worker"] for r in rows if r["target"] == "t002" and r["outcome"] == "running")
            runner.send_signal(signal.SIGKILL)
            runner.communicate(timeout=60)
            deadline = time.monotonic() + 5
            while not _gone(worker) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _gone(worker), "the worker outlived its runner by 5 s"
        finally:
            holder.close()
        final = run_fleet(example, "upgrade", **PASSWORD)
        assert final.returncode == 0, final.stdout + final.stderr
        first = final.stderr.splitlines()[0]
        assert first.startswith("run 1 (started ") and "fleet upgrade) was interrupted: 2 upgraded; cut off mid-run: t002;" in first, first
        each_revision_once(names, revs)
