"""Grants on a real PostgreSQL: the topology they are made for, a role made and dropped per test, and
running `grants` in process (test_grants, test_grants_monitor)."""

from __future__ import annotations

import contextlib
import io
import uuid

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from sqltransport_schema import cli, wire
from sqltransport_schema.runtime.transport import Transport

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a]
  - name: Billing
    schema: billing
queues:
  - name: error
  - name: audit
"""


def run_grants(project, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["grants", "-c", str(project.ini), "--topology", str(project.topology), *args])
    return code, out.getvalue()


@pytest.fixture
def deployed(project, pg_url):
    return project.deploy(pg_url, TOPOLOGY)


@pytest.fixture
def role(deployed):
    name = f"sqlts_role_{uuid.uuid4().hex[:10]}"
    admin = psycopg.connect(_conninfo(deployed), autocommit=True)
    admin.execute(f'CREATE ROLE "{name}" LOGIN')
    try:
        yield name
    finally:
        # the test database (and the grants with it) is dropped by pg_url; drop what remains.
        admin.execute(f'DROP OWNED BY "{name}"')
        admin.close()
        with psycopg.connect(_conninfo(deployed).replace(f"dbname={_dbname(deployed)}", "dbname=postgres"), autocommit=True) as other:
            other.execute(f'DROP ROLE IF EXISTS "{name}"')


def _dbname(url: str) -> str:
    return make_url(url).database


def _conninfo(url: str, user: str = "postgres") -> str:
    parsed = make_url(url)
    return f"host={parsed.host} port={parsed.port or 5432} dbname={parsed.database} user={user}"


def apply(url: str, sql: str) -> None:
    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        conn.execute(sql)


def as_role(url: str, role: str) -> Transport:
    parsed = make_url(url).set(drivername="postgresql+psycopg", username=role)
    return Transport(create_engine(parsed), "9.1", subscription_table=None)


def headers(n) -> dict[str, str]:
    return {
        **wire.standard_headers(message_id=str(uuid.uuid4()), enclosed_types=["Shop.OrderPlaced"], reply_to="Sales@[public]"),
        "n": str(n),
    }


MSSQL_TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
  - name: Shipping
    catalog: logistics
queues:
  - name: error
"""
