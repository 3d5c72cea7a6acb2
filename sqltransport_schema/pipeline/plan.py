"""plan / run: the data steps a compiled revision implies.

Compare the blueprint of the revision the database is stamped with and that of the target revision
(default: head). Every queue or delayed table the target no longer has, and whose messages were not
declared discardable (`discard:`), needs its messages moved before the revision's guarded drop can
pass. Where they go, in this order:

1. `--map OLD=NEW` (addresses), for renames;
2. the same table name in another schema or catalog (the queue moved);
3. a retired instance-specific queue `Base.qualifier` -> the endpoint's shared queue `Base`;
4. a delayed table `X.<suffix>` follows its endpoint's queue `X` when that moved/was renamed.

Anything else is reported as unresolved (exit 1) rather than guessed. `run` creates each destination
table if the database does not hold it yet (the engine's own idempotent DDL, which the migration
adopts), moves the messages with the move protocol, rewrites the old address to the new one in the
moved messages' headers and in the subscription table, and then `alembic upgrade` can drop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from .. import wire
from ..schema import Blueprint, Kind, SchemaName, TableName, TableSpec
from .connect import Endpoint, engine_of

if TYPE_CHECKING:
    from alembic.config import Config
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class PlannedMove:
    kind: str
    source: TableName
    destination: TableName
    reason: str
    source_address: str
    destination_address: str

    def describe(self) -> str:
        return f"{self.kind} {self.source_address} -> {self.destination_address} ({self.reason})"

    def to_json(self) -> dict:
        return {"kind": self.kind, "source": self.source_address, "destination": self.destination_address, "reason": self.reason}


@dataclass
class DataPlan:
    from_revision: str | None
    to_revision: str | None
    moves: list[PlannedMove] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)
    subscriptions: TableName | None = None
    target: Blueprint | None = None
    done: list[PlannedMove] = field(default_factory=list)  # moves whose source is empty already (a run did them)

    def to_json(self) -> dict:
        return {
            "from_revision": self.from_revision,
            "to_revision": self.to_revision,
            "moves": [m.to_json() for m in self.moves],
            "done": [m.to_json() for m in self.done],
            "unresolved": self.unresolved,
            "discarded": self.discarded,
        }


def address(name: TableName, default_schema: str | None) -> str:
    return wire.Address(name.table, name.schema if name.schema is not None else default_schema, name.catalog).format()


def derive(
    old: Blueprint | None, new: Blueprint, engine_name: str, mapping: dict[str, str] | None = None, delayed_suffix: str = "Delayed"
) -> tuple[list[PlannedMove], list[str], list[str]]:
    """Pure: (moves, unresolved, discarded) between two blueprints."""
    from .. import engines

    engine = engines.get(engine_name)
    default_schema = engine.default_schema
    if old is None:
        return [], [], []
    new_by_key = {engine.table_key(s.name): s for s in new.tables}
    discarded_keys = {engine.table_key(n) for n in new.discarded}
    explicit = {}
    for old_text, new_text in (mapping or {}).items():
        a, b = wire.parse_address(old_text), wire.parse_address(new_text)
        explicit[engine.table_key(TableName(a.table, a.schema, a.catalog))] = TableName(b.table, b.schema, b.catalog)
    removed = [s for s in old.tables if engine.table_key(s.name) not in new_by_key and s.kind is not Kind.SUBSCRIPTIONS]
    moves, unresolved, discarded = [], [], []
    queue_moves: dict[tuple, TableName] = {}

    def add(spec: TableSpec, dest: TableName, reason: str) -> None:
        moves.append(
            PlannedMove(spec.kind.value, spec.name, dest, reason, address(spec.name, default_schema), address(dest, default_schema))
        )

    for spec in removed:
        key = engine.table_key(spec.name)
        if key in discarded_keys:
            discarded.append(address(spec.name, default_schema))
            continue
        if spec.kind is not Kind.QUEUE:
            continue
        dest = explicit.get(key)
        reason = "mapped"
        if dest is None:
            same_name = [s for s in new.tables if s.kind is Kind.QUEUE and s.name.table == spec.name.table]
            if len(same_name) == 1:
                dest, reason = same_name[0].name, "queue moved"
        if dest is None and "." in spec.name.table:
            base = spec.name.table.rsplit(".", 1)[0]
            candidate = new_by_key.get(engine.table_key(TableName(base, spec.name.schema, spec.name.catalog)))
            if candidate is not None and candidate.kind is Kind.QUEUE:
                dest, reason = candidate.name, "instance queue retired"
        if dest is None:
            unresolved.append(
                f"queue {address(spec.name, default_schema)} is removed and holds no declared destination: "
                "pass --map OLD=NEW, or list it under discard:"
            )
            continue
        queue_moves[key] = dest
        add(spec, dest, reason)
    for spec in removed:
        key = engine.table_key(spec.name)
        if spec.kind is not Kind.DELAYED or key in discarded_keys:
            continue
        suffix = "." + delayed_suffix
        owner = spec.name.table[: -len(suffix)] if spec.name.table.endswith(suffix) else None
        dest = explicit.get(key)
        if dest is None and owner is not None:
            moved_owner = queue_moves.get(engine.table_key(TableName(owner, spec.name.schema, spec.name.catalog)))
            if moved_owner is not None:
                candidate = new_by_key.get(engine.table_key(moved_owner._replace(table=moved_owner.table + suffix)))
                if candidate is not None and candidate.kind is Kind.DELAYED:
                    dest = candidate.name
        if dest is None:
            unresolved.append(
                f"delayed table {address(spec.name, default_schema)} is removed and has no destination: "
                "pass --map OLD=NEW, or list it under discard:"
            )
            continue
        add(spec, dest, "follows its endpoint")
    return moves, unresolved, discarded


def plan(config: Config, url: str, to_revision: str | None = None, mapping: dict[str, str] | None = None) -> DataPlan:
    """The data steps between the revision `url` is stamped with and `to_revision` (default head)."""
    from alembic.script import ScriptDirectory

    from ..db import make_engine
    from ..defaults import DEFAULT_READ_TIMEOUT
    from ..revisions import blueprint_at, stamps

    script = ScriptDirectory.from_config(config)
    target = to_revision or script.get_current_head()
    engine = make_engine(url, must_exist=True, read_timeout=DEFAULT_READ_TIMEOUT)  # the stamp: a read
    try:
        with engine.connect() as conn:
            heads = stamps(conn)
    finally:
        engine.dispose()
    current = heads[0] if heads else None
    if len(heads) > 1:
        raise LookupError(f"the database is stamped with several revisions ({', '.join(heads)})")
    old = blueprint_at(script, current) if current else None
    new = blueprint_at(script, target) if target else None
    if new is None:
        raise LookupError(f"revision {target} records no topology snapshot")
    moves, unresolved, discarded = derive(old, new, engine_of(url).name, mapping)
    subscriptions = next((s.name for s in (old.tables if old else ()) if s.kind is Kind.SUBSCRIPTIONS), None)
    done = [m for m in moves if not _exists(url, Endpoint(url, m.source, Kind(m.kind)), with_rows=True)]
    pending = [m for m in moves if m not in done]
    return DataPlan(current, target, pending, unresolved, discarded, subscriptions, new, done)


def run(data_plan: DataPlan, url: str, spark: SparkSession | None = None, progress: TextIO | bool | None = None) -> list:
    """Perform the planned moves (destination tables created first when missing), then rewrite subscriptions."""
    from .move import move, move_subscriptions, parse_rewrites

    engine = engine_of(url)
    specs = {engine.table_key(s.name): s for s in data_plan.target.tables}
    results = []
    for step in data_plan.moves:
        _create_destination(url, specs[engine.table_key(step.destination)], data_plan.target.transport_version)
        rewrites = parse_rewrites([(step.source_address, step.destination_address)])
        kind = Kind(step.kind)
        results.append(
            move(Endpoint(url, step.source, kind), Endpoint(url, step.destination, kind), spark=spark, rewrites=rewrites, progress=progress)
        )
    if data_plan.subscriptions is not None and data_plan.moves:
        rewrites = parse_rewrites([(m.source_address, m.destination_address) for m in data_plan.moves if m.kind == "queue"])
        sub = Endpoint(url, data_plan.subscriptions, Kind.SUBSCRIPTIONS)
        if _exists(url, sub):
            move_subscriptions(sub, sub, rewrites)
    return results


def _create_destination(url: str, spec: TableSpec, version: str) -> None:
    """Create a move's destination table (and its schema) unless it exists, through the migrations'
    own operations: a revision's statements, an existing table adopted only if it has the transport's
    columns, locks taken under the migrations' lock policy (migrate/execution.py)."""
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    from ..db import make_engine
    from ..migrate import ops
    from ..migrate.compile import create_op

    sql_engine = make_engine(url, must_exist=True)  # the database the plan read: never made here
    try:
        with sql_engine.begin() as connection:
            operations = Operations(MigrationContext.configure(connection, opts={"transactional_ddl": True}))
            if spec.name.schema:
                operations.invoke(ops.EnsureSchemaOp(SchemaName(spec.name.schema, spec.name.catalog)))
            operations.invoke(create_op(spec, version))
    finally:
        sql_engine.dispose()


def _exists(url: str, ep: Endpoint, with_rows: bool = False) -> bool:
    """Whether the table exists (and, with_rows, holds a row)."""
    from .connect import dbapi_connect

    conn = dbapi_connect(url, must_exist=True)
    try:
        pipeline = ep.dialect.pipeline
        return pipeline.exists(conn, ep.target) and (not with_rows or pipeline.count(conn, ep.target) > 0)
    finally:
        conn.rollback()
        conn.close()
