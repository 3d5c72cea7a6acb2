"""What a picture holds, whatever draws it: tables as nodes grouped by the endpoint that owns them,
topics with an edge to each subscriber, and each table's state (missing, added, ...).

`draw` is the one builder; the commands give it the tables (a blueprint's, or two blueprints' for a
change), what they know of each and who owns what (`owners` from a topology, else `guess_owners`
from the names alone). Pure: no file, no database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..schema import PERSISTENCE_KINDS, Kind, TableName, TableSpec, default_table_prefix, protected_by_default

if TYPE_CHECKING:
    from ..topology import Topology

# A table's state, as every format styles it apart (and writes it in the label, for readers without colour).
MISSING, UNMANAGED, ADDED, REMOVED, CHANGED = "missing", "unmanaged", "added", "removed", "changed"
STATES = (MISSING, UNMANAGED, ADDED, REMOVED, CHANGED)
TOPIC = "topic"  # a node's kind beside the table kinds (schema.Kind values)
EXTRA = "table"  # the kind of a table in the database that no blueprint names
KIND_WORDS = {
    Kind.QUEUE.value: "queue",
    Kind.DELAYED.value: "delayed",
    Kind.SUBSCRIPTIONS.value: "subscriptions",
    Kind.SAGA.value: "saga",
    Kind.OUTBOX.value: "outbox",
    Kind.ARCHIVE.value: "archive",
    Kind.ACTION_LOG.value: "action log",
}


@dataclass(frozen=True)
class Node:
    key: str  # its id in the diagram (n1, t1, x1): never a name, so no format has to escape it
    lines: tuple[str, ...]  # the label, a line each: the table's name first
    kind: str  # a schema.Kind value, TOPIC or EXTRA
    state: str = ""  # one of STATES, or "" (as deployed / as the topology says)


@dataclass(frozen=True)
class Group:
    title: str
    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str = ""


@dataclass(frozen=True)
class Diagram:
    title: str
    groups: tuple[Group, ...] = ()  # one per endpoint (or table prefix) owning tables
    nodes: tuple[Node, ...] = ()  # outside any group: plain queues, the subscription table, topics, extra tables
    edges: tuple[Edge, ...] = ()

    def all_nodes(self) -> list[Node]:
        return [node for group in self.groups for node in group.nodes] + list(self.nodes)


@dataclass(frozen=True)
class Subscription:
    """A row of the subscription table: `target` the table its address names (None: no table of the picture)."""

    topic: str
    endpoint: str
    address: str
    target: TableName | None = None


@dataclass
class _Builder:
    owners: Mapping[TableName, str]
    groups: dict[str, list[Node]] = field(default_factory=dict)
    loose: list[Node] = field(default_factory=list)
    keys: dict[TableName, str] = field(default_factory=dict)

    def add(self, spec: TableSpec, state: str, note: str) -> None:
        key = f"n{len(self.keys) + 1}"
        self.keys[spec.name] = key
        node = Node(key, _label(spec.name, KIND_WORDS[spec.kind.value], state, note), spec.kind.value, state)
        owner = self.owners.get(spec.name)
        if owner is None:
            self.loose.append(node)
        else:
            self.groups.setdefault(owner, []).append(node)


def draw(
    title: str,
    specs: Iterable[TableSpec],
    *,
    owners: Mapping[TableName, str] | None = None,
    states: Mapping[TableName, str] | None = None,
    notes: Mapping[TableName, str] | None = None,
    extra: Sequence[tuple[str, str]] = (),
    subscriptions: Sequence[Subscription] = (),
) -> Diagram:
    """The picture of `specs`: each in its owner's group (owners: table -> group title, ENDPOINT; default
    `guess_owners`), labelled with its name, kind, state (states) and a note (notes: e.g. its depth);
    `extra` (name, state) the tables no blueprint names; each subscription a topic node with an edge
    to its subscriber's table (a node of its own, missing, when the address names none)."""
    specs = list(specs)
    builder = _Builder(owners if owners is not None else guess_owners(specs))
    states, notes = states or {}, notes or {}
    for spec in specs:
        builder.add(spec, states.get(spec.name, ""), notes.get(spec.name, ""))
    loose = builder.loose
    loose += [Node(f"x{i}", _label(None, EXTRA, state, "", name), EXTRA, state) for i, (name, state) in enumerate(extra, 1)]
    topics: dict[str, str] = {}
    strays: dict[str, str] = {}
    edges = []
    for row in subscriptions:
        if row.topic not in topics:
            topics[row.topic] = f"t{len(topics) + 1}"
            loose.append(Node(topics[row.topic], (row.topic, TOPIC), TOPIC))
        target = builder.keys.get(row.target) if row.target is not None else None
        if target is None:
            target = strays.get(row.address)
        if target is None:
            target = strays[row.address] = f"s{len(strays) + 1}"
            loose.append(Node(target, _label(None, Kind.QUEUE.value, MISSING, "", row.address), Kind.QUEUE.value, MISSING))
        edges.append(Edge(topics[row.topic], target, row.endpoint))
    groups = tuple(Group(owner, tuple(nodes)) for owner, nodes in builder.groups.items())
    return Diagram(title, groups, tuple(loose), tuple(edges))


