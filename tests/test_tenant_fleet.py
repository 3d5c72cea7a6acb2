"""A fleet of tenant databases (issue 42) on SQLite files and on PostgreSQL (a shared database and
three tenant databases on the local server): url_template/query targets are tenants by default, a
new saga reaches every tenant through `fleet upgrade`, a tenant added to the control table is built
by the next run, `fleet status --check` checks each database against its role's tables, and
`outbox cleanup --fleet` / `status --fleet` work target after target."""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.outbox import OutboxTable

from .support.commands import run
from .support.fleets import pg_databases, pg_url, run_fleet
from .support.topology import PLACEMENT, TENANT_PLACEMENT

TOPOLOGY = TENANT_PLACEMENT
RETURN_SAGA = """\
      - name: ReturnSaga
        correlation: {name: ReturnId, type: string}
"""
NOW = datetime.now(timezone.utc)
OLD = NOW - timedelta(days=3)
# message -> when it was dispatched (None: not yet); 3 old dispatched rows per tenant, cleaned in batches of 2
ROWS = {"m-1": OLD, "m-2": OLD - timedelta(hours=2), "m-3": OLD, "m-4": NOW, "m-5": None}


@contextmanager
def shared_and_tenants(kind: str, root):
    """(the shared database's URL, a url_template, the tenants' names) on SQLite files or PostgreSQL."""
    if kind == "sqlite":
        (root / "tenants").mkdir()
        yield "sqlite:///shared.db", "sqlite:///tenants/{name}.db", ["acme", "globex", "initech"]
        return
    with pg_databases(4) as names:
        yield pg_url(names[0]), pg_url("{name}"), names[1:]


