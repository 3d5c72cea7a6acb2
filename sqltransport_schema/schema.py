"""Topology -> blueprint: the engine-neutral set of transport tables a topology needs.

The blueprint is what a compiled revision records (as its snapshot) and what
`compile` diffs; engines turn its table specs into their own DDL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from json.encoder import encode_basestring_ascii as _json_string
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from . import errors

if TYPE_CHECKING:  # pragma: no cover
    from .topology import Topology

SNAPSHOT_FORMAT = 1
# Format 2 adds saga tables (kind "saga" with correlation columns). A snapshot without saga
# tables is still written as format 1, byte for byte as before; both formats load.
SNAPSHOT_FORMAT_SAGAS = 2
SNAPSHOT_FORMATS = (SNAPSHOT_FORMAT, SNAPSHOT_FORMAT_SAGAS)

# Correlation property types of SQL persistence sagas (seed 002).
CORRELATION_TYPES = ("string", "int", "guid", "datetime", "datetimeoffset")


class Kind(str, Enum):
    __hash__ = str.__hash__  # Enum's Python-level hash is a hot spot when planning 40,000 tables

    QUEUE = "queue"
    DELAYED = "delayed"
    SUBSCRIPTIONS = "subscriptions"
    SAGA = "saga"
    OUTBOX = "outbox"  # SQL persistence's outbox table of an endpoint (docs/outbox.md)
    ARCHIVE = "archive"  # a plain queue's archive: the console moves failed messages there (docs/console.md)
    ACTION_LOG = "action_log"  # the console's action log: who did what, when, to how many messages


# The kinds SQL persistence owns: named by the endpoint's prefix, not versioned by the transport.
PERSISTENCE_KINDS = frozenset({Kind.SAGA, Kind.OUTBOX})

# The two roles a database plays under SQL persistence's multi-tenant mode (docs/tenants.md): the
# shared one holds the transport's tables and every table the topology does not place in tenant
# databases; each tenant database holds the tables placed there (`tenants: {tables: [...]}`).
SHARED = "shared"
TENANT = "tenant"
ROLES = (SHARED, TENANT)


class TableName(NamedTuple):
    # a NamedTuple, not a dataclass: topologies hold tens of thousands of these
    table: str
    schema: str | None = None
    catalog: str | None = None

    def __str__(self) -> str:
        parts = [f'"{self.table}"']
        if self.schema is not None:
            parts.append(f'schema "{self.schema}"')
        if self.catalog is not None:
            parts.append(f'catalog "{self.catalog}"')
        return " in ".join(parts[:1]) + (" (" + ", ".join(parts[1:]) + ")" if parts[1:] else "")


@dataclass(frozen=True)
class SchemaName:
    """A database schema that the topology places tables in (created if missing); tenant: in every
    tenant database (a schema both roles use is two SchemaNames, one made in each database)."""

    schema: str
    catalog: str | None = None
    tenant: bool = False


# Queues a migration never drops without an explicit per-queue override (drop_protected:).
PROTECTED_BY_DEFAULT = frozenset(("error", "audit"))


def protected_by_default(kind: Kind, table: str) -> bool:
    """Error and audit queues hold the system's failure and history records."""
    return kind is Kind.QUEUE and table.casefold() in PROTECTED_BY_DEFAULT


def default_table_prefix(endpoint: str) -> str:
    """The prefix of an endpoint's SQL persistence tables (sagas, outbox) where it names none, as
    SQL persistence derives it from the endpoint's name."""
    return endpoint.replace(".", "_") + "_"


class Correlation(NamedTuple):
    """A saga correlation property: column Correlation_<name>, typed per engine from `type`."""

    name: str
    type: str  # one of CORRELATION_TYPES

    def to_json(self) -> str:
        return f'{{"name": {_json_string(self.name)}, "type": "{self.type}"}}'

    @classmethod
    def from_json(cls, data: dict | None) -> Correlation | None:
        return cls(data["name"], data["type"]) if data else None


