"""The move of a single-database deployment to tenant placement, its rows carried by the Spark
pipeline (`pipeline tenants`, docs/tenants.md): on PostgreSQL (a shared database and three tenant
databases made and dropped here) and on SQLite files, under a real local[2] Spark session. Saga rows
go to their tenant by a property of Data, outbox rows by a header of their first message; each row
lands in its tenant's table exactly once across reruns; a row whose tenant is unknown stays in the
shared table, and while one does the shared database's upgrade is refused; once the shared tables
are empty it drops them without consent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
import sqlalchemy as sa
from alembic.util import CommandError

from sqltransport_schema import cli
from sqltransport_schema.db import make_engine
from sqltransport_schema.pipeline.move import FAILPOINT_ENV, FAILPOINT_FILE_ENV
from sqltransport_schema.runtime.outbox import OutboxTable, OutgoingOperation

from .support import catalog
from .support.databases import pg_databases
from .support.topology import SINGLE_DATABASE, TENANT_PLACEMENT

TENANTS = ("t0", "t1", "t2")
SAGAS = 12  # saga i belongs to TENANTS[i % 3]
HEADER = "Shop.Tenant"


@pytest.fixture(params=["postgresql", "sqlite"])
def databases(request, tmp_path):
    """The shared database and one per tenant: PostgreSQL databases, or SQLite files."""
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path / f'{name}.db'}" for name in ("shared", *TENANTS)]
        return
    yield from pg_databases(len(TENANTS) + 1)


def _saga(url: str, saga_id: str, data: dict) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                'INSERT INTO "Sales_OrderSaga" ("Id", "Metadata", "Data", "PersistenceVersion", "SagaTypeVersion", "Concurrency", '
                '"Correlation_OrderId") VALUES (:id, :metadata, :data, :version, :version, :concurrency, :order)'
            ),
            {"id": saga_id, "metadata": "{}", "data": json.dumps(data), "version": "8.0.0", "concurrency": 1, "order": data["OrderId"]},
        )
    engine.dispose()


def _outbox(project, url: str, message_id: str, tenant: str) -> None:
    engine = make_engine(url)
    table = OutboxTable.from_database(engine, "Sales_OutboxData", config_file=str(project.ini))
    with engine.begin() as conn:
        table.store(conn, message_id, [OutgoingOperation(f"{message_id}-out", b"{}", {HEADER: tenant}, {"Destination": "Billing"})])
    engine.dispose()


def _rows(url: str, table: str, key: str) -> list[str]:
    found = catalog.execute(url, f'SELECT "{key}" FROM "{table}"')
    return [str(row[0]) for row in found]


def _everywhere(urls: list[str], table: str, key: str) -> Counter:
    """(key, tenant) -> how many times its tenant's table holds it."""
    return Counter((row, tenant) for tenant, url in zip(TENANTS, urls) for row in _rows(url, table, key))


def _tenants(project, shared: str, *extra: str) -> tuple[int, dict]:
    argv = ["pipeline", "tenants", "-c", str(project.ini), "--url", shared, "--fleet", str(project.root / "fleet.yaml")]
    argv += ["--tenant-property", "TenantId", "--tenant-header", HEADER, "--format", "json", *extra]
    code = cli.main(argv)
    return code, json.loads(project.capsys.readouterr().out)


def _single_then_placed(project, shared: str, tenant_urls: list[str], *strays: tuple[str, dict]) -> tuple[dict, dict]:
    """SINGLE_DATABASE deployed in `shared` with SAGAS sagas (and the strays) and 6 outbox rows, then
    TENANT_PLACEMENT compiled, the tenant databases upgraded and named in fleet.yaml; returns
    ({saga id: tenant}, {message id: tenant})."""
    project.deploy(shared, SINGLE_DATABASE)
    sagas = {str(uuid.UUID(int=i + 1)): TENANTS[i % 3] for i in range(SAGAS)}
    for i, (saga_id, tenant) in enumerate(sagas.items()):
        _saga(shared, saga_id, {"OrderId": f"o-{i}", "TenantId": tenant, "Lines": [i]})
    for saga_id, data in strays:
        _saga(shared, saga_id, data)
    messages = {f"m-{i}": TENANTS[i % 3] for i in range(6)}
    for message_id, tenant in messages.items():
        _outbox(project, shared, message_id, tenant)
    project.write_topology(TENANT_PLACEMENT)
    assert project.compile("tenant placement") == 0
    for url in tenant_urls:
        project.upgrade(url, "head", "role=tenant")
    fleet = "targets:\n  - name: shared\n    url: " + shared + "\n"
    fleet += "".join(f"  - name: {t}\n    url: {u}\n    role: tenant\n" for t, u in zip(TENANTS, tenant_urls))
    (project.root / "fleet.yaml").write_text(fleet, encoding="utf-8")
    return sagas, messages


