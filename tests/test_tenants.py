"""Tenant placement (docs/tenants.md) on real SQLite files and PostgreSQL databases: one topology, a
shared database and several tenant databases, each built, checked, scripted, adopted and granted in
its role from one history; the move of a single-database deployment to tenant placement."""

from __future__ import annotations

import contextlib
import json

import pytest
from alembic.util import CommandError

from sqltransport_schema import cli, schema, topology
from sqltransport_schema.schema import SHARED, TENANT

from .support import catalog
from .support.catalog import execute
from .support.databases import pg_database
from .support.projects import REPO
from .support.scripts import run_pg, script
from .test_outbox import INSTALLER as OUTBOX_INSTALLER
from .test_outbox import TABLE as INSTALLER_OUTBOX
from .test_sagas_upstream import installer_ddl

PLACEMENT = "tenants:\n  tables: [sagas, outbox]\n"
EXAMPLE = (REPO / "topology.yaml").read_text(encoding="utf-8")
NEW_SAGA = "      - name: ReturnSaga\n        correlation: {name: ReturnId, type: string}\n"
TENANTS = 3


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request, tmp_path):
    """A shared database and TENANTS tenant databases on one engine: SQLite files or PostgreSQL databases."""
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path / f'db{i}.db'}" for i in range(TENANTS + 1)]
        return
    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(TENANTS + 1):
            made = pg_database()
            urls.append(next(made))
            stack.callback(lambda made=made: next(made, None))
        yield urls


def tables(url: str) -> set[tuple[str, str]]:
    """(schema or '', table) of every table except the migrations' own."""
    return {(schema_name or "", name) for schema_name, name in catalog.read(url)}


def expected(blueprint: schema.Blueprint, url: str) -> set[tuple[str, str]]:
    default = "" if url.startswith("sqlite") else "public"
    return {("" if url.startswith("sqlite") else spec.name.schema or default, spec.name.table) for spec in blueprint.tables}