class TableSpec(NamedTuple):
    kind: Kind
    name: TableName
    body_string: bool = False  # queue and delayed tables: the optional BodyString column
    seq_type: str = "serial"  # queue tables on PostgreSQL: serial (transport) or bigserial (fix)
    protected: bool = False  # queue tables: never dropped without a drop_protected entry
    correlation: Correlation | None = None  # saga tables: the correlation property
    transitional: Correlation | None = None  # saga tables: the transitional correlation property
    saga_prefix: str | None = None  # saga and outbox tables: the endpoint's table prefix (index names, Oracle's names)
    tenant: bool = False  # saga and outbox tables: in every tenant database, not in the shared one (role TENANT)
    queue: str | None = None  # archive tables: the queue (beside it, same schema) whose messages it keeps

    @property
    def role(self) -> str:
        """The database that holds the table: TENANT or SHARED."""
        return TENANT if self.tenant else SHARED

    @property
    def correlations(self) -> tuple[Correlation, ...]:
        """A saga table's correlation properties: the correlation one first, then the transitional one."""
        return tuple(c for c in (self.correlation, self.transitional) if c is not None)

    def to_json_line(self, owner: str | None = None) -> str:
        """This spec as one line of JSON (hand-formatted: json.dumps per row is the slow part of compile);
        `owner`: the endpoint a SQL persistence table belongs to (Blueprint.owners)."""
        name = self.name
        parts = [f'{{"kind": "{self.kind.value}", "table": {_json_string(name.table)}']
        if name.schema is not None:
            parts.append(f', "schema": {_json_string(name.schema)}')
        if name.catalog is not None:
            parts.append(f', "catalog": {_json_string(name.catalog)}')
        if self.kind is Kind.QUEUE:
            parts.append(f', "body_string": {"true" if self.body_string else "false"}, "seq_type": "{self.seq_type}"')
            if self.protected != protected_by_default(self.kind, name.table):
                parts.append(f', "protected": {"true" if self.protected else "false"}')
        elif self.kind is Kind.DELAYED:
            if self.body_string:  # written only when set: blueprints of earlier compiles read the same
                parts.append(', "body_string": true')
        elif self.kind in PERSISTENCE_KINDS:
            if owner is not None:
                parts.append(f', "endpoint": {_json_string(owner)}')
            if self.saga_prefix is not None:
                parts.append(f', "prefix": {_json_string(self.saga_prefix)}')
            if self.correlation is not None:
                parts.append(f', "correlation": {self.correlation.to_json()}')
            if self.transitional is not None:
                parts.append(f', "transitional": {self.transitional.to_json()}')
            if self.tenant:  # written only when set: blueprints of earlier compiles read the same
                parts.append(', "tenant": true')
        elif self.kind is Kind.ARCHIVE:
            parts.append(f', "queue": {_json_string(self.queue or "")}')
        parts.append("}")
        return "".join(parts)

    @classmethod
    def from_json(cls, data: dict) -> TableSpec:
        kind = Kind(data["kind"])
        return cls(
            kind=kind,
            name=TableName(data["table"], data.get("schema"), data.get("catalog")),
            body_string=data.get("body_string", False),
            seq_type=data.get("seq_type", "serial"),
            protected=data.get("protected", protected_by_default(kind, data["table"])),
            correlation=Correlation.from_json(data.get("correlation")),
            transitional=Correlation.from_json(data.get("transitional")),
            saga_prefix=data.get("prefix"),
            tenant=data.get("tenant", False),
            queue=data.get("queue"),
        )