def test_the_pipeline_carries_each_row_to_its_tenant_once(project, databases, spark, capsys):
    project.capsys = capsys
    shared, *tenant_urls = databases
    lost, stranger = str(uuid.UUID(int=100)), str(uuid.UUID(int=101))
    strays = ((lost, {"OrderId": "o-lost"}), (stranger, {"OrderId": "o-stranger", "TenantId": "t9"}))  # no tenant; one not named
    sagas, messages = _single_then_placed(project, shared, tenant_urls, *strays)
    with pytest.raises(
        CommandError, match=r"refusing to drop saga table .*Sales_OrderSaga.* \(saga instances\), outbox table .*: they still hold rows"
    ):
        project.upgrade(shared)

    # copy without consent: every known row in its tenant, the shared tables untouched; the two strays reported
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    code, report = _tenants(project, shared)
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs + 2  # a Spark job per table carried the rows
    assert code == 1 and report["unsettled"] == 2, report
    saga_table = next(t for t in report["tables"] if t["kind"] == "saga")
    assert saga_table["unknown"] == {"": 1, "t9": 1} and saga_table["rows"] == SAGAS + 2
    assert {t["tenant"]: (t["carried"], t["deleted"]) for t in saga_table["tenants"]} == dict.fromkeys(TENANTS, (4, 0))
    assert _everywhere(tenant_urls, "Sales_OrderSaga", "Id") == Counter(sagas.items())
    assert _everywhere(tenant_urls, "Sales_OutboxData", "MessageId") == Counter(messages.items())
    assert len(_rows(shared, "Sales_OrderSaga", "Id")) == SAGAS + 2 and len(_rows(shared, "Sales_OutboxData", "MessageId")) == 6

    # a copy cut short (a row missing in t1), rerun with consent: the missing row carried again, none twice
    victim = next(saga_id for saga_id, tenant in sagas.items() if tenant == "t1")
    catalog.execute(tenant_urls[1], f"DELETE FROM \"Sales_OrderSaga\" WHERE \"Id\" = '{victim}'")
    code, report = _tenants(project, shared, "--delete-source")
    assert code == 1 and report["unsettled"] == 2, report
    saga_table = next(t for t in report["tables"] if t["kind"] == "saga")
    by_tenant = {t["tenant"]: (t["carried"], t["present"], t["deleted"]) for t in saga_table["tenants"]}
    assert by_tenant == {"t0": (0, 4, 4), "t1": (1, 3, 4), "t2": (0, 4, 4)}
    assert _everywhere(tenant_urls, "Sales_OrderSaga", "Id") == Counter(sagas.items())
    assert _everywhere(tenant_urls, "Sales_OutboxData", "MessageId") == Counter(messages.items())
    assert sorted(_rows(shared, "Sales_OrderSaga", "Id")) == sorted([lost, stranger])  # left in place, never dropped
    assert _rows(shared, "Sales_OutboxData", "MessageId") == []
    with pytest.raises(CommandError, match=r"refusing to drop saga table .*Sales_OrderSaga.*: it still holds saga instances"):
        project.upgrade(shared)  # two sagas still there: refused as before

    # the strays named: carried too; the shared saga table is empty and its upgrade needs no consent
    engine = make_engine(shared)
    with engine.begin() as conn:
        for saga_id, tenant in ((lost, "t0"), (stranger, "t2")):
            conn.execute(
                sa.text('UPDATE "Sales_OrderSaga" SET "Data" = :data WHERE "Id" = :id'),
                {"data": json.dumps({"TenantId": tenant}), "id": saga_id},
            )
    engine.dispose()
    code, report = _tenants(project, shared, "--delete-source")
    assert code == 0 and report["unsettled"] == 0, report
    assert _everywhere(tenant_urls, "Sales_OrderSaga", "Id") == Counter({**sagas, lost: "t0", stranger: "t2"}.items())
    project.upgrade(shared)
    assert not {"Sales_OrderSaga", "Sales_OutboxData"} & {name for _, name in catalog.read(shared)}
    data = catalog.execute(tenant_urls[0], f"SELECT \"Data\" FROM \"Sales_OrderSaga\" WHERE \"Id\" = '{next(iter(sagas))}'")
    assert json.loads(data[0][0] if isinstance(data[0][0], str) else json.dumps(data[0][0]))["Lines"] == [0]  # the row as it was


