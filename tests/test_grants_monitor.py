"""Issue 31: a monitoring login from `grants --monitor` reads everything status and check read and
changes nothing; status under an endpoint's narrow login reports the tables it may not read and all
others; the start-up checks tell a table the login cannot see from a missing one. Real PostgreSQL;
SQL Server's monitoring grants as golden T-SQL that parses."""

from __future__ import annotations

import json
import logging

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from sqltransport_schema import cli
from sqltransport_schema.runtime.status import status
from sqltransport_schema.runtime.transport import NOT_VISIBLE, Transport

from .support.grants import MSSQL_TOPOLOGY, _conninfo, apply, deployed, headers, role, run_grants  # noqa: F401 (fixtures)
from .support.prometheus import Exporter, depths, one
from .support.tsql import parse_problems

TABLES = ['"public"."Sales"', '"public"."Sales.host-a"', '"public"."error"', '"public"."audit"', '"billing"."Billing"']
TABLES += ['"public"."Sales.Delayed"', '"billing"."Billing.Delayed"', '"public"."SubscriptionRouting"']


def role_url(url: str, login: str) -> str:
    return make_url(url).set(drivername="postgresql+psycopg", username=login).render_as_string(hide_password=False)


def status_as(url: str, capsys, *extra: str) -> tuple[int, str]:
    code = cli.main(["status", "--url", url, *extra])
    return code, capsys.readouterr().out


def seed(transport: Transport) -> None:
    with transport.engine.begin() as conn:
        transport.queue("Sales").send(conn, b"1", headers(1))
        transport.queue("Billing", "billing").send(conn, b"2", headers(2))
        transport.endpoint("Billing", "billing").send_delayed(conn, transport.queue("Billing", "billing"), b"d", headers("d"), due_after=60)


def test_monitor_grants_read_everything_and_write_nothing(project, deployed, role, monkeypatch, capsys):
    code, sql = run_grants(project, "--engine", "postgresql", "--login", role, "--monitor")
    assert code == 0
    body = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
    assert all(word not in body for word in ("INSERT", "UPDATE", "DELETE", "TRUNCATE", "CREATE", "ALTER", "DROP", "USAGE ON SEQUENCE"))
    apply(deployed, sql)
    owner = Transport.from_database(create_engine(make_url(deployed).set(drivername="postgresql+psycopg")))
    seed(owner)
    owner.engine.dispose()
    monkeypatch.chdir(project.root)
    url = role_url(deployed, role)
    for extra in ((), ("--estimate",)):
        code, out = status_as(url, capsys, "--format", "json", *extra)
        assert code == 0, out
        report = json.loads(out)
        assert all(t["readable"] and not t["missing"] for t in report["tables"])
        assert {t["name"]: t["depth"] for t in report["tables"]}["Billing.Delayed"] == 1
        for fmt in ("text", "markdown", "prometheus"):
            code, out = status_as(url, capsys, "--format", fmt, *extra)
            assert code == 0 and "not readable" not in out and "readable" not in out.replace("sqltransport_table_readable", "")
    code, out = status_as(url, capsys, "--format", "prometheus")
    assert "sqltransport_table_readable" in out and not any(line.endswith(" 0.0") for line in out.splitlines() if "readable{" in line)
    transport = Transport.from_database(create_engine(url))
    try:
        report = status(transport, high_water=True)  # the flow's high water reads each queue's sequence
        assert not report.unreadable and any(t.high_water for t in report.tables)
    finally:
        transport.engine.dispose()
    assert cli.main(["check", "--url", url, "-c", str(project.ini)]) == 0, capsys.readouterr()
    with psycopg.connect(_conninfo(deployed, role), autocommit=True) as conn:
        for table in TABLES:
            for statement in (
                f"INSERT INTO {table} DEFAULT VALUES",
                f"DELETE FROM {table}",
                f"TRUNCATE {table}",
                f"DROP TABLE {table}",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)


