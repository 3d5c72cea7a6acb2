"""The topology format's JSON Schema, as an editor would validate against it."""

from __future__ import annotations

import jsonschema

from sqltransport_schema.topology import json_schema


# --------------------------------------------------------------------------- JSON Schema
def validator():
    schema = json_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)
