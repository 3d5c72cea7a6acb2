"""The topology format, declared once: FORMAT drives validation (reader.py) and generates the
JSON Schema that editors use, so the two can never disagree."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import engines as engine_registry
from ..defaults import DEFAULT_DELAYED_SUFFIX, DEFAULT_SUBSCRIPTION_TABLE
from ..schema import CORRELATION_TYPES
from ..versions import LATEST


@dataclass(frozen=True)
class Field:
    type: str  # string | name | boolean | version | enum | list | object | count (n >= 1) | limit (n >= 0 or n%)
    doc: str
    required: bool = False
    default: Any = None
    items: Field | None = None
    fields: dict[str, Field] | None = None
    values: tuple[str, ...] = ()
    allow_false: bool = False  # an object that may also be written `false` (= none)
    title: str = ""


def _name(doc: str, required: bool = False) -> Field:
    return Field("name", doc, required=required)


PLACEMENT = {
    "schema": _name("Database schema; defaults to default_schema (engine default: dbo on SQL Server, public on PostgreSQL)."),
    "catalog": _name("Database (catalog) on SQL Server, for three-part names (transport 3.1+); defaults to default_catalog."),
}


def _correlation(doc: str, required: bool = False) -> Field:
    return Field(
        "object",
        doc,
        required=required,
        title="correlation property",
        fields={
            "name": _name("Property name on the saga data; the column is Correlation_<name> (CORR_<NAME> on Oracle).", required=True),
            "type": Field(
                "enum",
                "The property's .NET type: string, int, guid, datetime or datetimeoffset (SQL Server and SQLite only).",
                required=True,
                values=CORRELATION_TYPES,
            ),
        },
    )


SAGA = Field(
    "object",
    "A saga of SQL persistence: its table <table_prefix><table_suffix or name> with correlation columns.",
    title="saga",
    fields={
        "name": _name("Saga name (the saga type's name); the table suffix unless table_suffix is set.", required=True),
        "table_suffix": _name("Table suffix instead of the saga name."),
        "correlation": _correlation(
            "The correlation property: a column with a unique index that ignores NULLs. Optional, as in SQL persistence: "
            "a saga without one is found by its Id (or a custom finder) only."
        ),
        "transitional": _correlation(
            "A transitional correlation property: an extra column and unique index that every save writes (SQL persistence "
            "never looks sagas up by it; this project's runtime can). Promote it by making it the correlation property "
            "once every saga has a value."
        ),
    },
)

ENDPOINT = Field(
    "object",
    "A logical endpoint: its input queue, instance-specific queues and delayed-delivery table.",
    title="endpoint",
    fields={
        "name": _name("Endpoint name = the input queue's table name.", required=True),
        **PLACEMENT,
        "instances": Field(
            "list",
            "Instance discriminators; each adds a secondary queue <name>.<discriminator>.",
            items=_name("Instance discriminator, e.g. a host name."),
            default=[],
        ),
        "delayed_delivery": Field(
            "boolean",
            "Native delayed delivery table <name>.<suffix> (transport 3.1+). Default: on when the version has it.",
        ),
        "send_only": Field("boolean", "A send-only endpoint owns no tables.", default=False),
        "body_string": Field(
            "boolean",
            "Add the computed BodyString column (transport 4.1+; PostgreSQL from 8.1.13 and 9.0.2).",
            default=False,
        ),
        "protected": Field(
            "boolean",
            "Its queue tables are never dropped by a migration without a drop_protected entry. Default: false.",
        ),
        "table_prefix": Field("string", "Prefix of the endpoint's saga tables. Default: the endpoint name with . replaced by _, then _."),
        "sagas": Field("list", "Sagas of the endpoint (SQL persistence saga tables).", items=SAGA, default=[]),
        "outbox": Field(
            "boolean",
            "The endpoint runs SQL persistence's outbox: its table <table_prefix>OutboxData (Oracle <PREFIX>OD), see docs/outbox.md.",
            default=False,
        ),
    },
)

QUEUE = Field(
    "object",
    "A plain queue, such as error or audit.",
    title="queue",
    fields={
        "name": _name("Queue table name.", required=True),
        **PLACEMENT,
        "protected": Field(
            "boolean",
            "Never dropped by a migration without a drop_protected entry. Default: true for error and audit, else false.",
        ),
        "archive": _name(
            "An archive table beside the queue (same schema and catalog): the console moves failed messages there "
            "instead of deleting them, restores them and purges them by age (docs/console.md)."
        ),
    },
)

ACTION_LOG = Field(
    "object",
    "The console's action log: a table of who did what, when, to how many messages (docs/console.md).",
    title="action log",
    fields={"table": _name("Table name, e.g. ConsoleActions.", required=True), **PLACEMENT},
)

SUBSCRIPTIONS = Field(
    "object",
    f"The shared subscription table (transport 5.0+). Write `false` for none; omit for the default {DEFAULT_SUBSCRIPTION_TABLE}.",
    title="subscriptions",
    allow_false=True,
    fields={"table": _name("Table name.", required=True), **PLACEMENT},
)

DISCARD = Field(
    "object",
    "A table removed from the topology whose messages may be dropped with it.",
    title="discarded table",
    fields={"name": _name("Table name as it was deployed (e.g. Sales.host-a).", required=True), **PLACEMENT},
)

DROP_PROTECTED = Field(
    "object",
    "A protected queue removed from the topology that its migration may drop.",
    title="protected queue to drop",
    fields={"name": _name("Queue table name as it was deployed (e.g. audit).", required=True), **PLACEMENT},
)

# What `tenants: {tables: [...]}` may name: the kinds SQL persistence keeps in each tenant's database,
# and the transport's own, which stay in the shared database (named so that validation says why).
TENANT_TABLES = ("sagas", "outbox")
SHARED_ONLY_TABLES = ("queues", "delayed", "subscriptions")

TENANTS = Field(
    "object",
    "SQL persistence's multi-tenant mode (docs/tenants.md): the tables that live in every tenant's own database; "
    "everything else stays in the shared database with the transport's queues.",
    title="tenant databases",
    fields={
        "tables": Field(
            "list",
            "The SQL persistence tables in every tenant database: sagas (every saga table), outbox (every outbox table). "
            "The transport's queues, delayed and subscription tables stay in the shared database.",
            required=True,
            items=Field("enum", "A kind of table.", values=TENANT_TABLES + SHARED_ONLY_TABLES),
        ),
    },
)

INCLUDE = Field(
    "list",
    "Further files of the topology (endpoints, queues, discard, drop_protected and include only): paths or glob "
    "patterns (*, ?, [...], ** for any depth; matches taken in sorted order) relative to this file.",
    items=Field("string", "A file, e.g. teams/sales.yaml, or a pattern, e.g. teams/*.yaml."),
    default=[],
)

FORMAT = Field(
    "object",
    "sqltransport-schema topology",
    title="topology",
    fields={
        "transport_version": Field(
            "version", f'Transport schema version the tables follow, as a string: "{LATEST}", "4.3.1", "1.2".', required=True
        ),
        "engines": Field(
            "list",
            "Engines this topology must be deployable to; names are checked against each engine's limits.",
            items=Field("enum", "Engine name.", values=tuple(engine_registry.ENGINES)),
            default=list(engine_registry.TRANSPORT_ENGINES),
        ),
        "default_schema": _name("Schema for every table that names none (default: the engine's default schema)."),
        "default_catalog": _name("Catalog for every table that names none (SQL Server three-part names)."),
        "delayed_table_suffix": Field("name", "Suffix of delayed-delivery tables.", default=DEFAULT_DELAYED_SUFFIX),
        "subscriptions": SUBSCRIPTIONS,
        "postgresql": Field(
            "object",
            "Options for the PostgreSQL layout.",
            title="postgresql options",
            fields={
                "seq_type": Field(
                    "enum",
                    "Queue Seq column: serial (int4, the transport's own DDL, wraps at 2^31) or bigserial (the fix).",
                    values=("serial", "bigserial"),
                    default="serial",
                ),
                "online_rewrites": Field(
                    "boolean",
                    "Compile marks each rewrite of a queue (Seq type, BodyString) online=True: built beside the live "
                    "table and swapped in one short transaction (docs/live-migrations.md).",
                    default=False,
                ),
            },
        ),
        "endpoints": Field("list", "Logical endpoints.", items=ENDPOINT, default=[]),
        "queues": Field("list", "Plain queues (error, audit, ...).", items=QUEUE, default=[]),
        "discard": Field(
            "list",
            "Tables to drop even though they may still hold messages (deliberately discarded).",
            items=DISCARD,
            default=[],
        ),
        "drop_protected": Field(
            "list",
            "Protected queues (error, audit, protected: true) that a migration may drop, one entry per queue.",
            items=DROP_PROTECTED,
            default=[],
        ),
        "tenants": TENANTS,
        "action_log": ACTION_LOG,
        "include": INCLUDE,
    },
)

# What an included file may hold: the lists each team adds to; the settings of the whole topology
# (transport_version, engines, defaults, subscriptions, postgresql) stay in the root file.
INCLUDED = Field(
    "object",
    "A file the topology includes",
    title="included file",
    fields={key: FORMAT.fields[key] for key in ("endpoints", "queues", "discard", "drop_protected", "include")},
)
ROOT_ONLY = tuple(key for key in FORMAT.fields if key not in INCLUDED.fields)


def field_schema(f: Field) -> dict:
    """The JSON Schema of one Field (of topology.yaml, or of another file read by the same Reader: fleet.yaml)."""

    def nullable(out: dict) -> dict:
        # an explicit null means "use the default", as the loader reads it
        if "anyOf" in out:
            out["anyOf"].append({"type": "null"})
        elif "enum" in out:
            out["type"] = [out["type"], "null"]
            out["enum"] = out["enum"] + [None]
        else:
            out["type"] = [out["type"], "null"]
        return out

    def convert(f: Field) -> dict:
        out: dict[str, Any] = {"description": f.doc}
        if f.type in ("string", "name"):
            out.update(type="string", minLength=1)
            if f.type == "name":
                out["pattern"] = r"\S"
        elif f.type == "version":
            out.update(type="string", pattern=r"^[1-9]\.\d+(\.\d+)?$", examples=[LATEST, "4.3.1", "1.2"])
        elif f.type == "boolean":
            out["type"] = "boolean"
        elif f.type == "count":
            out.update(type="integer", minimum=1)
        elif f.type == "limit":
            out["anyOf"] = [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^\d+(\.\d+)?%$"}]
        elif f.type == "enum":
            out.update(type="string", enum=list(f.values))
        elif f.type == "list":
            out.update(type="array", items=convert(f.items), uniqueItems=f.items.type != "object")
        elif f.type == "object":
            props = {key: convert(sub) if sub.required else nullable(convert(sub)) for key, sub in f.fields.items()}
            obj = {"type": "object", "properties": props, "additionalProperties": False}
            required = [key for key, sub in f.fields.items() if sub.required]
            if required:
                obj["required"] = required
            if f.allow_false:
                out["anyOf"] = [obj, {"const": False}]
            else:
                out.update(obj)
            if f.title:
                out["title"] = f.title
        if f.default is not None and f.default != []:
            out["default"] = f.default
        return out

    return convert(f)


def json_schema() -> dict:
    """The JSON Schema of topology.yaml, generated from FORMAT."""
    schema = field_schema(FORMAT)
    # A file without transport_version is an included file, which the same schema checks: the settings
    # of the whole topology belong to the root file.
    del schema["required"]
    schema["if"] = {"required": ["transport_version"]}
    schema["else"] = {
        "description": f"An included file: {listed(INCLUDED.fields)} only; the other settings belong to the root file.",
        "properties": dict.fromkeys(ROOT_ONLY, False),
    }
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://sqltransport-schema.dev/topology.schema.json"
    return schema


def listed(words: Iterable[str]) -> str:
    """a, b and c"""
    words = list(words)
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)
