"""Load and validate topology.yaml.

The format is declared once, in FORMAT below: it drives validation (with
file:line:column marks from the YAML node tree) and generates the JSON Schema
that editors use, so the two can never disagree.
"""

from __future__ import annotations

import difflib
import glob
import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from . import engines as engine_registry
from .schema import CORRELATION_TYPES, Correlation, Kind, TableName, TableSpec, protected_by_default
from .util import gc_paused
from .versions import FEATURE_SINCE, LATEST, UnknownVersion, parse_version, profile

if TYPE_CHECKING:
    from .engines import Dialect
    from .versions import Profile

try:  # libyaml's composer is ~10x faster on large topologies
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

# The transport's defaults where a topology names no subscription table or delayed-table suffix.
DEFAULT_SUBSCRIPTION_TABLE = "SubscriptionRouting"
DEFAULT_DELAYED_SUFFIX = "Delayed"


# --------------------------------------------------------------------------- errors
@dataclass(frozen=True)
class Mark:
    path: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Problem:
    mark: Mark
    message: str

    def __str__(self) -> str:
        return f"{self.mark}: error: {self.message}"

    def to_json(self) -> dict:
        return {"file": self.mark.path, "line": self.mark.line, "column": self.mark.column, "message": self.message}


class TopologyError(Exception):
    """One or more problems in a topology file; each names file:line:column."""

    def __init__(self, problems: list[Problem], files: Iterable[str] = ()):
        """files: the topology's files in load order (the root first), the order problems are listed in."""
        rank = {path: i for i, path in enumerate(files)}
        self.problems = sorted(
            problems, key=lambda p: (rank.get(p.mark.path, len(rank)), p.mark.path, p.mark.line, p.mark.column, p.message)
        )
        super().__init__("\n".join(str(p) for p in self.problems))


# --------------------------------------------------------------------------- the format
@dataclass(frozen=True)
class Field:
    type: str  # string | name | boolean | version | enum | list | object
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
    },
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


def json_schema() -> dict:
    """The JSON Schema of topology.yaml, generated from FORMAT."""

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

    schema = convert(FORMAT)
    # A file without transport_version is an included file, which the same schema checks: the settings
    # of the whole topology belong to the root file.
    del schema["required"]
    schema["if"] = {"required": ["transport_version"]}
    schema["else"] = {
        "description": f"An included file: {_listed(INCLUDED.fields)} only; the other settings belong to the root file.",
        "properties": dict.fromkeys(ROOT_ONLY, False),
    }
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://sqltransport-schema.dev/topology.schema.json"
    return schema


def _listed(words: Iterable[str]) -> str:
    """a, b and c"""
    words = list(words)
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


# --------------------------------------------------------------------------- model
@dataclass(frozen=True)
class Placed:
    """Something that names a table: its effective placement and where it was written."""

    name: str
    schema: str | None
    catalog: str | None
    mark: Mark = field(compare=False)
    marks: dict = field(default_factory=dict, compare=False, repr=False)

    def mark_of(self, key: str) -> Mark:
        return self.marks.get(key, self.mark)

    @property
    def table_name(self) -> TableName:
        return TableName(self.name, self.schema, self.catalog)


@dataclass(frozen=True)
class Saga:
    name: str
    table_suffix: str | None
    correlation: Correlation | None  # None: unreadable (already reported)
    transitional: Correlation | None
    mark: Mark = field(compare=False)
    marks: dict = field(default_factory=dict, compare=False, repr=False)

    def mark_of(self, key: str) -> Mark:
        return self.marks.get(key, self.mark)


@dataclass(frozen=True)
class Endpoint(Placed):
    instances: tuple[str, ...] = ()
    delayed_delivery: bool | None = None  # None: whatever the version offers
    send_only: bool = False
    body_string: bool = False
    protected: bool | None = None  # None: error/audit by name
    table_prefix: str | None = None  # None: the default saga table prefix
    sagas: tuple[Saga, ...] = ()

    @property
    def saga_table_prefix(self) -> str:
        return self.table_prefix if self.table_prefix is not None else self.name.replace(".", "_") + "_"

    def saga_table(self, saga: Saga) -> str:
        return self.saga_table_prefix + (saga.table_suffix if saga.table_suffix is not None else saga.name)

    def saga_spec(self, saga: Saga) -> TableSpec:
        return TableSpec(
            Kind.SAGA,
            TableName(self.saga_table(saga), self.schema, self.catalog),
            correlation=saga.correlation,
            transitional=saga.transitional,
            saga_prefix=self.saga_table_prefix,
        )

    def queue_tables(self) -> list[str]:
        if self.send_only:
            return []
        return [self.name] + [f"{self.name}.{instance}" for instance in self.instances]

    def has_delayed_table(self, prof: Profile) -> bool:
        if self.send_only:
            return False
        return prof.delayed_delivery if self.delayed_delivery is None else self.delayed_delivery

    def delayed_table(self, suffix: str) -> str:
        return f"{self.name}.{suffix}"


