"""What each command draws: a topology, a compiled change (migrate.compile.Plan), a drift
(check.Report), a live database (runtime.status.StatusReport). Each reads what the command
already has and hands it to `draw`; none reads a file or a database itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from .. import engines, wire
from ..errors import UsageError
from ..schema import Kind, TableName, TableSpec, blueprint
from .model import ADDED, CHANGED, MISSING, REMOVED, UNMANAGED, Diagram, Subscription, draw, guess_owners, topology_owners

if TYPE_CHECKING:
    from ..check import Report
    from ..migrate.compile import Plan
    from ..runtime.status import StatusReport, TableStatus
    from ..topology import Topology

# check's categories of tables in the database that the deployed blueprint does not name
EXTRA_CATEGORIES = ("unmanaged_table", "extra_managed_table")
NOT_A_CHANGE = ("missing_table", "unapplied_revisions", *EXTRA_CATEGORIES)
# The tables a picture of a markdown report draws at most (a pull-request comment: beyond that a
# picture is unreadable, and Mermaid refuses long texts): past it, only those worth a look.
MARKDOWN_TABLES = 150


def _focus(specs: list[TableSpec], keep: Callable[[TableSpec], bool], limit: int | None, which: str) -> tuple[list[TableSpec], str]:
    """specs, or, when they are more than limit, only those `keep` says (at most limit); and what
    the title adds: how many of how many are drawn, and `which`."""
    if limit is None or len(specs) <= limit:
        return specs, ""
    kept = [spec for spec in specs if keep(spec)][:limit]
    return kept, f"; {len(kept)} of {len(specs)} tables drawn: {which}"


def from_topology(topology: Topology) -> Diagram:
    """Every table a topology owns, in its endpoint's group."""
    found = blueprint(topology)
    return draw(f"{topology.path} (transport {topology.transport_version})", found.tables, owners=topology_owners(topology))


def from_plan(plan: Plan, topology: Topology | None = None, limit: int | None = None) -> Diagram:
    """A compiled change: the new blueprint's tables and the removed ones, each added, removed or
    changed (an operation of the revision acts on it) styled apart (past `limit` tables, only
    those); owners from the topology where it names them, else guessed from the names."""
    old = plan.old.by_name() if plan.old is not None else {}
    new = plan.new.by_name()
    touched = {op.table_name for op in plan.upgrade if op.table_name is not None}
    states = {}
    for name, spec in new.items():
        if name not in old:
            states[name] = ADDED
        elif name in touched or old[name] != spec:
            states[name] = CHANGED
    removed = [spec for spec in (plan.old.tables if plan.old is not None else ()) if spec.name not in new]
    states.update((spec.name, REMOVED) for spec in removed)
    specs = [*plan.new.tables, *removed]
    owners = guess_owners(specs)
    if topology is not None:
        owners.update(topology_owners(topology))
    version = plan.new.transport_version
    if plan.old is not None and plan.old.transport_version != version:
        version = f"{plan.old.transport_version} -> {version}"
    drawn, note = _focus(specs, lambda spec: spec.name in states, limit, "those it adds, removes or changes")
    return draw(f"the change (transport {version}){note}", drawn, owners=owners, states=states)


def from_check(report: Report, limit: int | None = None) -> Diagram:
    """A drift: the deployed blueprint's tables, those missing and those whose columns or indexes
    differ styled apart (past `limit` tables, only those), and the tables no revision (or another
    one) names beside them."""
    from ..check import display

    engine = engines.get(report.engine)
    specs = [spec for spec in (report.expected.tables if report.expected is not None else ()) if engine.holds(spec.kind)]
    names = {display(engine, spec.name): spec.name for spec in specs}
    states: dict[TableName, str] = {}
    extra: dict[str, str] = {}
    for finding in report.findings:
        name = names.get(finding.table or "")
        if finding.category in EXTRA_CATEGORIES:
            extra[finding.table] = UNMANAGED
        elif finding.category == "missing_table" and name is not None:
            states[name] = MISSING
        elif name is not None and finding.category not in NOT_A_CHANGE:
            states.setdefault(name, CHANGED)
    drawn, note = _focus(specs, lambda spec: spec.name in states, limit, "those that drift")
    title = f"{report.engine} database at revision {report.deployed_revision}{note}"
    return draw(title, drawn, states=states, extra=list(extra.items())[:limit])


def from_status(report: StatusReport, notes: Mapping[str, str], extra: Sequence[tuple[str, str]] = (), limit: int | None = None) -> Diagram:
    """A live database: the deployed blueprint's tables (report.blueprint), each with its note
    (notes: by address, e.g. depth and oldest message), missing ones styled apart, `extra` (name,
    state) the tables it does not name, and an edge from each topic to each subscriber
    (report.subscriptions). Past `limit` tables, only those holding rows, missing, unreadable or
    subscribing."""
    specs = _specs(report)
    states = {spec.name: MISSING for spec, table in zip(specs, report.tables) if table.missing}
    by_name = {spec.name: notes.get(table.address, "") for spec, table in zip(specs, report.tables)}
    dialect = engines.get(report.engine)
    queues: dict[str, list[tuple[TableStatus, TableName]]] = {}  # by folded name: the candidates an address may name
    for spec, table in zip(specs, report.tables):
        if table.kind == Kind.QUEUE.value:
            queues.setdefault(table.name.casefold(), []).append((table, spec.name))
    subscriptions = [
        Subscription(topic, endpoint, address, _subscriber(dialect, address, queues)) for endpoint, topic, address in report.subscriptions
    ]
    worth = {spec.name for spec, t in zip(specs, report.tables) if t.missing or t.depth or not t.readable}
    worth.update(row.target for row in subscriptions)
    drawn, note = _focus(specs, lambda spec: spec.name in worth, limit, "those holding rows, missing or subscribing")
    title = f"{report.database} ({report.engine}, transport {report.transport_version}) at {report.taken_at.isoformat(timespec='seconds')}"
    return draw(title + note, drawn, states=states, notes=by_name, extra=extra[:limit], subscriptions=subscriptions)


def _specs(report: StatusReport) -> list[TableSpec]:
    """The blueprint's spec of each table of the report (the report lists them in its order); a
    report made without one gets specs from its own entries."""
    if report.blueprint is not None and len(report.blueprint.tables) == len(report.tables):
        return list(report.blueprint.tables)
    return [TableSpec(Kind(t.kind), TableName(t.name, t.schema, t.catalog)) for t in report.tables]


def _subscriber(dialect: engines.Dialect, address: str, queues: Mapping[str, list[tuple[TableStatus, TableName]]]) -> TableName | None:
    """The queue a subscriber's address names (queues: by folded name): a part the address leaves
    out is the queue's own (a bare `Sales` is Sales wherever the blueprint puts it)."""
    try:
        parsed = wire.parse_address(address)
    except UsageError:
        return None
    for table, name in queues.get(parsed.table.casefold(), ()):
        schema = parsed.schema if parsed.schema is not None else table.schema
        catalog = parsed.catalog if parsed.catalog is not None else table.catalog
        named = dialect.table_key(TableName(parsed.table, schema, catalog))
        if named == dialect.table_key(TableName(table.name, table.schema, table.catalog)):
            return name
    return None
