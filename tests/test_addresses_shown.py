"""Addresses and URLs shown the way the user and the engine know them (issue 39): the URL with the
scheme the user writes (`postgresql://`, not the `postgresql+psycopg://` of the engine made from it)
and its password masked; on SQLite, which has no schemas or catalogs, a table's address without
those parts (`Billing`, not `Billing@[billing]` or `Shipping@[]@[logistics]`), in status (text,
JSON, Prometheus) and retry. The canonical address, what headers and subscriptions hold, stays in
the JSON as `canonical_address`."""

from __future__ import annotations

import json

import pytest

from sqltransport_schema import cli, wire
from sqltransport_schema.runtime.exporter import exposition
from sqltransport_schema.runtime.operations import status
from sqltransport_schema.runtime.transport import Transport
from sqltransport_schema.urls import display_url

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
  - name: Billing
    schema: billing
  - name: Shipping
    catalog: logistics
    delayed_delivery: false
queues:
  - name: error
"""


def _status(url: str, capsys, *extra: str) -> str:
    capsys.readouterr()
    assert cli.main(["status", "--url", url, *extra]) == 0
    return capsys.readouterr().out


def test_sqlite_addresses_have_no_schema_or_catalog_parts(project, sqlite_url, capsys):
    project.deploy(sqlite_url, TOPOLOGY)
    text = _status(sqlite_url, capsys)
    rows = {line.split()[1]: line.split()[0] for line in text.splitlines()[2:] if line.strip()}
    assert {"Sales", "Billing", "Shipping", "Billing.Delayed", "error"} <= set(rows)
    assert "@[" not in text

    tables = {t["name"]: t for t in json.loads(_status(sqlite_url, capsys, "--format", "json"))["tables"]}
    assert (tables["Billing"]["address"], tables["Billing"]["schema"], tables["Billing"]["catalog"]) == ("Billing", None, None)
    assert tables["Billing"]["canonical_address"] == "Billing@[billing]"  # what a ReplyTo or FailedQ header holds
    assert (tables["Shipping"]["address"], tables["Shipping"]["canonical_address"]) == ("Shipping", "Shipping@[]@[logistics]")
    assert tables["Sales"]["canonical_address"] == tables["Sales"]["address"] == "Sales"

    transport = Transport.from_database(sqlite_url, str(project.ini))
    try:
        metrics = exposition(status(transport))
        assert 'sqltransport_table_depth{address="Billing",catalog="",kind="queue",schema="",table="Billing"} 0.0' in metrics
        assert "@[" not in metrics
        with transport.engine.begin() as conn:  # a failed message of Billing's, its FailedQ as the pump writes it
            headers = wire.standard_headers(message_id="m-1", enclosed_types=["Shop.Invoice"], reply_to=None)
            failed = {**headers, "NServiceBus.FailedQ": transport.queue("Billing").address}
            transport.queue("error").send(conn, b"x", failed)
        assert transport.queue("Billing").address == "Billing@[billing]"  # the header keeps the canonical address
    finally:
        transport.engine.dispose()
    capsys.readouterr()
    assert cli.main(["retry", "--url", sqlite_url, "--all", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["by_queue"] == [{"address": "Billing", "messages": 1}]


def test_postgresql_status_shows_the_url_as_the_user_writes_it(project, pg_url, capsys):
    project.deploy(pg_url, TOPOLOGY)
    given = pg_url.replace("postgresql+psycopg://", "postgresql://")
    text = _status(given, capsys)
    assert text.startswith(f"{given} (postgresql, transport 9.1)")
    assert json.loads(_status(given, capsys, "--format", "json"))["database"] == given
    tables = {t["name"]: t for t in json.loads(_status(given, capsys, "--format", "json"))["tables"]}
    assert (tables["Billing"]["address"], tables["Billing"]["schema"]) == ("Billing@[billing]", "billing")  # PostgreSQL's schemas


@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql+psycopg://app:secret@db/shop", "postgresql://app:***@db/shop"),
        ("postgresql://app:secret@db/shop", "postgresql://app:***@db/shop"),
        ("postgresql+psycopg2://app:secret@db/shop", "postgresql+psycopg2://app:***@db/shop"),  # a driver of the user's own choice
        ("mysql+pymysql://root@db/shop", "mysql://root@db/shop"),
        ("sqlite:///sqltransport.db", "sqlite:///sqltransport.db"),
    ],
)
def test_a_url_is_shown_with_the_scheme_people_write(url, shown):
    assert display_url(url) == shown