def check(project, url: str, capsys, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli.main(["check", "--url", url, "-c", str(project.ini), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


def example_with_placement(*sagas: str) -> str:
    """The repository's example topology with tenant placement (and more sagas for Sales)."""
    text = EXAMPLE.replace("engines: [mssql, postgresql, sqlite]", "engines: [postgresql, sqlite]")
    text = text.replace("    catalog: logistics               # another database on SQL Server (three-part names)\n", "")
    anchor = "        transitional: {name: OrderNumber, type: string}   # the property it is moving to\n"
    return text.replace(anchor, anchor + "".join(sagas)) + PLACEMENT


# --------------------------------------------------------------------------- placement
def test_the_transport_tables_cannot_live_in_tenant_databases(tmp_path, capsys):
    path = tmp_path / "topology.yaml"
    path.write_text('transport_version: "9.1"\ntenants:\n  tables: [sagas, delayed]\nendpoints:\n  - name: Sales\n', encoding="utf-8")
    assert cli.main(["validate", "--topology", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3:19: error: tenants: delayed cannot live in tenant databases" in err
    assert "Remove 'delayed'; only sagas and outbox can be placed in tenant databases" in err


def test_placement_splits_the_blueprint_by_role():
    found = schema.blueprint(topology.loads(example_with_placement(), "topology.yaml"))
    shared, tenant = found.for_role(SHARED), found.for_role(TENANT)
    assert {spec.kind for spec in tenant.tables} == {schema.Kind.SAGA, schema.Kind.OUTBOX}
    assert not {spec.kind for spec in shared.tables} & {schema.Kind.SAGA, schema.Kind.OUTBOX}
    assert len(shared.tables) + len(tenant.tables) == len(found.tables)
    # without placement, the one database holds everything: the snapshot is as before
    plain = schema.blueprint(topology.loads(EXAMPLE, "topology.yaml"))
    assert plain.for_role(SHARED) is plain and plain.for_role(TENANT).tables == ()
    assert '"tenant"' not in plain.to_snapshot() and '"tenant": true' in found.to_snapshot()


# --------------------------------------------------------------------------- one history, two roles
def test_the_shared_and_each_tenant_database_get_their_own_tables_and_a_new_saga_reaches_every_tenant(project, databases, capsys):
    shared_url, *tenant_urls = databases
    project.write_topology(example_with_placement())
    assert project.compile("initial") == 0
    project.upgrade(shared_url)
    for url in tenant_urls:
        project.upgrade(url, "head", "role=tenant")
    whole = schema.blueprint(topology.load(project.topology))
    assert tables(shared_url) == expected(whole.for_role(SHARED), shared_url)
    for url in tenant_urls:
        assert tables(url) == expected(whole.for_role(TENANT), url)
        assert check(project, url, capsys, "--tenant")[0] == 0
    assert check(project, shared_url, capsys)[0] == 0
    code, report = check(project, tenant_urls[0], capsys)  # a tenant database checked as the shared one: drift
    assert code == 1 and {f["category"] for f in report["findings"]} >= {"missing_table", "unmanaged_table"}

    project.write_topology(example_with_placement(NEW_SAGA))
    assert project.compile("ReturnSaga") == 0
    assert cli.main(["compile", "--check", "-c", str(project.ini), "--topology", str(project.topology)]) == 0
    assert "tenant=True" in project.revisions()[-1].read_text(encoding="utf-8")
    project.upgrade(shared_url)
    for url in tenant_urls:
        project.upgrade(url, "head", "role=tenant")
        assert ("" if url.startswith("sqlite") else "public", "Sales_ReturnSaga") in tables(url)
        code, report = check(project, url, capsys, "--tenant")
        assert code == 0 and report["deployed_revision"] == project.head(), report
    assert not any(name == "Sales_ReturnSaga" for _, name in tables(shared_url))
    assert check(project, shared_url, capsys)[0] == 0


def test_an_unknown_role_is_refused(project, sqlite_url):
    project.write_topology(example_with_placement())
    assert project.compile("initial") == 0
    with pytest.raises(CommandError, match="-x role=tenants: a database's role is shared or tenant"):
        project.upgrade(sqlite_url, "head", "role=tenants")


# --------------------------------------------------------------------------- script, grants, adopt
def test_the_tenant_script_builds_a_tenant_database_and_runs_twice(project, pg_url, tmp_path, capsys):
    project.write_topology(example_with_placement())
    assert project.compile("initial") == 0
    text = script(project, tmp_path, "postgresql", "--tenant")
    assert "-- database: a tenant database (run it in each one)" in text
    assert 'CREATE TABLE IF NOT EXISTS "public"."Sales_OrderSaga"' in text and '"Sales.Delayed"' not in text
    shared = script(project, tmp_path, "postgresql")
    assert '"Sales_OrderSaga"' not in shared and '"Sales.Delayed"' in shared
    for _ in range(2):
        run_pg(pg_url, text)
    assert tables(pg_url) == expected(schema.blueprint(topology.load(project.topology)).for_role(TENANT), pg_url)
    assert check(project, pg_url, capsys, "--tenant")[0] == 0


def test_grants_of_a_tenant_database_name_its_tables_only(project, capsys):
    project.write_topology(example_with_placement())
    capsys.readouterr()
    base = ["grants", "--engine", "postgresql", "--role", "app", "--topology", str(project.topology)]
    assert cli.main([*base, "--tenant"]) == 0
    tenant = capsys.readouterr().out
    assert cli.main(base) == 0
    shared = capsys.readouterr().out
    assert "in each tenant database" in tenant.splitlines()[0]
    assert '"Sales_OrderSaga"' in tenant and '"Bill_OutboxData"' in tenant and '"Sales.Delayed"' not in tenant
    assert '"Sales_OrderSaga"' not in shared and '"Bill_OutboxData"' not in shared and '"Sales.Delayed"' in shared


ADOPTED = """\
transport_version: "9.1"
engines: [postgresql]
tenants:
  tables: [sagas, outbox]
endpoints:
  - name: Sales
    outbox: true
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: string}
queues:
  - name: error
"""


def test_a_tenant_database_made_by_sql_persistences_installer_is_adopted(project, pg_url, capsys):
    outbox = [statement.replace(INSTALLER_OUTBOX, "Sales_OutboxData") for statement in OUTBOX_INSTALLER["postgresql"]]
    execute(pg_url, *installer_ddl(pg_url, {"OrderId": "character varying(200)"}), *outbox)
    project.write_topology(ADOPTED)
    assert project.compile("initial") == 0
    capsys.readouterr()
    code = cli.main(["adopt", "--url", pg_url, "-c", str(project.ini), "--tenant", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["status"] == "matches_head" and report["action"] == "stamped", report
    assert {t["table"] for t in report["tables"]} == {"public.Sales_OrderSaga", "public.Sales_OutboxData"}
    assert check(project, pg_url, capsys, "--tenant")[0] == 0
    project.upgrade(pg_url, "head", "role=tenant")  # at head: nothing to run, and no queue made here
    assert {name for _, name in tables(pg_url)} == {"Sales_OrderSaga", "Sales_OutboxData"}


# --------------------------------------------------------------------------- the move
SINGLE = """\
transport_version: "9.1"
engines: [postgresql, sqlite]
endpoints:
  - name: Sales
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: string}
"""


def test_moving_a_single_database_to_tenant_placement_keeps_its_sagas_unless_told(project, databases, capsys):
    shared_url, tenant_url = databases[:2]
    project.deploy(shared_url, SINGLE)
    columns = '"Id", "Metadata", "Data", "PersistenceVersion", "SagaTypeVersion", "Concurrency"'
    if shared_url.startswith("sqlite"):
        columns = columns.replace('"', "")
    execute(
        shared_url,
        f"INSERT INTO \"Sales_OrderSaga\" ({columns}) VALUES ('6f9619ff-8b86-d011-b42d-00c04fc964ff', '{{}}', '{{}}', '1', '1', 1)",
    )
    project.write_topology(SINGLE + "tenants:\n  tables: [sagas]\n")
    assert project.compile("tenant placement") == 0
    revision = project.revisions()[-1].read_text(encoding="utf-8")
    assert 'op.drop_saga_table("Sales_OrderSaga"' in revision and 'op.create_saga_table("Sales_OrderSaga"' in revision
    assert cli.main(["compile", "--check", "-c", str(project.ini), "--topology", str(project.topology)]) == 0

    with pytest.raises(CommandError, match='refusing to drop saga table .*Sales_OrderSaga.*: it still holds saga instances'):
        project.upgrade(shared_url)
    assert any(name == "Sales_OrderSaga" for _, name in tables(shared_url))  # nothing dropped, nothing stamped

    project.upgrade(shared_url, "head", "discard=Sales_OrderSaga")  # consent: the sagas go with it
    assert not any(name == "Sales_OrderSaga" for _, name in tables(shared_url))
    project.upgrade(tenant_url, "head", "role=tenant")
    assert {name for _, name in tables(tenant_url)} == {"Sales_OrderSaga"}
    assert check(project, shared_url, capsys)[0] == 0 and check(project, tenant_url, capsys, "--tenant")[0] == 0
