"""A very large in-place revision on PostgreSQL with its default settings (issue 26): 300 endpoints
with 2 instances each, then `seq_type: bigserial` and `body_string: true` on all of them in one
revision (2,102 table rewrites). The upgrade commits part-way as its operations fill the server's
lock table (migrate/execution.py, each operation's lock_cost), so it passes; killed (SIGKILL) at three points and
run again, it continues, ends in sync with the topology, and every message is kept."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from sqltransport_schema import cli

from .support import catalog
from .support.messages import insert_message
from .support.projects import REPO
from .support.warm import program

pytestmark = pytest.mark.slow

ENDPOINTS = 300


def topology(rewritten: bool) -> str:
    lines = ['transport_version: "9.1"']
    if rewritten:
        lines.append("postgresql:\n  seq_type: bigserial")
    lines.append("endpoints:")
    for i in range(ENDPOINTS):
        lines.append(f"  - name: Endpoint{i:03d}\n    instances: [host-a, host-b]" + ("\n    body_string: true" if rewritten else ""))
    lines.append("queues:\n  - name: error\n  - name: audit")
    return "\n".join(lines) + "\n"


def upgrade(project, url: str, stop=None) -> tuple[int, list[str]]:
    """`alembic upgrade head` as a user runs it; `stop(lines)` (the log so far) says when to SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SQLTRANSPORT_URL", None)
    process = subprocess.Popen(
        [program("alembic"), "-x", f"url={url}", "upgrade", "head"],
        cwd=project.root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in process.stderr:
        lines.append(line.rstrip("\n"))
        if stop is not None and stop(lines):
            process.send_signal(signal.SIGKILL)
            break
    process.stderr.close()
    return process.wait(timeout=600), lines


def operations(lines: list[str]) -> int:
    return sum(line.startswith(what) for line in lines for what in ("add body string", "change Seq"))  # the tool's lines, as they are


def commits(lines: list[str]) -> int:
    return sum("committing after" in line for line in lines)


def messages(url: str, tables: list[str]) -> dict[str, set]:
    return {t: {tuple(r) for r in catalog.execute(url, f'SELECT Id::text, Body, Seq FROM "public"."{t}"')} for t in tables}


def test_a_large_in_place_revision_upgrades_on_default_settings_and_reruns_after_kills(project, pg_url):
    project.write_topology(topology(rewritten=False))
    assert project.compile("initial") == 0
    code, lines = upgrade(project, pg_url)
    assert code == 0, "\n".join(lines[-5:])

    kept = ["Endpoint000", "Endpoint150.host-a", "Endpoint299.host-b", "Endpoint299", "error"]
    for table in kept:
        for _ in range(3):
            insert_message(pg_url, table)
    before = messages(pg_url, kept)

    project.write_topology(topology(rewritten=True))
    assert project.compile("bigserial and BodyString everywhere") == 0

    # 1. in the first transaction, before any part-way commit
    code, lines = upgrade(project, pg_url, stop=lambda lines: operations(lines) >= 100)
    assert code == -signal.SIGKILL and commits(lines) == 0
    # 2. just after the run's third part-way commit (the next operation is logged once it is done)
    code, lines = upgrade(project, pg_url, stop=lambda lines: commits(lines) >= 3 and "committing after" not in lines[-1])
    assert code == -signal.SIGKILL
    # 3. at the revision's last operation, every commit but the last one made
    last = 'add body string column of "public"."Endpoint299.Delayed"'
    code, lines = upgrade(project, pg_url, stop=lambda lines: last in lines[-1])
    assert code == -signal.SIGKILL and commits(lines) >= 8

    code, lines = upgrade(project, pg_url)
    assert code == 0, "\n".join(lines[-5:])
    assert commits(lines) >= 8 and not any("FAILED" in line or "out of shared memory" in line for line in lines)

    assert cli.main(["check", "--url", pg_url, "-c", str(project.ini)]) == 0
    after = messages(pg_url, kept)
    assert after == before and all(len(rows) == 3 for rows in after.values())  # every message, its body and place (Seq)
