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
from sqltransport_schema.runtime.status import status
from sqltransport_schema.runtime.transport import Transport

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


def test_postgresql_addresses_keep_their_schema(project, pg_url, capsys):
    project.deploy(pg_url, TOPOLOGY)
    tables = {t["name"]: t for t in json.loads(_status(pg_url, capsys, "--format", "json"))["tables"]}
    assert (tables["Billing"]["address"], tables["Billing"]["schema"]) == ("Billing@[billing]", "billing")  # PostgreSQL's schemas
    assert tables["Billing"]["canonical_address"] == "Billing@[billing]"


@pytest.mark.parametrize("scheme", ["postgresql://", "postgres://", "postgresql+psycopg://"], ids=["postgresql", "postgres", "with-driver"])
def test_status_shows_the_url_as_given_password_masked(project, pg_url, capsys, scheme):
    """The scheme as the user wrote it (the engine made from `postgresql://` names psycopg), the password masked."""
    project.deploy(pg_url, TOPOLOGY)
    given = pg_url.replace("postgresql+psycopg://postgres@", scheme + "postgres:s3cret@")  # trust ignores the password
    shown = given.replace("s3cret", "***")
    assert _status(given, capsys).startswith(f"{shown} (postgresql, transport 9.1)")
    assert json.loads(_status(given, capsys, "--format", "json"))["database"] == shown