@dataclass(frozen=True)
class Queue(Placed):
    protected: bool | None = None  # None: error/audit by name


class Owned(NamedTuple):
    """A table the topology owns: its spec, what the file calls it, and where the file makes it."""

    spec: TableSpec
    role: str  # "endpoint", "instance queue", "delayed table", "queue", "subscription table" or "saga table"
    mark: Mark

    is_index = False  # beside validation's indexes, which share the table namespace
    engine = None  # on every engine that holds its kind

    @property
    def what(self) -> str:
        """How problems name the table, e.g. "instance queue 'Sales.host-a'"."""
        return f"{self.role} {self.spec.name.table!r}"

    @property
    def name(self) -> TableName:
        return self.spec.name

    @property
    def kind(self) -> Kind:
        return self.spec.kind


@dataclass(frozen=True)
class Topology:
    path: str
    transport_version: str
    engines: tuple[str, ...]
    default_schema: str | None
    default_catalog: str | None
    delayed_table_suffix: str
    subscriptions: Placed | None  # None: the default table, when the version has subscriptions
    subscriptions_disabled: bool
    postgresql_seq_type: str
    endpoints: tuple[Endpoint, ...]
    queues: tuple[Queue, ...]
    discard: tuple[Placed, ...]
    drop_protected: tuple[Placed, ...] = ()
    postgresql_online_rewrites: bool = False
    marks: dict = field(default_factory=dict, compare=False, repr=False)
    files: tuple[Source, ...] = field(default=(), compare=False, repr=False)  # the root file first, then what it includes

    def subscription_table(self, prof: Profile) -> TableName | None:
        if self.subscriptions_disabled or not prof.subscriptions:
            return None
        if self.subscriptions is not None:
            return self.subscriptions.table_name
        return TableName(DEFAULT_SUBSCRIPTION_TABLE, self.default_schema, self.default_catalog)

    def tables(self) -> Iterator[Owned]:
        """Every table the topology owns, with what the file calls it and where it makes it.

        The one walk over the topology's tables: schema.blueprint keeps the specs, the name
        checks of validation also read the roles and marks. Order: each endpoint's queues and delayed table,
        then the queues, the subscription table and the saga tables.
        """
        prof = profile(self.transport_version)
        seq_type = self.postgresql_seq_type
        suffix = self.delayed_table_suffix
        for ep in self.endpoints:
            name_mark = ep.mark_of("name")
            for i, table in enumerate(ep.queue_tables()):
                protected = ep.protected if ep.protected is not None else protected_by_default(Kind.QUEUE, table)
                spec = TableSpec(Kind.QUEUE, TableName(table, ep.schema, ep.catalog), ep.body_string, seq_type, protected)
                if i == 0:
                    yield Owned(spec, "endpoint", name_mark)
                else:
                    yield Owned(spec, "instance queue", ep.mark_of(f"instances[{i - 1}]"))
            if ep.has_delayed_table(prof):
                name = TableName(ep.delayed_table(suffix), ep.schema, ep.catalog)
                yield Owned(TableSpec(Kind.DELAYED, name, ep.body_string), "delayed table", name_mark)
        for q in self.queues:
            protected = q.protected if q.protected is not None else protected_by_default(Kind.QUEUE, q.name)
            yield Owned(TableSpec(Kind.QUEUE, q.table_name, seq_type=seq_type, protected=protected), "queue", q.mark_of("name"))
        sub = self.subscription_table(prof)
        if sub is not None:
            mark = self.subscriptions.mark_of("table") if self.subscriptions else self.marks.get("transport_version", Mark(self.path, 1, 1))
            yield Owned(TableSpec(Kind.SUBSCRIPTIONS, sub), "subscription table", mark)
        for ep in self.endpoints:
            for saga in ep.sagas:
                yield Owned(ep.saga_spec(saga), "saga table", saga.mark_of("name"))


# --------------------------------------------------------------------------- reading
_TAGS = {
    "tag:yaml.org,2002:str": "a string",
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "true/false",
    "tag:yaml.org,2002:null": "nothing (null)",
}