def table_names(url: str) -> set[str]:
    engine = make_engine(url, poolclass=sa.pool.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_fleet_of_tenants_from_a_control_table(project, kind):
    root = project.root
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    with shared_and_tenants(kind, root) as (shared, template, tenants):

        def tenant_url(name: str) -> str:
            url = template.replace("{name}", name)
            return url.replace("sqlite:///", f"sqlite:///{root}/") if kind == "sqlite" else url

        with sqlite3.connect(root / "control.db") as control:
            control.execute("CREATE TABLE tenants (name TEXT, active INTEGER)")
            control.executemany("INSERT INTO tenants VALUES (?, 1)", [(name,) for name in tenants[:2]])
        (root / "fleet.yaml").write_text(
            f"targets:\n  - name: shared\n    url: {shared}\nurl_template: {template}\n"
            "query:\n  url: sqlite:///control.db\n  sql: SELECT name FROM tenants WHERE active = 1\n"
            "stages:\n  - name: shared\n    targets: [shared]\n  - name: tenants\n    parallel: 2\n"
        )
        first = run_fleet(root, "upgrade", "--format", "json")
        assert first.returncode == 0, first.stdout + first.stderr
        roles = {t["name"]: t["role"] for t in json.loads(first.stdout)["targets"]}
        assert roles == {"shared": "shared", tenants[0]: "tenant", tenants[1]: "tenant"}  # the template's and query's: tenants

        # a new saga, compiled once, reaches every tenant; the shared database holds no saga table
        project.write_topology(TOPOLOGY.replace("queues:", RETURN_SAGA + "queues:"))
        assert project.compile("ReturnSaga") == 0
        second = run_fleet(root, "upgrade", "--format", "json")
        assert second.returncode == 0, second.stdout + second.stderr
        outcomes = {t["name"]: t["outcome"] for t in json.loads(second.stdout)["targets"]}
        assert outcomes == dict.fromkeys(["shared", *tenants[:2]], "upgraded")
        shared_url = shared.replace("sqlite:///", f"sqlite:///{root}/") if kind == "sqlite" else shared
        placed = {"Sales_OrderSaga", "Sales_ReturnSaga", "Sales_OutboxData"}
        assert "Sales" in table_names(shared_url) and not placed & table_names(shared_url)
        for name in tenants[:2]:
            found = table_names(tenant_url(name))
            assert {"Sales_OrderSaga", "Sales_ReturnSaga", "Sales_OutboxData"} <= found and "Sales" not in found

        # a tenant added to the control table is built by the next run; the others cost a read
        with sqlite3.connect(root / "control.db") as control:
            control.execute("INSERT INTO tenants VALUES (?, 1)", (tenants[2],))
        third = run_fleet(root, "upgrade", "--format", "json")
        assert third.returncode == 0, third.stdout + third.stderr
        outcomes = {t["name"]: t["outcome"] for t in json.loads(third.stdout)["targets"]}
        assert outcomes == {"shared": "at_revision", tenants[0]: "at_revision", tenants[1]: "at_revision", tenants[2]: "upgraded"}
        assert {"Sales_OrderSaga", "Sales_ReturnSaga", "Sales_OutboxData"} <= table_names(tenant_url(tenants[2]))

        # each database checked against its role's tables
        status = run_fleet(root, "status", "--check", "--format", "json")
        assert status.returncode == 0, status.stdout + status.stderr
        checked = {t["name"]: (t["role"], t["drift"]["in_sync"]) for t in json.loads(status.stdout)["targets"]}
        assert checked == {"shared": ("shared", True), **{name: ("tenant", True) for name in tenants}}

        # outbox rows in each tenant: 3 dispatched days ago, 1 just now, 1 not dispatched
        for name in tenants:
            engine = make_engine(tenant_url(name), poolclass=sa.pool.NullPool)
            table = OutboxTable.from_database(engine, "Sales_OutboxData", config_file=str(project.ini))
            with engine.begin() as conn:
                for message_id, dispatched_at in ROWS.items():
                    table.store(conn, f"{name}-{message_id}", [])
                    if dispatched_at is not None:
                        table.set_dispatched(conn, f"{name}-{message_id}", dispatched_at)
            engine.dispose()

        figures = run(root, "status", "--fleet", "--format", "json")
        assert figures.returncode == 0, figures.stdout + figures.stderr
        report = {t["name"]: t for t in json.loads(figures.stdout)["targets"]}
        assert report["shared"]["tables"] == [] and report["shared"]["role"] == "shared"
        for name in tenants:
            by_table = {t["name"]: t for t in report[name]["tables"]}
            assert report[name]["role"] == "tenant"
            assert set(by_table) == {"Sales_OrderSaga", "Sales_ReturnSaga", "Sales_OutboxData"}
            outbox = by_table["Sales_OutboxData"]
            assert (outbox["depth"], outbox["undispatched"], outbox["dispatched"]) == (5, 1, 4)
            oldest = datetime.fromisoformat(outbox["oldest_dispatched_at"])
            assert abs(oldest - (OLD - timedelta(hours=2))) < timedelta(seconds=1)  # the engines keep milliseconds or less
            assert by_table["Sales_OrderSaga"]["depth"] == 0
        text = run(root, "status", "--fleet")
        assert text.returncode == 0
        assert f"{tenants[0]} (tenant): outbox Sales_OutboxData: 5 row(s), 1 not dispatched, oldest dispatched " in text.stdout

        cleaned = run(root, "outbox", "cleanup", "--fleet", "--older-than", "1d", "--batch-size", "2")
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        for name in tenants:  # 3 old rows in batches of 2: two batches, a progress line each, naming the tenant
            lines = [line for line in cleaned.stderr.splitlines() if line.startswith(f"outbox cleanup: {name}: ")]
            assert [line.split("Sales_OutboxData\": ")[1] for line in lines] == ["2 deleted in 1 batch(es)", "3 deleted in 2 batch(es)"]
            assert f"{name}: deleted 3 outbox row(s) dispatched before " in cleaned.stdout
        assert "shared: nothing to clean: the deployed topology has no outbox table" in cleaned.stdout
        assert cleaned.stdout.splitlines()[-1] == "4 target(s): 9 outbox row(s) deleted"
        after = json.loads(run(root, "status", "--fleet", "--format", "json").stdout)
        for target in after["targets"][1:]:
            outbox = next(t for t in target["tables"] if t["kind"] == "outbox")
            assert (outbox["depth"], outbox["undispatched"]) == (2, 1)  # the recent and the waiting rows stay

        # part of the fleet, several at once: --only, --exclude, --stage choose as fleet upgrade's do
        chosen = run(
            root, "outbox", "cleanup", "--fleet", "--older-than", "1d", "--stage", "tenants", "--exclude", tenants[1], "--parallel", "2",
            "--format", "json",
        )  # fmt: skip
        assert chosen.returncode == 0, chosen.stdout + chosen.stderr
        assert [t["name"] for t in json.loads(chosen.stdout)["targets"]] == [tenants[0], tenants[2]]


def test_a_listed_target_stays_shared_and_without_placement_every_target_is(project):
    project.write_topology(TOPOLOGY.replace(PLACEMENT, ""))
    assert project.compile("initial") == 0
    (project.root / "fleet.yaml").write_text("url_template: sqlite:///{name}.db\nnames: [a]\n")
    result = run_fleet(project.root, "upgrade", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["targets"][0]["role"] == "shared"  # no placement: one database holds every table
    assert {"Sales", "Sales_OrderSaga", "Sales_OutboxData"} <= table_names(f"sqlite:///{project.root / 'a.db'}")


def test_a_fleet_file_mistake_is_one_error_line(project):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    (project.root / "fleet.yaml").write_text("url_template: sqlite:///{name}.db\n")
    for command in (["status", "--fleet"], ["outbox", "cleanup", "--fleet", "fleet.yaml", "--older-than", "1d"]):
        result = run(project.root, *command)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.startswith("error: fleet.yaml:1:") and "url_template needs names" in result.stderr
        assert len(result.stderr.splitlines()) == 1


def test_fleet_with_url_or_a_repeating_format_is_refused(project):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    (project.root / "fleet.yaml").write_text("url_template: sqlite:///{name}.db\nnames: [a]\n")
    both = run(project.root, "outbox", "cleanup", "--fleet", "--url", "sqlite:///a.db", "--older-than", "1d")
    assert both.returncode == 2 and both.stderr.startswith("error: --url and --fleet: ")
    watch = run(project.root, "status", "--fleet", "--format", "prometheus")
    assert watch.returncode == 2 and watch.stderr.startswith("error: status --fleet prints text or --format json")
    assert not (project.root / "a.db").exists()  # nothing opened, nothing created
