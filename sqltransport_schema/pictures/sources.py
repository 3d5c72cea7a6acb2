"""What each command draws: a topology, a compiled change (migrate.compile.Plan), a drift
(check.Report), a live database (runtime.operations.StatusReport). Each reads what the command
already has and hands it to `draw`; none reads a file or a database itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .. import engines, wire
from ..errors import UsageError
from ..schema import Kind, TableName, TableSpec, blueprint
from .model import ADDED, CHANGED, MISSING, REMOVED, UNMANAGED, Diagram, Subscription, draw, guess_owners, topology_owners

if TYPE_CHECKING:
    from ..check import Report
    from ..migrate.compile import Plan
    from ..runtime.operations import StatusReport, TableStatus
    from ..topology import Topology

# check's categories of tables in the database that the deployed blueprint does not name
EXTRA_CATEGORIES = ("unmanaged_table", "extra_managed_table")
NOT_A_CHANGE = ("missing_table", "unapplied_revisions", *EXTRA_CATEGORIES)


def from_topology(topology: Topology) -> Diagram:
    """Every table a topology owns, in its endpoint's group."""
    found = blueprint(topology)
    return draw(f"{topology.path} (transport {topology.transport_version})", found.tables, owners=topology_owners(topology))


def from_plan(plan: Plan, topology: Topology | None = None) -> Diagram:
    """A compiled change: the new blueprint's tables and the removed ones, each added, removed or
    changed (an operation of the revision acts on it) styled apart; owners from the topology where
    it names them, else guessed from the names."""
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
    return draw(f"the change (transport {version})", specs, owners=owners, states=states)


def from_check(report: Report) -> Diagram:
    """A drift: the deployed blueprint's tables, those missing and those whose columns or indexes
    differ styled apart, and the tables no revision (or another one) names beside them."""
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
    title = f"{report.engine} database at revision {report.deployed_revision}"
    return draw(title, specs, states=states, extra=list(extra.items()))


def from_status(report: StatusReport, notes: Mapping[str, str], extra: Sequence[tuple[str, str]] = ()) -> Diagram:
    """A live database: the deployed blueprint's tables (report.blueprint), each with its note
    (notes: by address, e.g. depth and oldest message), missing ones styled apart, `extra` (name,
    state) the tables it does not name, and an edge from each topic to each subscriber
    (report.subscriptions)."""
    specs = _specs(report)
    states = {spec.name: MISSING for spec, table in zip(specs, report.tables) if table.missing}
    by_name = {spec.name: notes.get(table.address, "") for spec, table in zip(specs, report.tables)}
    dialect = engines.get(report.engine)
    keys = {_key(dialect, table): spec.name for spec, table in zip(specs, report.tables)}
    subscriptions = [
        Subscription(topic, endpoint, address, _subscriber(dialect, address, report.tables, keys))
        for endpoint, topic, address in report.subscriptions
    ]
    title = f"{report.database} ({report.engine}, transport {report.transport_version}) at {report.taken_at.isoformat(timespec='seconds')}"
    return draw(title, specs, states=states, notes=by_name, extra=extra, subscriptions=subscriptions)


def _specs(report: StatusReport) -> list[TableSpec]:
    """The blueprint's spec of each table of the report (the report lists them in its order); a
    report made without one gets specs from its own entries."""
    if report.blueprint is not None and len(report.blueprint.tables) == len(report.tables):
        return list(report.blueprint.tables)
    return [TableSpec(Kind(t.kind), TableName(t.name, t.schema, t.catalog)) for t in report.tables]


def _key(dialect: engines.Dialect, table: TableStatus) -> tuple:
    return dialect.table_key(TableName(table.name, table.schema, table.catalog))


def _subscriber(dialect: engines.Dialect, address: str, tables: Sequence[TableStatus], keys: Mapping[tuple, TableName]) -> TableName | None:
    """The table of the picture a subscriber's address names: a part it leaves out is the table's
    own (a bare `Sales` is Sales wherever the blueprint puts it)."""
    try:
        parsed = wire.parse_address(address)
    except UsageError:
        return None
    for table in tables:
        if table.kind != Kind.QUEUE.value:
            continue
        schema = parsed.schema if parsed.schema is not None else table.schema
        catalog = parsed.catalog if parsed.catalog is not None else table.catalog
        key = dialect.table_key(TableName(parsed.table, schema, catalog))
        if key == _key(dialect, table):
            return keys[key]
    return None
