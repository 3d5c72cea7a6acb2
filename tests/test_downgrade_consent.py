"""compile refuses a lowered transport_version unless --allow-downgrade: the refusal lists each table
change and what it loses, and writes nothing; with the flag the revision is written and upgrades."""

from __future__ import annotations

import json

from .support import catalog
from .support.catalog import key
from .support.messages import insert_message
from .support.topology import VERSIONED as BASE


def _refused(project, capsys, *extra: str) -> list[str]:
    before = {p: p.read_bytes() for p in project.revisions()}
    assert project.compile("lower", *extra) == 2
    assert {p: p.read_bytes() for p in project.revisions()} == before  # no new revision, none changed
    return capsys.readouterr().err.splitlines()


def test_lowering_to_2_0_is_refused_with_each_loss_then_compiled_with_consent(project, sqlite_url, capsys):
    project.write_topology(BASE.format(version="9.1"))
    project.compile("at 9.1")
    project.upgrade(sqlite_url)
    ids = [insert_message(sqlite_url, "Sales") for _ in range(3)]
    capsys.readouterr()

    project.write_topology(BASE.format(version="2.0"))
    header, *listed = _refused(project, capsys)
    assert header.startswith(f"error: {project.topology}:1:20: transport_version lowered from 9.1 to 2.0, which changes the tables")
    assert header.endswith("nothing was written. If that is what you want, compile it with --allow-downgrade")
    assert not any(line.startswith("error:") for line in listed)
    assert all(line.startswith("  ") for line in listed)
    assert '  queue "Sales" (schema "dbo") on mssql: Headers nvarchar(max) -> varchar(max): header text outside' in "\n".join(listed)
    host_a = '  queue "Sales.host-a" (schema "dbo") on mssql: '
    assert any(line.startswith(host_a) and "(non-Latin letters) is lost" in line for line in listed)
    sqlite_index = "the index on Expires dropped: the purge of expired messages reads the whole table"
    assert f'  queue "Sales" (schema "dbo") on sqlite: {sqlite_index}' in listed
    assert (
        '  delayed table "Sales.Delayed" (schema "dbo") dropped: the delayed messages it holds are lost (the upgrade refuses '
        "while it holds any); transport 2.0 has no native delayed delivery (from 3.1)"
    ) in listed
    assert (
        '  subscription table "SubscriptionRouting" dropped: the subscription rows it holds are lost (the upgrade refuses '
        "while it holds any); transport 2.0 has no subscription table (from 5.0)"
    ) in listed

    assert project.compile("lower", "--format", "json") == 2
    payload = json.loads(capsys.readouterr().err)
    assert payload["status"] == "error" and len(payload["details"]) == len(listed)

    assert project.compile("back to 2.0", "--allow-downgrade") == 0
    assert len(project.revisions()) == 2
    text = project.revisions()[-1].read_text()
    assert 'op.change_queue_version("Sales", schema="dbo", from_version="9.1", to_version="2.0")' in text
    assert 'op.drop_subscription_table("SubscriptionRouting", version="9.1")' in text
    project.upgrade(sqlite_url)
    tables = catalog.read(sqlite_url)
    assert key(sqlite_url, "SubscriptionRouting") not in tables and key(sqlite_url, "Sales.Delayed") not in tables
    assert [r[0] for r in catalog.execute(sqlite_url, 'SELECT Id FROM "Sales" ORDER BY RowVersion')] == ids
    assert project.compile("again") == 0  # nothing left to compile: no refusal
    assert len(project.revisions()) == 2


def test_lowering_without_table_changes_is_refused_too_postgresql(project, pg_url, capsys):
    topology = BASE.format(version="9.1").replace("schema: dbo", "schema: public").replace("[mssql, sqlite]", "[postgresql]")
    project.write_topology(topology)
    project.compile("at 9.1")
    project.upgrade(pg_url)
    capsys.readouterr()

    project.write_topology(topology.replace('"9.1"', '"8.1"'))
    header, *listed = _refused(project, capsys)
    assert header.startswith(f"error: {project.topology}:1:20: transport_version lowered from 9.1 to 8.1")
    assert listed == ["  no table changes; the runtime uses the statements of 8.1"]
    assert project.compile("lower", "--check") == 1  # --check reports it as a change to compile
    out = capsys.readouterr().out
    assert "It lowers transport_version: compile refuses it without --allow-downgrade and lists what it loses." in out

    assert project.compile("to 8.1", "--allow-downgrade") == 0
    assert len(project.revisions()) == 2
    project.upgrade(pg_url)
    assert catalog.execute(pg_url, "SELECT version_num FROM alembic_version") == [(project.revisions()[-1].name.split("_")[1],)]


def test_raising_the_version_needs_no_consent(project):
    project.write_topology(BASE.format(version="4.0"))
    project.compile("at 4.0")
    project.write_topology(BASE.format(version="9.1"))
    assert project.compile("to 9.1") == 0
    assert len(project.revisions()) == 2
