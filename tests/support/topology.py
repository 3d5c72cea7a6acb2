"""Topology texts several modules compile, and the format's JSON Schema as an editor would validate against it."""

from __future__ import annotations

import jsonschema

from sqltransport_schema.topology import json_schema


# JSON Schema
def validator():
    schema = json_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


# transport_version left to fill in: compile across versions, on SQL Server and SQLite
VERSIONED = """\
transport_version: "{version}"
engines: [mssql, sqlite]
endpoints:
  - name: Sales
    schema: dbo
    instances: [host-a]
queues:
  - name: error
    schema: dbo
"""


# instances, a schema, a BodyString column and a send-only endpoint: what the migrations tests deploy
MIGRATIONS = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a]
  - name: Billing
    schema: billing
    body_string: true
  - name: Notifier
    send_only: true
queues:
  - name: error
"""


# one endpoint on two instances: retiring an instance queue is the refused drop
TWO_INSTANCES = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a, host-b]
queues:
  - name: error
"""


# tenant placement (docs/tenants.md): every saga and outbox table in each tenant database
PLACEMENT = "tenants:\n  tables: [sagas, outbox]\n"

# Sales with its outbox and a saga, placed in tenant databases: what the tenant tests build
TENANT_PLACEMENT = f"""\
transport_version: "9.1"
engines: [postgresql, sqlite]
{PLACEMENT}endpoints:
  - name: Sales
    outbox: true
    sagas:
      - name: OrderSaga
        correlation: {{name: OrderId, type: string}}
queues:
  - name: error
"""

# the same deployed in one database: the start of the move to tenant placement
SINGLE_DATABASE = TENANT_PLACEMENT.replace(PLACEMENT, "")