class _Reader:
    """Reads one file's node tree; problems go to the list every file of the topology shares."""

    def __init__(self, path: str, problems: list[Problem] | None = None, root: str | None = None):
        self.path = path
        self.problems: list[Problem] = [] if problems is None else problems
        self.root = root  # the root file, when this one is included

    def mark(self, node: yaml.Node) -> Mark:
        return Mark(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def fail(self, node_or_mark: yaml.Node | Mark, message: str) -> None:
        mark = node_or_mark if isinstance(node_or_mark, Mark) else self.mark(node_or_mark)
        self.problems.append(Problem(mark, message))

    @staticmethod
    def describe(node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        return _TAGS.get(node.tag, "a value")

    def read(self, node: yaml.Node, spec: Field, where: str) -> Any:
        """Value of node per spec, or None after recording a problem."""
        reader = getattr(self, "_read_" + spec.type)
        return reader(node, spec, where)

    def _scalar(self, node: yaml.Node, where: str, expected: str) -> str | None:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
            self.fail(node, f"{where} must be {expected}, not {self.describe(node)}")
            return None
        return node.value

    def _read_name(self, node: yaml.Node, spec: Field, where: str) -> str | None:
        value = self._scalar(node, where, "a name (a string)")
        if value is not None and not value.strip():
            self.fail(node, f"{where} must not be empty")
            return None
        if value is not None and not value.isprintable():
            bad = next(ch for ch in value if not ch.isprintable())
            self.fail(node, f"{where} contains the control character {bad!r}: names hold printable characters only; remove it")
            return None
        return value

    _read_string = _read_name

    def _read_version(self, node: yaml.Node, spec: Field, where: str) -> str | None:
        if isinstance(node, yaml.ScalarNode) and node.tag in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int"):
            self.fail(node, f'{where} must be a string: write it quoted, e.g. {where.split()[-1]}: "{node.value}"')
            return None
        value = self._scalar(node, where, f'a version string such as "{LATEST}"')
        if value is None:
            return None
        try:
            parse_version(value)
        except UnknownVersion as exc:
            self.fail(node, str(exc))
            return None
        return value

    def _read_boolean(self, node: yaml.Node, spec: Field, where: str) -> bool | None:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            self.fail(node, f"{where} must be true or false, not {self.describe(node)}")
            return None
        return node.value.lower() in ("true", "yes", "on", "y")

    def _read_enum(self, node: yaml.Node, spec: Field, where: str) -> str | None:
        value = self._scalar(node, where, "one of " + ", ".join(spec.values))
        if value is not None and value not in spec.values:
            hint = difflib.get_close_matches(value, spec.values, n=1)
            suffix = f"; did you mean {hint[0]!r}?" if hint else ""
            self.fail(node, f"{where} is {value!r}; expected one of {', '.join(spec.values)}{suffix}")
            return None
        return value

    def _read_list(self, node: yaml.Node, spec: Field, where: str) -> list[tuple[Any, Mark]] | None:
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, f"{where} must be a list, not {self.describe(node)}")
            return None
        items = []
        for index, item in enumerate(node.value):
            value = self.read(item, spec.items, f"{where}[{index}]")
            if value is not None:
                items.append((value, self.mark(item)))
        return items

    def _read_object(self, node: yaml.Node, spec: Field, where: str) -> _Obj | bool | None:
        if spec.allow_false and isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:bool":
            if node.value.lower() in ("false", "no", "off", "n"):
                return False
        if not isinstance(node, yaml.MappingNode):
            expected = "a mapping or false" if spec.allow_false else "a mapping"
            self.fail(node, f"{where} must be {expected}, not {self.describe(node)}")
            return None
        values: dict[str, Any] = {}
        marks: dict[str, Mark] = {}
        seen: dict[str, Mark] = {}
        hinted: set[str] = set()  # keys an unknown key was taken for: their absence is that same problem
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is None or key_node.tag != "tag:yaml.org,2002:str":
                self.fail(key_node, f"keys of {where} must be words, not {self.describe(key_node)}")
                continue
            if key in seen:
                self.fail(key_node, f"{key!r} is given twice in {where} (first at line {seen[key].line}); keep one")
                continue
            seen[key] = self.mark(key_node)
            sub = spec.fields.get(key)
            if sub is None and spec is INCLUDED and key in FORMAT.fields:
                self.fail(
                    key_node,
                    f"{key} is a setting of the whole topology and an included file cannot set it: move it to the root file "
                    f"{self.root}; an included file holds {_listed(INCLUDED.fields)} only",
                )
                continue
            if sub is None:
                hint = difflib.get_close_matches(key, list(spec.fields), n=1)
                suggestion = f"did you mean {hint[0]!r}? " if hint else ""
                hinted.update(hint)
                self.fail(key_node, f"unknown key {key!r} in {spec.title or where}; {suggestion}allowed keys: {', '.join(spec.fields)}")
                continue
            if isinstance(value_node, yaml.ScalarNode) and value_node.tag == "tag:yaml.org,2002:null" and not sub.required:
                continue  # an explicit null means "use the default"
            value = self.read(value_node, sub, key if where in ("topology", "included file") else f"{where}.{key}")
            if value is not None:
                values[key] = value
                marks[key] = self.mark(value_node)
            else:
                marks[key] = self.mark(value_node)
        for key, sub in spec.fields.items():
            if sub.required and key not in seen and key not in hinted:
                hint = ""
                if spec is FORMAT and seen and not set(seen) & set(ROOT_ONLY):
                    hint = "; or, if another file includes this one, pass that file with --topology"
                self.fail(node, f"{spec.title or where} needs a {key!r} key{hint}")
        return _Obj(values, marks, self.mark(node))


@dataclass
class _Obj:
    values: dict
    marks: dict
    mark: Mark

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


# --------------------------------------------------------------------------- building
def _placed(
    cls: type[Placed], obj: _Obj, key: str, defaults: tuple[str | None, str | None], item_marks: dict[str, Mark] | None = None, **extra
) -> Any:
    schema = obj.get("schema", defaults[0])
    catalog = obj.get("catalog", defaults[1])
    return cls(obj.get(key), schema, catalog, obj.mark, {**obj.marks, **(item_marks or {})}, **extra)


def load(path: str | Path) -> Topology:
    """The topology of the file at path, with every file it includes."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TopologyError([Problem(Mark(str(path), 1, 1), "file not found; create it or pass --topology PATH")]) from None
    problems: list[Problem] = []
    text = _decode(data, str(path), problems)
    if text is None:
        raise TopologyError(problems)
    return loads(text, str(path))


def loads(text: str, path: str = "topology.yaml") -> Topology:
    """The topology of text, read as the file at path (the files it includes are relative to that path)."""
    with gc_paused():
        return _loads(text, path)


def _loads(text: str, path: str) -> Topology:
    problems: list[Problem] = []
    node = _compose(text, path, problems)
    if problems:
        raise TopologyError(problems)
    if node is None:
        raise TopologyError([Problem(Mark(path, 1, 1), "the file is empty; it needs at least transport_version")])
    reader = _Reader(path, problems)
    root = reader.read(node, FORMAT, "topology")
    if root is None:
        raise TopologyError(problems or [Problem(reader.mark(node), "not a topology")])
    files = _Includes(path, text, problems)
    files.merge(root)
    order = [source.path for source in files.sources]
    if root.get("transport_version") is not None:
        # Check the meaning of what was read even when other parts were not, so that
        # one run reports every problem; entries that could not be read are left out.
        topology = _build(root, path, tuple(files.sources))
        problems += _semantic_problems(topology)
    if problems:
        raise TopologyError(problems, order)
    return topology


def _decode(data: bytes, path: str, problems: list[Problem]) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        column = len(before.rpartition(b"\n")[2].decode("utf-8", errors="replace")) + 1  # in characters, as YAML's marks
        mark = Mark(path, before.count(b"\n") + 1, column)
        problems.append(
            Problem(mark, f"not UTF-8 text (byte 0x{data[exc.start]:02x}): save the file as UTF-8, or remove or retype the character here")
        )
        return None


def _compose(text: str, path: str, problems: list[Problem]) -> yaml.Node | None:
    """The YAML node tree of text; None for an empty file, or after recording why it is not YAML."""
    try:
        return yaml.compose(text, Loader=_Loader)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other control characters)
        before = text[: exc.position]
        line, column = before.count("\n") + 1, len(before.rpartition("\n")[2]) + 1
        character = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        message = f"the character {character} is not allowed in a YAML file; remove it (a control character: a copy or an editor left it)"
        problems.append(Problem(Mark(path, line, column), message))
        return None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = f"not valid YAML: {exc.problem or exc}"
        if exc.context and exc.context_mark and exc.context_mark.line + 1 != line:
            message += f" ({exc.context} at line {exc.context_mark.line + 1})"
        problems.append(Problem(Mark(path, line, column), message))
        return None


@dataclass(frozen=True)
class Source:
    """One file of a topology: as problems name it, as revisions record it (relative to the root
    file's folder, with /), and the sha256 of its bytes."""

    path: str
    relative: str
    sha256: str


GLOB_CHARACTERS = frozenset("*?[")


class _Includes:
    """The files a root file includes, read depth-first in include order. Their entries follow the
    including file's own, so a split topology is the one file that lists them in that order."""

    def __init__(self, root: str, text: str, problems: list[Problem]):
        self.root = root
        self.folder = Path(root).resolve().parent
        self.problems = problems
        self.sources = [self._source(root, text.encode("utf-8"))]
        self.seen: dict[Path, Mark] = {}  # every included file, and where it was included first

    def _source(self, path: str, data: bytes) -> Source:
        relative = Path(os.path.relpath(Path(path).resolve(), self.folder)).as_posix()
        return Source(path, relative, hashlib.sha256(data).hexdigest())

    def merge(self, root: _Obj) -> None:
        """Add the entries of every included file to the root's lists."""
        included = self._walk(root, self.root, ((Path(self.root).resolve(), self.root),))
        for key in INCLUDED.fields:
            entries = [entry for obj in included for entry in obj.get(key, [])]
            if key != "include" and entries:
                root.values[key] = root.get(key, []) + entries

    def _walk(self, obj: _Obj, path: str, chain: tuple[tuple[Path, str], ...]) -> list[_Obj]:
        found = []
        for entry, mark in obj.get("include", []):
            for target in self._targets(entry, mark, path):
                resolved = Path(target).resolve()
                ancestors = [file for file, _ in chain]
                if resolved in ancestors:
                    cycle = " -> ".join([name for _, name in chain[ancestors.index(resolved) :]] + [target])
                    self.problems.append(Problem(mark, f"include cycle: {cycle}: remove one of these includes"))
                    continue
                if resolved in self.seen:
                    first = self.seen[resolved]
                    self.problems.append(Problem(mark, f"{target} is included twice (first at {first}): include each file once"))
                    continue
                self.seen[resolved] = mark
                included = self._read(target)
                if included is not None:
                    found.append(included)
                    found += self._walk(included, target, (*chain, (resolved, target)))
        return found

    def _targets(self, entry: str, mark: Mark, including: str) -> list[str]:
        """The files an include entry names: one path, or a pattern's matches in sorted order (never the including file)."""
        joined = os.path.normpath(os.path.join(os.path.dirname(including), entry))
        if GLOB_CHARACTERS.isdisjoint(entry):
            if os.path.isfile(joined):
                return [joined]
            if os.path.exists(joined):
                message = f"{joined} is not a file: include a file, or a pattern such as {entry.rstrip('/')}/*.yaml"
            else:
                message = f"included file {joined} not found: create it, or correct or remove this entry"
            self.problems.append(Problem(mark, message))
            return []
        itself = Path(including).resolve()
        pattern = os.path.normpath(os.path.join(glob.escape(os.path.dirname(including)), entry))  # the folder's name is no pattern
        matches = sorted(found for found in glob.glob(pattern, recursive=True) if os.path.isfile(found) and Path(found).resolve() != itself)
        if not matches:
            self.problems.append(
                Problem(mark, f"include pattern {entry!r} matches no file ({joined}): correct it, or remove it until a file matches")
            )
        return matches

    def _read(self, path: str) -> _Obj | None:
        """An included file's entries; None when it is empty or unreadable (reported)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            self.problems.append(Problem(Mark(path, 1, 1), f"cannot be read: {exc.strerror or exc}"))
            return None
        self.sources.append(self._source(path, data))
        text = _decode(data, path, self.problems)
        node = _compose(text, path, self.problems) if text is not None else None
        if node is None:
            return None  # an empty file adds nothing
        included = _Reader(path, self.problems, root=self.root).read(node, INCLUDED, "included file")
        return included if isinstance(included, _Obj) else None


def _complete(items: list, key: str) -> list:
    """The entries of a list whose required key was read (the rest are already reported)."""
    return [(obj, mark) for obj, mark in items if obj.get(key) is not None]


def _correlation_of(obj: _Obj | None) -> Correlation | None:
    if obj is None or obj.get("name") is None or obj.get("type") is None:
        return None
    return Correlation(obj.get("name"), obj.get("type"))


def _saga(obj: _Obj) -> Saga:
    marks = dict(obj.marks)
    for key in ("correlation", "transitional"):
        sub = obj.get(key)
        if sub is not None:
            marks.update({f"{key}.{k}": m for k, m in sub.marks.items()})
    return Saga(
        obj.get("name"),
        obj.get("table_suffix"),
        _correlation_of(obj.get("correlation")),
        _correlation_of(obj.get("transitional")),
        obj.mark,
        marks,
    )


def _build(root: _Obj, path: str, files: tuple[Source, ...] = ()) -> Topology:
    defaults = (root.get("default_schema"), root.get("default_catalog"))
    endpoints = tuple(
        _placed(
            Endpoint,
            obj,
            "name",
            defaults,
            instances=tuple(value for value, _ in obj.get("instances", [])),
            item_marks={f"instances[{i}]": m for i, (_, m) in enumerate(obj.get("instances", []))},
            delayed_delivery=obj.get("delayed_delivery"),
            send_only=obj.get("send_only", False),
            body_string=obj.get("body_string", False),
            protected=obj.get("protected"),
            table_prefix=obj.get("table_prefix"),
            sagas=tuple(_saga(saga) for saga, _ in _complete(obj.get("sagas", []), "name")),
        )
        for obj, _ in _complete(root.get("endpoints", []), "name")
    )
    subscriptions = root.get("subscriptions")
    if isinstance(subscriptions, _Obj) and subscriptions.get("table") is None:
        subscriptions = False  # unreadable (already reported): check the rest as if there were none
    engines = root.get("engines")
    pg = root.get("postgresql")
    return Topology(
        path=path,
        transport_version=root.get("transport_version"),
        engines=tuple(value for value, _ in engines) if engines is not None else tuple(FORMAT.fields["engines"].default),
        default_schema=defaults[0],
        default_catalog=defaults[1],
        delayed_table_suffix=root.get("delayed_table_suffix", DEFAULT_DELAYED_SUFFIX),
        subscriptions=_placed(Placed, subscriptions, "table", defaults) if isinstance(subscriptions, _Obj) else None,
        subscriptions_disabled=subscriptions is False,
        postgresql_seq_type=pg.get("seq_type", "serial") if pg is not None else "serial",
        endpoints=endpoints,
        queues=tuple(
            _placed(Queue, obj, "name", defaults, protected=obj.get("protected")) for obj, _ in _complete(root.get("queues", []), "name")
        ),
        discard=tuple(_placed(Placed, obj, "name", defaults) for obj, _ in _complete(root.get("discard", []), "name")),
        drop_protected=tuple(_placed(Placed, obj, "name", defaults) for obj, _ in _complete(root.get("drop_protected", []), "name")),
        postgresql_online_rewrites=bool(pg.get("online_rewrites", False)) if pg is not None else False,
        marks={**root.marks, "engines_items": [m for _, m in engines] if engines else []},
        files=files,
    )


# --------------------------------------------------------------------------- meaning
class _Index(NamedTuple):
    """An index in a table's namespace on one engine, named and placed as its table is."""

    name: TableName
    what: str
    mark: Mark
    kind: Kind  # of the indexed table
    engine: str  # an index exists only on the engine that creates it
    is_index = True


def _owned_tables(t: Topology) -> list[Owned | _Index]:
    """The topology's tables (Topology.tables) and, per engine, the indexes that share their namespace."""
    tables = list(t.tables())
    indexes = []
    for engine_name in dict.fromkeys(t.engines):
        suffixes = engine_registry.get(engine_name).index_suffixes
        if not suffixes:
            continue
        for item in tables:
            for suffix in suffixes.get(item.kind, ()):
                index = TableName(item.name.table + suffix, item.name.schema, item.name.catalog)
                indexes.append(_Index(index, f"index {index.table!r} of {item.what}", item.mark, item.kind, engine_name))
    sagas = [item for item in tables if item.kind is Kind.SAGA]
    for engine_name in dict.fromkeys(t.engines):
        engine = engine_registry.get(engine_name)
        for item in sagas:
            for index in engine.saga_index_names(item.spec):
                what = f"index {index.table!r} of saga table {item.name.table!r}"
                indexes.append(_Index(index, what, item.mark, Kind.SAGA, engine_name))
    return tables + indexes


def _ignores(engine: Dialect, part: str) -> bool:
    """Whether the engine tells tables apart by this part (schema or catalog) of their names."""
    return engine.table_key(TableName("t", "s", "c")) == engine.table_key(TableName("t", **{"schema": "s", "catalog": "c", part: "x"}))


def _collision_advice(a: Owned | _Index, b: Owned | _Index, on: list[str]) -> str:
    """What to change when a and b are one table on the engines in on."""
    if a.mark.path != b.mark.path and a.name == b.name:
        return f"{a.mark.path} and {b.mark.path} both make it: keep it in one of the files, or rename one"
    if a.name.table != b.name.table:
        verb = "does" if len(on) == 1 else "do"
        return f"the names differ only in case, which {' and '.join(on)} {verb} not tell apart: rename one"
    ignored = [
        f"{engine_name} ignores the {part}"
        for engine_name in on
        for part in ("schema", "catalog")
        if getattr(a.name, part) != getattr(b.name, part) and _ignores(engine_registry.get(engine_name), part)
    ]
    if ignored:
        return "; ".join(ignored) + ": rename one, or remove that engine from engines"
    return "rename one or place it in another schema"


def _semantic_problems(t: Topology) -> Iterator[Problem]:
    prof = profile(t.transport_version)
    rank = {source.path: i for i, source in enumerate(t.files)}

    def position(mark: Mark) -> tuple[int, int, int]:
        """Where a mark is in load order: the root file, then each included file."""
        return (rank.get(mark.path, 0), mark.line, mark.column)

    version_mark = t.marks.get("transport_version", Mark(t.path, 1, 1))

    def lacks(feature: str, mark: Mark, what: str) -> Problem:
        return Problem(
            mark,
            f"{what} needs transport version {FEATURE_SINCE[feature]} or later; this topology uses "
            f"{t.transport_version}. Raise transport_version or remove it",
        )

    # Engines.
    if not t.engines:
        yield Problem(t.marks.get("engines", version_mark), "engines is empty: list at least one of " + ", ".join(engine_registry.ENGINES))
    seen_engines: set[str] = set()
    for name, mark in zip(t.engines, t.marks.get("engines_items", [])):
        if name in seen_engines:
            yield Problem(mark, f"engine {name!r} is listed twice; keep one")
        seen_engines.add(name)
    for name in dict.fromkeys(t.engines):
        reason = engine_registry.get(name).unsupported(prof)
        if reason and "engines" not in t.marks:
            others = ", ".join(other for other in t.engines if other != name)
            yield Problem(
                version_mark,
                f"{reason}: engines is not set, so it defaults to all of {', '.join(t.engines)}; "
                f"write engines: [{others}] or raise transport_version",
            )
        elif reason:
            yield Problem(version_mark, f"{reason}: remove {name} from engines or raise transport_version")

    # Features the version lacks, and contradictions.
    for ep in t.endpoints:
        if ep.send_only and ep.delayed_delivery:
            yield Problem(
                ep.mark_of("delayed_delivery"),
                f"endpoint {ep.name!r} is send-only and so has no delayed table: remove delayed_delivery or send_only",
            )
        elif ep.delayed_delivery and not prof.delayed_delivery:
            yield lacks("delayed_delivery", ep.mark_of("delayed_delivery"), "delayed_delivery")
        if ep.send_only and ep.instances:
            yield Problem(ep.mark_of("instances"), f"endpoint {ep.name!r} is send-only and receives nothing: remove instances or send_only")
        if ep.body_string and ep.send_only:
            yield Problem(
                ep.mark_of("body_string"), f"endpoint {ep.name!r} is send-only and has no queue for a BodyString column: remove body_string"
            )
        elif ep.body_string and not prof.body_string:
            yield lacks("body_string", ep.mark_of("body_string"), "body_string")
        elif ep.body_string:
            for name in t.engines:
                reason = engine_registry.get(name).body_string_unsupported(prof)
                if reason:
                    yield Problem(
                        ep.mark_of("body_string"), f"endpoint {ep.name!r}: {reason}; remove body_string or change transport_version"
                    )
    if t.subscriptions is not None and not prof.subscriptions:
        yield lacks("subscriptions", t.subscriptions.mark, "a subscription table")
    placed: list[Placed] = [*t.endpoints, *t.queues, *t.discard, *t.drop_protected] + ([t.subscriptions] if t.subscriptions else [])
    if not prof.three_part_names:
        if t.default_catalog is not None:
            yield lacks("catalog", t.marks["default_catalog"], f"default_catalog {t.default_catalog!r} (three-part names)")
        for item in placed:
            if item.catalog is not None and "catalog" in item.marks:
                yield lacks("catalog", item.mark_of("catalog"), f"catalog {item.catalog!r} (three-part names)")

    # '@' separates the parts of a canonical address: no table name may contain it.
    at_rule = "cannot appear in a table name (it separates the parts of a transport address)"
    if "@" in t.delayed_table_suffix:
        yield Problem(t.marks["delayed_table_suffix"], f"delayed_table_suffix contains '@', which {at_rule}")
    for ep in t.endpoints:
        for i, instance in enumerate(ep.instances):
            if "@" in instance:
                yield Problem(ep.mark_of(f"instances[{i}]"), f"instance {instance!r} contains '@', which {at_rule}")
    for item in [*t.endpoints, *t.queues] + ([t.subscriptions] if t.subscriptions else []):
        if "@" in item.name:
            key = "table" if item is t.subscriptions else "name"
            yield Problem(item.mark_of(key), f"{item.name!r} contains '@', which {at_rule}: rename it")

    # Names an engine cannot hold, and two things that are one table on an engine.
    owned = _owned_tables(t)
    tables = [item for item in owned if not item.is_index]
    reported: set[tuple] = set()
    for engine_name in dict.fromkeys(t.engines):
        engine = engine_registry.get(engine_name)
        for item in tables:
            if item.kind is Kind.SAGA:
                continue  # saga tables have their own limits, checked with their columns below
            if not engine.holds(item.kind):
                continue
            for part, problem in engine.name_problems(item.name):
                if (item.mark, part) not in reported:
                    reported.add((item.mark, part))
                    yield Problem(item.mark, f"{part} name of {item.what} {problem}: shorten it")
    # One problem per pair of places in the file: what derives from them (delayed
    # tables, indexes) collides too but says nothing new. Reported at the later place.
    collisions: dict[frozenset, list[tuple[Owned | _Index, Owned | _Index, str]]] = {}
    for engine_name in dict.fromkeys(t.engines):
        engine = engine_registry.get(engine_name)
        first: dict[tuple, Owned | _Index] = {}
        for item in owned:
            if item.engine not in (None, engine_name):
                continue  # another engine's index
            if not engine.holds(item.kind):
                continue  # not deployed on this engine
            earlier = first.setdefault(engine.table_key(item.name), item)
            if earlier is not item and earlier.mark != item.mark:
                collisions.setdefault(frozenset((earlier.mark, item.mark)), []).append((earlier, item, engine_name))
    for hits in collisions.values():
        earlier, item, _ = min(hits, key=lambda hit: hit[0].is_index + hit[1].is_index)  # tables before indexes
        on = [
            name
            for name in dict.fromkeys(t.engines)
            if any((e.what, i.what, engine_name) == (earlier.what, item.what, name) for e, i, engine_name in hits)
        ]
        if position(earlier.mark) > position(item.mark):
            earlier, item = item, earlier
        yield Problem(
            item.mark,
            f"{item.what} is the same table as {earlier.what} (at {earlier.mark}) on {', '.join(on)}: "
            + _collision_advice(earlier, item, on),
        )

    yield from _saga_problems(t)

    # A discarded (or unprotected) table must really be gone from the topology.
    gone = [("discard", d) for d in t.discard] + [("drop_protected", d) for d in t.drop_protected]
    by_key = {
        engine_name: {engine_registry.get(engine_name).table_key(o.name): o for o in reversed(tables)}
        for engine_name in (dict.fromkeys(t.engines) if gone else ())
    }
    for key, d in gone:
        for engine_name, keys in by_key.items():
            hit = keys.get(engine_registry.get(engine_name).table_key(d.table_name))
            if hit is not None:
                yield Problem(
                    d.mark_of("name"), f"{d.name!r} is listed under {key} but is still {hit.what} (at {hit.mark}): remove one of them"
                )
                break


def _saga_problems(t: Topology) -> Iterator[Problem]:
    """Sagas: contradictions, correlation types an engine cannot hold, names over an engine's limits."""
    engine_names = list(dict.fromkeys(t.engines))
    for ep in t.endpoints:
        if ep.sagas and ep.send_only:
            yield Problem(
                ep.mark_of("sagas"),
                f"endpoint {ep.name!r} is send-only and handles no messages, so it has no sagas: remove sagas or send_only",
            )
        for saga in ep.sagas:
            c, tr = saga.correlation, saga.transitional
            if c is None and tr is not None and "correlation" not in saga.marks:
                yield Problem(
                    saga.mark_of("transitional"),
                    f"saga {saga.name!r}: a transitional property needs a correlation property (SQL persistence refuses it alone): "
                    "make it the correlation property or add one",
                )
            if c is not None and tr is not None and c.name.casefold() == tr.name.casefold():
                yield Problem(
                    saga.mark_of("transitional.name"),
                    f"saga {saga.name!r}: the transitional property {tr.name!r} is the correlation property; "
                    "a transitional property names the new property the saga moves to: name another one or remove transitional",
                )
            for key, correlation in (("correlation", c), ("transitional", tr)):
                lacking = [
                    name
                    for name in engine_names
                    if correlation is not None and correlation.type not in engine_registry.get(name).CORRELATION_TYPES
                ]
                if lacking:
                    takes = "; ".join(f"{name} takes {', '.join(engine_registry.get(name).CORRELATION_TYPES)}" for name in lacking)
                    yield Problem(
                        saga.mark_of(f"{key}.type"),
                        f"{key} type {correlation.type!r} of saga {saga.name!r} has no column type on {', '.join(lacking)} "
                        f"({takes}): choose one of those or remove {', '.join(lacking)} from engines",
                    )
            for engine_name in engine_names:
                engine = engine_registry.get(engine_name)
                for problem in engine.saga_name_problems(ep.saga_spec(saga)):
                    yield Problem(saga.mark_of("name"), f"saga {saga.name!r} on {engine_name}: {problem}: shorten it")
