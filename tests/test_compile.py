"""compile: topology.yaml -> revision files, and what those revisions do when upgraded."""

from __future__ import annotations

import json

import pytest

from sqltransport_schema import cli

from .support import catalog
from .support.catalog import key
from .support.messages import insert_message
from .support.topology import VERSIONED as BASE


def test_compile_writes_a_revision_that_reads_like_the_change(project):
    project.write_topology(BASE.format(version="9.1"))
    assert project.compile("add sales") == 0
    [revision] = project.revisions()
    text = revision.read_text()
    assert 'op.create_queue("Sales", schema="dbo", version="9.1", body_string=False, seq_type="serial")' in text
    assert 'op.create_delayed_table("Sales.Delayed", schema="dbo", version="9.1")' in text
    assert 'op.create_subscription_table("SubscriptionRouting", version="9.1")' in text
    assert 'op.drop_queue("Sales", schema="dbo", version="9.1"' in text  # the downgrade
    assert "transport_version = '9.1'" in text
    assert text.index("def upgrade") < text.index("def downgrade") < text.index("SNAPSHOT")


def test_compile_without_a_message_titles_the_revision_by_its_change(project):
    """No -m: the message a reviewer would write, read from the change, names the file and heads its docstring."""
    steps = [
        (BASE.format(version="9.0"), "add Sales, error, SubscriptionRouting", "add_sales_error_subscriptionrouting"),
        (BASE.format(version="9.0") + "  - name: Inventory\n", "add Inventory", "add_inventory"),
        (BASE.format(version="9.1").replace("    schema: dbo\n    instances", "    schema: dbo\n    body_string: true\n    instances", 1)
         + "  - name: Inventory\n", "transport 9.0 -> 9.1, Sales: body_string", "transport_9_0_9_1_sales_body_string"),
        (BASE.format(version="9.1"), "remove Inventory, Sales: no body_string", "remove_inventory_sales_no_body_string"),
    ]  # fmt: skip
    for topology, message, slug in steps:
        project.write_topology(topology)
        before = set(project.revisions())
        assert cli.main(["compile", "-c", str(project.ini), "--topology", str(project.topology)]) == 0
        (newest,) = set(project.revisions()) - before
        assert newest.name.split("_", 2)[2] == f"{slug}.py", newest.name
        assert newest.read_text(encoding="utf-8").startswith(f'"""{message}\n'), newest.read_text(encoding="utf-8")[:200]


def test_nothing_to_compile_and_check_exit_codes(project, capsys):
    project.write_topology(BASE.format(version="9.1"))
    assert project.compile("x", "--check") == 1
    assert project.revisions() == []  # --check writes nothing
    assert project.compile("x") == 0
    capsys.readouterr()
    assert project.compile("again") == 0
    assert "nothing to compile" in capsys.readouterr().err  # status, on stderr: compile writes no revision
    assert len(project.revisions()) == 1
    assert project.compile("x", "--check") == 0
    capsys.readouterr()

    project.write_topology(BASE.format(version="9.1") + "  - name: audit\n")
    assert project.compile("x", "--check", "--format", "json") == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["status"] == "pending"
    assert payload["changes"] == ['create queue "audit" (transport 9.1)']


def test_invalid_topology_writes_nothing(project, capsys):
    project.write_topology(BASE.format(version="9.1"))
    project.compile("first")
    before = {p: p.read_bytes() for p in project.revisions()}
    project.write_topology(BASE.format(version="9.1").replace("  - name: error", "  - nmae: error"))
    assert project.compile("broken") == 2
    err = capsys.readouterr().err
    assert f"error: {project.topology}:8:5: unknown key 'nmae'" in err
    assert "nothing was written" in err
    assert {p: p.read_bytes() for p in project.revisions()} == before
    assert project.compile("broken", "--check") == 2


def test_raising_the_version_compiles_to_an_in_place_upgrade(project):
    project.write_topology(BASE.format(version="4.0"))
    project.compile("at 4.0")
    project.write_topology(BASE.format(version="9.1"))
    project.compile("to 9.1")
    text = project.revisions()[-1].read_text()
    upgrade = text[text.index("def upgrade") : text.index("def downgrade")]
    assert 'op.change_queue_version("Sales", schema="dbo", from_version="4.0", to_version="9.1")' in upgrade
    assert 'op.change_queue_version("Sales.host-a", schema="dbo", from_version="4.0", to_version="9.1")' in upgrade
    assert 'op.create_subscription_table("SubscriptionRouting", version="9.1")' in upgrade
    assert "drop_queue" not in upgrade and "create_queue" not in upgrade

    script = project.offline("mssql://")
    upgrade_sql = script[script.index("Running upgrade") :]
    second = upgrade_sql[upgrade_sql.index("Running upgrade", 20) :]
    assert "DROP INDEX Index_RowVersion ON [dbo].[Sales];" in second
    assert "CREATE NONCLUSTERED INDEX Index_RowVersion ON [dbo].[Sales]" in second
    assert "CREATE TABLE [dbo].[Sales]" not in second and "DROP TABLE" not in second