def test_status_under_an_endpoint_login_reports_what_it_cannot_read(project, deployed, role, monkeypatch, capsys, caplog):
    code, sql = run_grants(project, "--engine", "postgresql", "--login", role, "--endpoint", "Sales")
    apply(deployed, sql)
    owner = Transport.from_database(create_engine(make_url(deployed).set(drivername="postgresql+psycopg")))
    seed(owner)
    owner.engine.dispose()
    monkeypatch.chdir(project.root)
    url = role_url(deployed, role)
    code, out = status_as(url, capsys, "--format", "json")
    assert code == 1, out
    tables = {t["name"]: t for t in json.loads(out)["tables"]}
    unreadable = {name for name, t in tables.items() if not t["readable"]}
    assert unreadable == {"Billing", "Billing.Delayed", "error", "audit"}  # sends there (INSERT), reads none
    assert all(not t["missing"] and t["depth"] is None for name, t in tables.items() if name in unreadable)
    assert tables["Sales"]["depth"] == 1 and tables["Sales.Delayed"]["depth"] == 0 and tables["SubscriptionRouting"]["depth"] == 0
    code, out = status_as(url, capsys)
    assert code == 1 and "not readable by this login" in out and "4 table(s) are not readable by this login" in out
    code, out = status_as(url, capsys, "--format", "markdown")
    assert code == 1 and "| not readable by this login |" in out
    code, out = status_as(url, capsys, "--format", "prometheus")
    assert 'sqltransport_table_readable{address="Billing@[billing]",catalog="",kind="queue",' in out
    samples = [line for line in out.splitlines() if line.startswith("sqltransport_table_readable{")]
    assert sorted(line.rsplit(" ", 1)[1] for line in samples) == ["0.0"] * 4 + ["1.0"] * 4
    code, out = status_as(url, capsys, "--estimate", "--format", "json")
    assert code == 1 and {t["name"] for t in json.loads(out)["tables"] if not t["readable"]} == unreadable
    exporter = Exporter(url, "--min-interval", "0")  # status --serve under it: the same partial report
    try:
        for _ in range(2):  # the first read is refused and probes; the next skips what it may not read
            scraped = exporter.metrics()
            assert one(scraped, "sqltransport_up") == 1 and one(scraped, "sqltransport_status_read_failures_total") == 0
            readable = {labels["table"]: value for labels, value in scraped["sqltransport_table_readable"]}
            assert {table for table, value in readable.items() if value == 0} == unreadable
            assert depths(scraped)["Sales"] == 1 and "Billing" not in depths(scraped)
    finally:
        exporter.close()
    # the start-up warning: Billing.Delayed exists, the login cannot see it: grants, not an upgrade
    with caplog.at_level(logging.WARNING):
        transport = Transport.from_database(create_engine(url))
    transport.engine.dispose()
    warnings = [r.getMessage() for r in caplog.records if "Billing.Delayed" in r.getMessage()]
    assert warnings and all(NOT_VISIBLE in w and "grants" in w and "alembic upgrade" not in w for w in warnings)
    assert not any("alembic upgrade" in r.getMessage() for r in caplog.records)


def test_a_missing_table_is_still_missing_under_the_owner(project, deployed, caplog):
    apply(deployed, 'DROP TABLE "billing"."Billing.Delayed"')
    with caplog.at_level(logging.WARNING):
        transport = Transport.from_database(create_engine(make_url(deployed).set(drivername="postgresql+psycopg")))
    transport.engine.dispose()
    assert any("Billing.Delayed" in r.getMessage() and "is missing; run `alembic -x url=" in r.getMessage() for r in caplog.records)