def _label(name: TableName | None, kind: str, state: str, note: str, text: str | None = None) -> tuple[str, ...]:
    """A node's lines: its name, then where it is (schema, catalog), its kind and state, and the note."""
    if name is None:
        lines = [text or ""]
    else:
        lines = [name.table]
        place = ", ".join(f"{word} {value}" for word, value in (("schema", name.schema), ("catalog", name.catalog)) if value is not None)
        if place:
            lines.append(place)
    lines.append(f"{kind} ({state})" if state else kind)
    if note:
        lines.append(note)
    return tuple(lines)


ENDPOINT = "endpoint {}"  # a group's title
PREFIX = "tables {}*"  # the title of saga and outbox tables no endpoint is known to own (by their prefix)


def topology_owners(topology: Topology) -> dict[TableName, str]:
    """Table -> the endpoint that owns it, as a topology says: its queues, instance queues and
    delayed table (consecutive in Topology.tables()), its saga and outbox tables."""
    owners: dict[TableName, str] = {}
    current = None
    for owned in topology.tables():
        if owned.role == "endpoint":
            current = ENDPOINT.format(owned.spec.name.table)
        if owned.role in ("endpoint", "instance queue", "delayed table") and current is not None:
            owners[owned.spec.name] = current
    for endpoint in topology.endpoints:
        for saga in endpoint.sagas:
            owners[endpoint.saga_spec(saga).name] = ENDPOINT.format(endpoint.name)
        if endpoint.outbox:
            owners[endpoint.outbox_spec().name] = ENDPOINT.format(endpoint.name)
    return owners


def guess_owners(specs: Sequence[TableSpec]) -> dict[TableName, str]:
    """Table -> owning endpoint from a blueprint's names alone (what a database or an old revision
    records; no topology): a delayed table `E.suffix` and an instance queue `E.instance` (one
    without a delayed table of its own) belong to queue E beside them; a saga or outbox table to the
    endpoint whose default prefix (E_) it has, else to the one endpoint in its schema, else to a
    group named by its prefix. A queue that owns nothing is drawn alone (plain queues, and
    endpoints without delayed, instance or saga tables, look the same)."""
    place = {spec.name: (spec.name.schema, spec.name.catalog) for spec in specs}
    queues = {(spec.name.schema, spec.name.catalog, spec.name.table): spec.name for spec in specs if spec.kind is Kind.QUEUE}
    owners: dict[TableName, str] = {}
    delayed_owners = set()
    for spec in specs:
        if spec.kind is Kind.DELAYED:
            base = queues.get((*place[spec.name], spec.name.table.rpartition(".")[0]))
            if base is not None:
                owners[spec.name] = owners[base] = base.table
                delayed_owners.add(base)
    for name in queues.values():
        base = queues.get((*place[name], name.table.rpartition(".")[0])) if "." in name.table else None
        if base is not None and name not in delayed_owners and not protected_by_default(Kind.QUEUE, base.table):
            owners[name] = owners[base] = owners.get(base, base.table)
    titles = {name: ENDPOINT.format(owner) for name, owner in owners.items()}
    inputs: dict[tuple, list[str]] = {}  # place -> its queues that may be an endpoint's input (not error, audit, an instance)
    for (schema, catalog, table), name in queues.items():
        if not protected_by_default(Kind.QUEUE, table) and owners.get(name, table) == table:
            inputs.setdefault((schema, catalog), []).append(table)
    by_prefix = {(place, default_table_prefix(table)): table for place, tables in inputs.items() for table in tables}
    for spec in specs:
        if spec.kind in PERSISTENCE_KINDS:
            here = inputs.get(place[spec.name], [])
            owner = by_prefix.get((place[spec.name], spec.saga_prefix)) or (here[0] if len(here) == 1 else None)
            titles[spec.name] = ENDPOINT.format(owner) if owner is not None else PREFIX.format(spec.saga_prefix or "")
    return titles
