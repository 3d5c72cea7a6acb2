"""The statements a DBA reviews before granting a login the right to run them: every runtime
statement of an engine at a transport version, and every saga or outbox table's statements of a topology.
`sqltransport-schema statements` prints these; the engines write each statement."""

from __future__ import annotations

from collections.abc import Callable

from . import errors
from .defaults import DEFAULT_PEEK_BATCH_SIZE, DEFAULT_TOPICS
from .engines import Dialect
from .schema import Kind, TableName, TableSpec, blueprint
from .statements import Statement
from .topology import DEFAULT_DELAYED_SUFFIX, DEFAULT_SUBSCRIPTION_TABLE, Topology
from .versions import Profile, profile


def runtime_statements(
    engine: Dialect,
    version: str,
    queue: TableName,
    *,
    subscription_table: str = DEFAULT_SUBSCRIPTION_TABLE,
    delayed_suffix: str = DEFAULT_DELAYED_SUFFIX,
    topics: int = DEFAULT_TOPICS,
    peek_batch_size: int = DEFAULT_PEEK_BATCH_SIZE,
) -> tuple[Profile, dict[str, Statement]]:
    """(profile, statements) of one queue, with its delayed and subscription tables (in the queue's
    schema and catalog) where the version has them."""
    if engine.saga_only:
        raise errors.UsageError(f"{engine.name} holds saga tables only: add --sagas to print the saga statements of the topology")
    prof = profile(version)
    reason = engine.unsupported(prof)
    if reason:
        raise errors.UsageError(reason)
    tables = {}
    if prof.delayed_delivery:
        tables["delayed"] = queue._replace(table=f"{queue.table}.{delayed_suffix}")
    if prof.subscriptions:
        tables["subscriptions"] = queue._replace(table=subscription_table)
    return prof, engine.runtime_statements(prof, queue, topics=topics, peek_batch_size=peek_batch_size, **tables)


def saga_statements(engine: Dialect, topology: Topology) -> dict[str, Statement]:
    """Every saga table's statements, named `<table>: <statement>`."""
    return _table_statements(topology, Kind.SAGA, engine.saga_statements, "sagas")


def outbox_statements(engine: Dialect, topology: Topology) -> dict[str, Statement]:
    """Every outbox table's statements (store, get, set as dispatched, cleanup), named `<table>: <statement>`."""
    return _table_statements(topology, Kind.OUTBOX, engine.outbox_statements, "outbox")


def _table_statements(
    topology: Topology, kind: Kind, build: Callable[[TableSpec], dict[str, Statement]], what: str
) -> dict[str, Statement]:
    """The statements `build` gives each table of this kind; the topology must declare one."""
    out = {}
    for spec in blueprint(topology).tables:
        if spec.kind is kind:
            for name, statement in build(spec).items():
                out[f"{spec.name.table}: {name}"] = statement
    if not out:
        raise errors.UsageError(f"{topology.path} declares no {what}")
    return out