MSSQL_MONITOR = [
    "GRANT SELECT ON [dbo].[alembic_version] TO [watch];",
    "GRANT SELECT ON [dbo].[sqltransport_blueprint] TO [watch];",
    "GRANT SELECT ON [dbo].[Sales] TO [watch];",
    "GRANT SELECT ON [dbo].[error] TO [watch];",
    "GRANT SELECT ON [dbo].[Sales.Delayed] TO [watch];",
    "GRANT SELECT ON [dbo].[SubscriptionRouting] TO [watch];",
    "USE [logistics];",
    "GRANT SELECT ON [dbo].[Shipping] TO [watch];",
    "GRANT SELECT ON [dbo].[Shipping.Delayed] TO [watch];",
    "-- status (--estimate: sys.partitions) and check read the catalog views, which show what SELECT is granted on.",
    "-- filters, defaults and computed columns need VIEW DEFINITION (not granted): check compares them as there, says so.",
]


def test_mssql_monitor_grants_golden_and_parse(project):
    project.write_topology(MSSQL_TOPOLOGY)
    code, sql = run_grants(project, "--engine", "mssql", "--login", "watch", "--monitor")
    assert code == 0
    lines = sql.splitlines()
    assert lines[0].startswith("-- sqltransport-schema grants: mssql, monitoring login (status, check: read only), transport 9.1")
    assert lines[1:] == MSSQL_MONITOR
    assert parse_problems(sql) == []


def test_monitor_takes_no_endpoint_and_is_not_the_installer(project, capsys):
    project.write_topology(MSSQL_TOPOLOGY)
    assert run_grants(project, "--engine", "postgresql", "--login", "x", "--monitor", "--endpoint", "Sales")[0] == 2
    assert run_grants(project, "--engine", "postgresql", "--login", "x", "--monitor", "--installer")[0] == 2
    assert "choose one" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["mysql", "oracle"])
def test_engines_without_generated_grants_advise_a_monitoring_login_to_read_only(project, engine):
    project.write_topology(MSSQL_TOPOLOGY)
    code, monitor = run_grants(project, "--engine", engine, "--login", "x", "--monitor")
    _, runtime = run_grants(project, "--engine", engine, "--login", "x")
    assert code == 0 and len(monitor.splitlines()) == 1
    assert "SELECT on the saga tables, nothing more" in monitor and "INSERT" not in monitor and "INSERT" in runtime


class _Error(Exception):
    """A driver error as each driver carries its code (psycopg's sqlstate, pymysql's args[0], pyodbc's native error)."""

    def __init__(self, *args: object, sqlstate: str | None = None) -> None:
        super().__init__(*args)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    "engine, error, denied",
    [
        ("postgresql", _Error("permission denied for table x", sqlstate="42501"), True),
        ("postgresql", _Error("relation does not exist", sqlstate="42P01"), False),
        ("mysql", _Error(1142, "SELECT command denied"), True),
        ("mysql", _Error(1146, "Table doesn't exist"), False),
        ("mssql", _Error("42000", "[ODBC Driver 18] The SELECT permission was denied on 'x' (229) (SQLExecDirectW)"), True),
        ("mssql", _Error("42S02", "[ODBC Driver 18] Invalid object name 'x'. (208) (SQLExecDirectW)"), False),
        ("sqlite", _Error("no such table"), False),
    ],
)
def test_permission_denied_is_recognised_by_each_engines_code(engine, error, denied):
    from sqltransport_schema import engines

    assert engines.get(engine).permission_denied(error) is denied


def test_a_table_granted_later_is_read_by_the_next_status(project, deployed, role):
    code, sql = run_grants(project, "--engine", "postgresql", "--login", role, "--endpoint", "Sales")
    apply(deployed, sql)
    transport = Transport.from_database(create_engine(role_url(deployed, role)), verify=False)
    try:
        assert {t.name for t in status(transport).unreadable} == {"Billing", "Billing.Delayed", "error", "audit"}
        apply(deployed, f'GRANT SELECT ON TABLE "public"."error" TO "{role}"')
        assert {t.name for t in status(transport).unreadable} == {"Billing", "Billing.Delayed", "audit"}
    finally:
        transport.engine.dispose()
