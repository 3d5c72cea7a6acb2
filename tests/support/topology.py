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
