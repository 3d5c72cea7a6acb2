"""`alembic` as a user runs it: the project's refusals and an unreachable database end in Alembic's
own one-line `FAILED: ...` naming the exact command that gets past them, on real SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest

from .support import catalog
from .support.catalog import key
from .support.commands import alembic, failed_line
from .support.messages import insert_message
from .support.topology import TWO_INSTANCES as TOPOLOGY


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
    assert "-x discard=Sales.host-a,Sales.host-b upgrade" in failed_line(other)  # another table's entry lets nothing through

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


def test_one_refusal_names_every_table_and_its_one_rerun_passes(project, db_url):
    """Retiring an endpoint whose queue and instance queue both hold messages: the refusal names
    both, and the command it suggests lets both drops through at once (issue 25, item 6)."""
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={db_url}", "upgrade", "head").returncode == 0
    insert_message(db_url, "Sales")
    insert_message(db_url, "Sales.host-a")
    project.write_topology(TOPOLOGY.replace("  - name: Sales\n    instances: [host-a, host-b]\n", ""))
    assert project.compile("retire Sales") == 0

    line = failed_line(alembic(project, "-x", f"url={db_url}", "upgrade", "head"))
    assert 'refusing to drop queue "Sales.host-a", queue "Sales": they still hold messages' in line.replace('"public".', "")
    assert line.endswith(f"alembic -x url={db_url} -x discard=Sales.host-a,Sales upgrade head"), line
    tables = catalog.read(db_url)
    assert tables[key(db_url, "Sales")].rows == 1 and tables[key(db_url, "Sales.host-a")].rows == 1
    assert key(db_url, "Sales.host-b") in tables  # the empty one's drop was rolled back with the rest

    rerun = alembic(project, *line.split(": alembic ", 1)[1].split())
    assert rerun.returncode == 0, rerun.stderr
    assert not {key(db_url, t) for t in ("Sales", "Sales.host-a", "Sales.host-b", "Sales.Delayed")} & set(catalog.read(db_url))


def test_a_downgrade_refusal_names_protected_queues_and_rows_at_once(project, db_url):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert alembic(project, "-x", f"url={db_url}", "upgrade", "head").returncode == 0
    insert_message(db_url, "error")
    insert_message(db_url, "Sales.host-b")

    line = failed_line(alembic(project, "-x", f"url={db_url}", "downgrade", "base"))
    assert "refusing to drop protected queue" in line and "error" in line
    assert 'queue "error", queue "Sales.host-b": they still hold messages' in line.replace('"public".', "")
    assert line.endswith(f"alembic -x url={db_url} -x drop_protected=error -x discard_messages=true downgrade base"), line
    rerun = alembic(project, *line.split(": alembic ", 1)[1].split())
    assert rerun.returncode == 0, rerun.stderr
    assert key(db_url, "error") not in catalog.read(db_url)


def test_a_full_lock_table_keeps_the_servers_hint_and_names_the_setting(project, pg_url):
    """PostgreSQL's "out of shared memory" (SQLSTATE 53200, as a full lock table raises it, here from a
    revision that raises it itself): the FAILED line keeps the hint and says what to do."""
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    (project.versions / "0002_full.py").write_text(
        f'revision = "0002full"\ndown_revision = "{project.head()}"\n'
        "from alembic import op\n\n\n"
        "def upgrade():\n"
        "    op.execute(\"DO $$ BEGIN RAISE EXCEPTION 'out of shared memory' USING ERRCODE = 'out_of_memory', "
        "HINT = 'You might need to increase max_locks_per_transaction.'; END $$\")\n\n\n"
        "def downgrade():\n    pass\n"
    )
    result = alembic(project, "-x", f"url={pg_url}", "upgrade", "head")
    line = failed_line(result)
    assert "the database refused: out of shared memory (hint: You might need to increase max_locks_per_transaction.)" in line
    assert "raise max_locks_per_transaction" in line and "run it again" in line and "split the change" in line
    assert result.stderr.count("out of shared memory") + result.stdout.count("out of shared memory") == 1  # printed once