@pytest.mark.slow
@pytest.mark.parametrize("point", ["tenant-before-dest-commit:1", "tenant-after-dest-commit:0", "tenant-after-source-delete:1"])
@pytest.mark.parametrize("databases", ["postgresql"], indirect=True)
def test_a_killed_tenant_move_reruns_to_each_row_once(project, databases, spark, capsys, tmp_path, point):
    """The job's process group (driver, JVM, workers) SIGKILLed at a point of a batch, then run again."""
    project.capsys = capsys
    shared, *tenant_urls = databases
    sagas, messages = _single_then_placed(project, shared, tenant_urls)
    marker = tmp_path / "reached"
    env = {**os.environ, FAILPOINT_ENV: point, FAILPOINT_FILE_ENV: str(marker)}
    argv = [sys.executable, "-m", "sqltransport_schema.cli", "pipeline", "tenants", "-c", str(project.ini), "--url", shared]
    argv += ["--fleet", str(project.root / "fleet.yaml"), "--tenant-property", "TenantId", "--tenant-header", HEADER]
    argv += ["--delete-source", "--batch-size", "2", "--master", "local[2]"]
    job = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert job.poll() is None, job.communicate()
            assert time.monotonic() < deadline, f"the job never reached {point}"
            time.sleep(0.1)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    left = len(_rows(shared, "Sales_OrderSaga", "Id")) + len(_rows(shared, "Sales_OutboxData", "MessageId"))
    carried = sum(_everywhere(tenant_urls, "Sales_OrderSaga", "Id").values()) + sum(
        _everywhere(tenant_urls, "Sales_OutboxData", "MessageId").values()
    )
    assert left > 0 and carried > 0  # killed midway: rows in the tenants, rows still in the shared tables

    code, report = _tenants(project, shared, "--delete-source")
    assert code == 0 and report["unsettled"] == 0, report
    assert _everywhere(tenant_urls, "Sales_OrderSaga", "Id") == Counter(sagas.items())
    assert _everywhere(tenant_urls, "Sales_OutboxData", "MessageId") == Counter(messages.items())
    assert _rows(shared, "Sales_OrderSaga", "Id") == [] and _rows(shared, "Sales_OutboxData", "MessageId") == []
    project.upgrade(shared)  # the emptied tables dropped, no consent asked


def test_a_tenant_move_without_a_tenant_option_is_one_error_line(project, sqlite_url, capsys):
    project.deploy(sqlite_url, TENANT_PLACEMENT)
    capsys.readouterr()
    assert cli.main(["pipeline", "tenants", "-c", str(project.ini), "--url", sqlite_url, "--tenant-url", "sqlite:///{name}.db"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: name where a row's tenant is: --tenant-column NAME") and err.count("\n") == 1
    argv = [
        "pipeline",
        "tenants",
        "-c",
        str(project.ini),
        "--url",
        sqlite_url,
        "--tenant-column",
        "Tenant",
        "--tenant-url",
        "sqlite:///x.db",
    ]
    assert cli.main(argv) == 2
    assert "put {name} where the tenant goes" in capsys.readouterr().err
