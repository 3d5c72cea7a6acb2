"""Least-privilege grants: what a runtime login (or the installer) needs, derived from the topology.

The derivation here is pure: topology in, a GrantPlan out. Engines turn a plan into their own
GRANT statements (the "grants" sections of engines/postgresql/grants.py and engines/mssql/grants.py).

Needs, per table, follow the runtime statements (runtime/transport.py):
  receive        an endpoint's input and instance queues: send, receive, receive_batch, lock_batch,
                 delete_locked, peek, purge_expired, purge_all (and move_due inserts into the input queue)
  send           every other queue the endpoint may address: send only
  delayed        the endpoint's delayed table: store (INSERT), move_due (SELECT, DELETE), next_due
  subscriptions  the subscription table: subscribe (upsert), unsubscribe, find_subscribers
  saga           the endpoint's saga tables: find/get (SELECT), insert, update, complete (DELETE)
  outbox         the endpoint's outbox table: get (SELECT), store (INSERT), set as dispatched (UPDATE), cleanup (DELETE)
  monitor        every table, read only: what `status` (every format, --estimate; an exporter reads the same) and `check` read
"""

from __future__ import annotations

from dataclasses import dataclass

from . import errors
from .schema import PERSISTENCE_KINDS, SHARED, Kind, SchemaName, TableName, blueprint
from .topology import Topology
from .versions import profile

RECEIVE, SEND, DELAYED, SUBSCRIPTIONS, SAGA, OUTBOX = "receive", "send", "delayed", "subscriptions", "saga", "outbox"
MONITOR = "monitor"


@dataclass(frozen=True)
class TableGrant:
    need: str  # one of RECEIVE, SEND, DELAYED, SUBSCRIPTIONS, SAGA, OUTBOX, MONITOR (or a table kind: installer_plan)
    table: TableName
    serial: bool = False  # a queue whose Seq column draws from a sequence (PostgreSQL)


@dataclass(frozen=True)
class GrantPlan:
    transport_version: str
    tables: tuple[TableGrant, ...]
    endpoint: str | None = None

    @property
    def schemas(self) -> tuple[SchemaName, ...]:
        """Every schema the tables live in (None: the engine's default), in first-use order."""
        seen: dict[SchemaName | None, None] = {}
        for grant in self.tables:
            seen.setdefault(SchemaName(grant.table.schema, grant.table.catalog) if grant.table.schema is not None else None)
        return tuple(seen)  # type: ignore[arg-type]


def runtime_plan(topology: Topology, endpoint: str | None = None, role: str = SHARED) -> GrantPlan:
    """The tables a runtime login touches, and how, in a database of that role (docs/tenants.md).

    Without an endpoint the login runs every endpoint of the topology: it receives from every
    queue and uses every delayed table. With one, it receives only from that endpoint's own
    queues, uses only its delayed table, and may send to every queue of the topology.
    """
    prof = profile(topology.transport_version)
    print_ = blueprint(topology).for_role(role)
    owned: set[TableName] = set()
    own_delayed: set[TableName] = set()
    own_sagas: set[TableName] = set()  # the endpoint's SQL persistence tables: saga tables and its outbox
    if endpoint is not None:
        found = [ep for ep in topology.endpoints if ep.name == endpoint]
        if not found:
            known = ", ".join(ep.name for ep in topology.endpoints) or "none"
            raise errors.UsageError(f"no endpoint {endpoint!r} in {topology.path}; endpoints: {known}")
        ep = found[0]
        owned = {TableName(table, ep.schema, ep.catalog) for table in ep.queue_tables()}
        if ep.has_delayed_table(prof):
            own_delayed = {TableName(ep.delayed_table(topology.delayed_table_suffix), ep.schema, ep.catalog)}
        own_sagas = {ep.saga_spec(saga).name for saga in ep.sagas} | ({ep.outbox_spec().name} if ep.outbox else set())
    grants: list[TableGrant] = []
    for spec in print_.tables:
        if spec.kind in (Kind.ARCHIVE, Kind.ACTION_LOG):
            continue  # the console's tables: no endpoint reads or writes them
        serial = spec.kind is Kind.QUEUE
        if spec.kind is Kind.QUEUE:
            need = RECEIVE if endpoint is None or spec.name in owned else SEND
        elif spec.kind is Kind.DELAYED:
            if endpoint is not None and spec.name not in own_delayed:
                continue
            need = DELAYED
        elif spec.kind in PERSISTENCE_KINDS:
            if endpoint is not None and spec.name not in own_sagas:
                continue
            need = SAGA if spec.kind is Kind.SAGA else OUTBOX
        else:
            need = SUBSCRIPTIONS
        grants.append(TableGrant(need, spec.name, serial))
    return GrantPlan(topology.transport_version, tuple(grants), endpoint)


def installer_plan(topology: Topology, role: str = SHARED) -> GrantPlan:
    """Every table of the topology in a database of that role: the installer creates, alters and drops them all."""
    return GrantPlan(
        topology.transport_version,
        tuple(TableGrant(spec.kind.value, spec.name, spec.kind is Kind.QUEUE) for spec in blueprint(topology).for_role(role).tables),
    )


def monitor_plan(topology: Topology, role: str = SHARED) -> GrantPlan:
    """Every table of the topology in a database of that role, read only: a monitoring login (status in every
    format, an exporter of it, check) reads depths, heads, due times and the error queue's groupings, and changes nothing."""
    return GrantPlan(
        topology.transport_version,
        tuple(TableGrant(MONITOR, spec.name, spec.kind is Kind.QUEUE) for spec in blueprint(topology).for_role(role).tables),
    )