@dataclass(frozen=True)
class Blueprint:
    transport_version: str
    engines: tuple[str, ...]
    tables: tuple[TableSpec, ...]
    discarded: frozenset[TableName] = field(default=frozenset(), compare=False)
    drop_protected: frozenset[TableName] = field(default=frozenset(), compare=False)
    online_rewrites: bool = field(default=False, compare=False)  # compile marks queue rewrites online=True
    # The transport version whose DDL built a table, where it is not transport_version: after a
    # merge of branches compiled at different versions (revisions.History), a table one branch added
    # keeps the version that branch built it with until a revision changes it.
    built: Mapping[TableName, str] = field(default_factory=dict, compare=False)
    # The endpoint each SQL persistence table (saga, outbox) belongs to, which its name alone does not
    # say (an endpoint's table_prefix is its own). Revisions compiled before it was recorded have none.
    owners: Mapping[TableName, str] = field(default_factory=dict, compare=False)

    def built_with(self, name: TableName) -> str:
        """The transport version whose DDL built the table `name` (what a drop or a change starts from)."""
        return self.built.get(name, self.transport_version)

    # What is derived from the tables is worked out once per blueprint (it never changes): a step
    # of a plan, a replay or a check asks for it per table, and a scan each time is quadratic.
    @cached_property
    def schemas(self) -> tuple[SchemaName, ...]:
        seen: dict[SchemaName, None] = {}
        for spec in self.tables:
            if spec.name.schema is not None:
                seen.setdefault(SchemaName(spec.name.schema, spec.name.catalog, spec.tenant))
        return tuple(seen)

    def for_role(self, role: str) -> Blueprint:
        """The tables one database holds: the shared database's (role SHARED, every table of a topology
        without tenant placement) or each tenant database's (TENANT)."""
        if role not in ROLES:
            raise errors.UsageError(f"a database's role is {' or '.join(ROLES)}, not {role!r}")
        tenant = role == TENANT
        if not tenant and not any(spec.tenant for spec in self.tables):
            return self
        return replace(self, tables=tuple(spec for spec in self.tables if spec.tenant == tenant))

    def by_name(self) -> Mapping[TableName, TableSpec]:
        """Each table's spec by its name (one mapping per blueprint, read-only)."""
        return self._by_name

    @cached_property
    def _by_name(self) -> Mapping[TableName, TableSpec]:
        return MappingProxyType({spec.name: spec for spec in self.tables})

    def queue_names(self) -> frozenset[TableName]:
        """The queue tables (an online rewrite's only candidates)."""
        return self._queue_names

    @cached_property
    def _queue_names(self) -> frozenset[TableName]:
        return frozenset(spec.name for spec in self.tables if spec.kind is Kind.QUEUE)

    @cached_property
    def subscription_table(self) -> TableName | None:
        """The shared subscription table, if the blueprint has one."""
        return next((spec.name for spec in self.tables if spec.kind is Kind.SUBSCRIPTIONS), None)

    def to_snapshot(self) -> str:
        """JSON text, one table a line, so revision files diff well and import fast."""
        sagas = any(spec.kind in PERSISTENCE_KINDS for spec in self.tables)
        head = json.dumps(
            {
                "format": SNAPSHOT_FORMAT_SAGAS if sagas else SNAPSHOT_FORMAT,
                "transport_version": self.transport_version,
                "engines": list(self.engines),
            }
        )
        lines = [head[:-1] + ', "tables": [']
        owners = self.owners
        rows = [spec.to_json_line(owners.get(spec.name)) if owners else spec.to_json_line() for spec in self.tables]
        lines.extend(row + "," for row in rows[:-1])
        if rows:
            lines.append(rows[-1])
        lines.append("]}")
        return "\n".join(lines)

    @classmethod
    def from_snapshot(cls, text: str) -> Blueprint:
        data = json.loads(text)
        if data.get("format") not in SNAPSHOT_FORMATS:
            raise errors.UsageError(f"unknown snapshot format {data.get('format')!r}")
        tables = tuple(TableSpec.from_json(row) for row in data["tables"])
        owners = {spec.name: row["endpoint"] for spec, row in zip(tables, data["tables"]) if "endpoint" in row}
        return cls(transport_version=data["transport_version"], engines=tuple(data["engines"]), tables=tables, owners=owners)

    def own_table(self, endpoint: str, kind: Kind) -> TableSpec | None:
        """The table of this kind (saga: the first) the blueprint records as the endpoint's own, None
        when it records none (or the blueprint predates owners: see runtime.outbox)."""
        owners = self.owners
        return next((spec for spec in self.tables if spec.kind is kind and owners.get(spec.name) == endpoint), None) if owners else None


# The blueprint's table order: a snapshot lists every queue, then the delayed tables, and so on.
_KIND_ORDER = {Kind.QUEUE: 0, Kind.DELAYED: 1, Kind.SUBSCRIPTIONS: 2, Kind.SAGA: 3, Kind.OUTBOX: 4, Kind.ARCHIVE: 5, Kind.ACTION_LOG: 6}


def in_kind_order(specs: Iterable[TableSpec]) -> tuple[TableSpec, ...]:
    """Tables in a blueprint's order: queues, then delayed, subscriptions, sagas, outboxes (stable within a kind)."""
    return tuple(sorted(specs, key=lambda spec: _KIND_ORDER[spec.kind]))


def kept_subscription_table(old: Blueprint | None, new: Blueprint) -> TableName | None:
    """The subscription table both blueprints have: a revision from old to new deletes its rows that
    name a queue it drops (one it drops or replaces takes every row along anyway)."""
    table = new.subscription_table
    return table if old is not None and old.subscription_table == table else None


def blueprint(topology: Topology) -> Blueprint:
    """Every table the topology needs (Topology.tables without the marks), in a stable order:
    queues, then delayed, then subscriptions, then sagas, then outboxes."""
    owners = {ep.saga_spec(saga).name: ep.name for ep in topology.endpoints for saga in ep.sagas}
    owners.update((ep.outbox_spec().name, ep.name) for ep in topology.endpoints if ep.outbox)
    return Blueprint(
        transport_version=topology.transport_version,
        engines=topology.engines,
        tables=in_kind_order(owned.spec for owned in topology.tables()),
        owners=owners,
        discarded=frozenset(d.table_name for d in topology.discard),
        drop_protected=frozenset(d.table_name for d in topology.drop_protected),
        online_rewrites=topology.postgresql_online_rewrites,
    )