def test_old_revisions_keep_executing_their_own_version(project):
    """A revision compiled at 4.0 builds 4.0 tables even after the topology moved on."""
    project.write_topology(BASE.format(version="4.0"))
    project.compile("at 4.0")
    project.write_topology(BASE.format(version="9.1"))  # not compiled
    script = project.offline("mssql://")
    assert "CREATE CLUSTERED INDEX Index_RowVersion ON [dbo].[Sales]" in script
    assert "CREATE NONCLUSTERED INDEX Index_RowVersion" not in script
    assert "BEGIN TRY" not in script  # 4.0 predates the TRY/CATCH guard (6.3.1)


@pytest.mark.parametrize("old_version", ["1.2", "4.0"])
def test_version_bump_keeps_every_row_sqlite(project, sqlite_url, old_version):
    project.write_topology(BASE.format(version=old_version))
    project.compile(f"at {old_version}")
    project.upgrade(sqlite_url)
    ids = [insert_message(sqlite_url, "Sales", body=bytes([n])) for n in range(50)]
    project.write_topology(BASE.format(version="9.1"))
    project.compile("to 9.1")
    project.upgrade(sqlite_url)

    rows = catalog.execute(sqlite_url, 'SELECT Id, Body FROM "Sales" ORDER BY RowVersion')
    assert [r[0] for r in rows] == ids  # every row, in FIFO order
    assert [r[1] for r in rows] == [bytes([n]) for n in range(50)]
    tables = catalog.read(sqlite_url)
    assert key(sqlite_url, "SubscriptionRouting") in tables
    assert key(sqlite_url, "Sales.Delayed") in tables
    assert "WHERE Expires IS NOT NULL" in tables[key(sqlite_url, "Sales")].indexes["Sales_Expires"]

    project.downgrade(sqlite_url, "-1", "discard_messages=false")
    tables = catalog.read(sqlite_url)
    assert tables[key(sqlite_url, "Sales")].rows == 50
    if old_version == "1.2":
        assert tables[key(sqlite_url, "Sales")].indexes == {}  # 1.x had no expiry index
        assert key(sqlite_url, "Sales.Delayed") not in tables


def test_widening_seq_keeps_rows_and_order_postgresql(project, pg_url):
    topology = BASE.format(version="8.1").replace("schema: dbo", "schema: public").replace("[mssql, sqlite]", "[postgresql]")
    project.write_topology(topology)
    project.compile("at 8.1")
    project.upgrade(pg_url)
    ids = [insert_message(pg_url, "Sales") for _ in range(20)]

    project.write_topology(topology.replace('"8.1"', '"9.1"') + "postgresql:\n  seq_type: bigserial\n")
    project.compile("9.1 with bigint seq")
    text = project.revisions()[-1].read_text()
    assert 'op.change_queue_seq_type("Sales", schema="public", from_type="serial", to_type="bigserial")' in text
    project.upgrade(pg_url)

    rows = catalog.execute(pg_url, 'SELECT id::text FROM "public"."Sales" ORDER BY seq')
    assert [r[0] for r in rows] == ids
    assert catalog.read(pg_url)[key(pg_url, "Sales")].columns["seq"] == ("BIGINT SERIAL", False)
    # past the int4 range the sequence keeps counting
    catalog.execute(pg_url, "SELECT setval(pg_get_serial_sequence('\"public\".\"Sales\"', 'seq'), 3000000000)")
    insert_message(pg_url, "Sales")
    assert catalog.execute(pg_url, 'SELECT max(seq) FROM "public"."Sales"') == [(3000000001,)]


def test_postgresql_refuses_versions_before_8_1(project, capsys):
    project.write_topology(BASE.format(version="4.0").replace("[mssql, sqlite]", "[postgresql]"))
    assert project.compile("x") == 2
    assert "PostgreSQL transport starts at version 8.1" in capsys.readouterr().err


def test_case_only_rename_is_refused(project, capsys):
    project.write_topology(BASE.format(version="9.1"))
    project.compile("first")
    project.write_topology(BASE.format(version="9.1").replace("name: error", "name: Error"))
    assert project.compile("rename") == 2
    assert "compares names without case" in capsys.readouterr().err
    assert len(project.revisions()) == 1


def test_cli_json_output_for_compile(project, capsys):
    project.write_topology(BASE.format(version="9.1"))
    assert cli.main(["compile", "-m", "x", "-c", str(project.ini), "--topology", str(project.topology), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["status"] == "compiled" and payload["revision"].endswith(".py")
    assert 'create queue "Sales" (schema "dbo") (transport 9.1)' in payload["changes"]


def test_quotes_and_backslashes_in_names_and_messages_keep_the_revision_valid(project, sqlite_url):
    name = 'Tri"""ple\\back'
    project.write_topology('transport_version: "9.1"\nengines: [sqlite]\nsubscriptions: false\nqueues:\n  - name: \'' + name + "'\n")
    assert project.compile('say """hi""" \\o/') == 0
    project.upgrade(sqlite_url)  # the revision imports and runs
    assert key(sqlite_url, name) in catalog.read(sqlite_url)
    assert project.compile("again") == 0 and len(project.revisions()) == 1  # the snapshot reads back exactly
