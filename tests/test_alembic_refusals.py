"""`alembic` as a user runs it: the project's refusals and an unreachable database end in Alembic's
own one-line `FAILED: ...` naming the exact command that gets past them, on real SQLite and
PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import catalog
from .conftest import REPO
from .test_migrations import insert_message, key

ALEMBIC = Path(sys.executable).parent / "alembic"
TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a, host-b]
queues:
  - name: error
"""


def alembic(project, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SQLTRANSPORT_URL", None)
    return subprocess.run([str(ALEMBIC), *args], cwd=project.root, env=env, capture_output=True, text=True, check=False, timeout=300)


def failed_line(result: subprocess.CompletedProcess) -> str:
    """The one FAILED line; no traceback."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    failed = [line for line in (result.stderr + result.stdout).splitlines() if line.startswith("FAILED: ")]
    assert len(failed) == 1, result.stderr + result.stdout
    return failed[0]


def test_a_compiled_drop_of_a_queue_with_messages_is_let_through_per_table(project, db_url):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={db_url}", "upgrade", "head").returncode == 0
    insert_message(db_url, "Sales.host-b")
    project.write_topology(TOPOLOGY.replace("[host-a, host-b]", "[host-a]"))
    assert project.compile("retire host-b") == 0

    line = failed_line(alembic(project, "-x", f"url={db_url}", "upgrade", "head"))
    assert "refusing to drop queue" in line and "Sales.host-b" in line and "it still holds messages" in line
    assert line.endswith(f"alembic -x url={db_url} -x discard=Sales.host-b upgrade head")
    assert catalog.read(db_url)[key(db_url, "Sales.host-b")].rows == 1

    other = alembic(project, "-x", f"url={db_url}", "-x", "discard=Sales.host-a", "upgrade", "head")
    assert "discard=Sales.host-b" in failed_line(other)  # another table's entry lets nothing through

    passed = alembic(project, "-x", f"url={db_url}", "-x", "discard=Sales.host-b", "upgrade", "head")
    assert passed.returncode == 0, passed.stderr
    assert key(db_url, "Sales.host-b") not in catalog.read(db_url)


def test_downgrade_refusals_name_discard_messages_and_rows(project, db_url):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={db_url}", "upgrade", "head").returncode == 0
    table = '"SubscriptionRouting"' if db_url.startswith("sqlite") else '"public"."SubscriptionRouting"'
    catalog.execute(db_url, f"INSERT INTO {table} (QueueAddress, Endpoint, Topic) VALUES ('Sales', 'Sales', 't')")

    line = failed_line(alembic(project, "-x", f"url={db_url}", "-x", "drop_protected=error", "downgrade", "base"))
    assert "subscription table" in line and "it still holds subscription rows" in line and "messages" not in line.split(":")[1]
    assert line.endswith(f"alembic -x url={db_url} -x drop_protected=error -x discard_messages=true downgrade base")


def test_a_protected_queue_names_the_command(project, sqlite_url):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={sqlite_url}", "upgrade", "head").returncode == 0
    line = failed_line(alembic(project, "-x", f"url={sqlite_url}", "downgrade", "base"))
    assert "refusing to drop protected queue" in line
    assert f"alembic -x url={sqlite_url} -x drop_protected=error downgrade base" in line


@pytest.mark.parametrize(
    "url, says",
    [
        ("postgresql://postgres@127.0.0.1:1/nowhere", "cannot reach the database"),
        ("postgres://postgres@127.0.0.1:1/nowhere", "cannot reach the database"),
        ("foo://x", "unknown database scheme foo://"),
    ],
)
def test_an_unreachable_database_is_one_line(project, url, says):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert says in failed_line(alembic(project, "-x", f"url={url}", "upgrade", "head"))
