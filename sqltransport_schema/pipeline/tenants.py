"""tenants: carry the rows of the shared database's saga and outbox tables to each tenant's database.

The step between compiling tenant placement and upgrading the shared database (docs/tenants.md):
every row of a placed table is written to the same table in its tenant's database, the tenant read
from the row (a column, a property of a saga's JSON Data, or a header of an outbox row's first
outgoing message) and mapped to a URL (the fleet file's tenant targets, or a template).

Per tenant and batch of keys: the shared rows are read and locked (PostgreSQL `FOR UPDATE`, SQLite
the write lock), those the tenant's table lacks are inserted and committed, every row is read back
from the tenant and compared with the shared one, and only then, with consent (`delete_source`),
the verified rows are deleted from the shared table in the transaction that locked them. Rows are
written by their key (Id, MessageId), never twice: a rerun after a crash finds the rows already in
the tenant's table (equal: verified, and deleted with consent), so nothing is duplicated or lost.
A row whose tenant is unknown (no value, or one the map does not name), whose tenant database
fails, or which the tenant holds with other values, is reported and left in the shared table.

Under Spark the driver reads each row's key and tenant value; each task carries the rows of its
tenants (one task per tenant at a time: a tenant's database has one writer).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import errors
from ..defaults import TENANT_BATCH
from ..schema import Kind, TableName
from .backfill import property_value
from .connect import dbapi_connect, engine_of
from .move import failpoint
from .results import JobResult

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from alembic.config import Config
    from pyspark.sql import SparkSession

KEYS = {Kind.SAGA: "Id", Kind.OUTBOX: "MessageId"}  # SQL persistence's primary key of each placed kind
SOURCES = {Kind.SAGA: "Data", Kind.OUTBOX: "Operations"}  # the JSON a property / header is read from
UNKNOWN = ""  # the tenant of a row without a value


@dataclass(frozen=True)
class TenantOf:
    """Where a row names its tenant: a saga by a column of its table or a property of its JSON Data
    (dots for nested), an outbox row by a header of its first outgoing message."""

    column: str | None = None
    property: str | None = None
    header: str | None = None

    def source(self, kind: Kind) -> str | None:
        """The column a row of this kind names its tenant in (None: no option names it)."""
        if kind is Kind.SAGA:
            return self.column if self.column is not None else (SOURCES[kind] if self.property is not None else None)
        return SOURCES[kind] if self.header is not None else None

    def value(self, kind: Kind, raw: Any) -> str:
        """The tenant named by the source column's value (UNKNOWN when none); raises ValueError on unreadable JSON."""
        if raw is None:
            return UNKNOWN
        if kind is Kind.SAGA and self.column is not None:
            return str(raw)
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
        if kind is Kind.SAGA:
            return property_value(text, str(self.property).split(".")) or UNKNOWN
        operations = json.loads(text)
        first = operations[0] if isinstance(operations, list) and operations else {}
        value = (first.get("Headers") or {}).get(self.header) if isinstance(first, dict) else None
        return UNKNOWN if value is None else str(value)


@dataclass(frozen=True)
class TenantUrls:
    """Tenant name -> its database URL: the fleet file's tenant targets, or a template with {name}."""

    named: Mapping[str, str] = field(default_factory=dict)
    template: str | None = None

    def url(self, tenant: str) -> str | None:
        if tenant == UNKNOWN:
            return None
        if self.template is not None:
            return self.template.replace("{name}", tenant)
        return self.named.get(tenant)


@dataclass
class TenantOutcome:
    """One tenant's rows of one table: carried (new in the tenant), present (there already, equal),
    deleted from the shared table, conflicts (the tenant holds other values), error (its database failed)."""

    tenant: str
    rows: int
    carried: int = 0
    present: int = 0
    deleted: int = 0
    conflicts: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class TableMove:
    table: str
    kind: str
    rows: int
    tenants: list[TenantOutcome]
    unknown: dict[str, int]  # a tenant value no map names ("" none) -> rows left
    unreadable: int  # rows whose JSON could not be read: left

    @property
    def left(self) -> int:
        """Rows that stay in the shared table: unknown, unreadable, conflicting, failed, or not deleted."""
        return self.rows - sum(t.deleted for t in self.tenants)


@dataclass
class TenantMoveResult(JobResult):
    source: str
    tables: list[TableMove]
    deleted_source: bool
    seconds: float

    @property
    def unsettled(self) -> int:
        """Rows not in their tenant's table: unknown or unreadable tenant, conflicts, failed tenants."""
        out = 0
        for table in self.tables:
            out += sum(table.unknown.values()) + table.unreadable
            out += sum((t.rows if t.error else len(t.conflicts)) for t in table.tenants)
        return out


@dataclass(frozen=True)
class _Job:
    """What a task needs (picklable): the shared database, the table, its columns and key, the map."""

    shared: str
    table: TableName
    columns: tuple[str, ...]
    key: str
    urls: TenantUrls
    delete_source: bool
    batch_size: int


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def carry(job: _Job, tenant: str, keys: list[str]) -> TenantOutcome:
    """Carry one tenant's rows (by key), batch after batch; the shared rows are deleted only once
    the tenant's copy is read back equal, and only with consent."""
    outcome = TenantOutcome(tenant, len(keys))
    url = job.urls.url(tenant)
    assert url is not None
    pipeline = engine_of(job.shared).pipeline
    if engine_of(url).name != engine_of(job.shared).name:
        outcome.error = "the tenant's database is another engine than the shared one: rows are carried between databases of one engine"
        return outcome
    src = dst = None
    try:
        src, dst = dbapi_connect(job.shared, must_exist=True), dbapi_connect(url, must_exist=True)
        pipeline.json_as_text(src)
        pipeline.json_as_text(dst)
        for number, batch in enumerate(_chunks(keys, job.batch_size)):
            pipeline.begin(src, write=job.delete_source)
            rows = pipeline.read_keyed(src, job.table, job.columns, job.key, batch, lock=job.delete_source)
            pipeline.begin(dst, write=True)
            held = pipeline.read_keyed(dst, job.table, job.columns, job.key, list(rows), lock=False)
            pipeline.insert_keyed(dst, job.table, job.columns, [row for key, row in rows.items() if key not in held])
            failpoint("tenant-before-dest-commit", number)
            pipeline.commit(dst)
            failpoint("tenant-after-dest-commit", number)
            pipeline.begin(dst)
            copied = pipeline.read_keyed(dst, job.table, job.columns, job.key, list(rows), lock=False)
            pipeline.rollback(dst)
            verified = [key for key, row in rows.items() if copied.get(key) == row]
            outcome.conflicts += [key for key in rows if key in held and held[key] != rows[key]]
            outcome.present += sum(1 for key in rows if key in held and held[key] == rows[key])
            outcome.carried += sum(1 for key in verified if key not in held)
            if job.delete_source:
                pipeline.delete_keyed(src, job.table, job.key, verified)
                pipeline.commit(src)
                outcome.deleted += len(verified)
                failpoint("tenant-after-source-delete", number)
            else:
                pipeline.rollback(src)
    except Exception as exc:  # the tenant's database failed: its rows stay in the shared table, reported
        said = str(exc) if isinstance(exc, errors.SqltransportError) else f"{type(exc).__name__}: {exc}"  # ours say it for users
        outcome.error = said.splitlines()[0]
    finally:
        for conn in (src, dst):
            if conn is not None:
                conn.close()
    return outcome


def _read_tenants(
    shared: str, table: TableName, key: str, source: str, tenant_of: TenantOf, kind: Kind
) -> tuple[dict[str, list[str]], int, int]:
    """(tenant -> keys, rows, unreadable): each row's key and tenant, read once through the driver."""
    pipeline = engine_of(shared).pipeline
    conn = dbapi_connect(shared, must_exist=True)
    try:
        pipeline.json_as_text(conn)
        pipeline.begin(conn)
        by_tenant: dict[str, list[str]] = defaultdict(list)
        rows = unreadable = 0
        for row_key, raw in pipeline.keyed_sources(conn, table, key, source):
            rows += 1
            try:
                by_tenant[tenant_of.value(kind, raw)].append(str(row_key))
            except ValueError:
                unreadable += 1
        pipeline.rollback(conn)
    finally:
        conn.close()
    return by_tenant, rows, unreadable


@dataclass(frozen=True)
class MoveSettings:
    """How `pipeline tenants` carries rows, the same for every table of a run (one object, passed
    whole from move to move_table): through `spark` (else here, a tenant at a time), deleting the
    shared rows once their tenant holds them (`delete_source`, the user's consent), `batch_size`
    rows a transaction, `progress` called with each tenant's outcome."""

    spark: SparkSession | None = None
    delete_source: bool = False
    batch_size: int = TENANT_BATCH
    progress: Callable[[str, TenantOutcome], None] | None = None


def move_table(
    shared: str, table: TableName, kind: Kind, tenant_of: TenantOf, urls: TenantUrls, settings: MoveSettings = MoveSettings()
) -> TableMove:
    """Carry one placed table's rows to their tenants' databases."""
    spark, delete_source, batch_size, progress = settings.spark, settings.delete_source, settings.batch_size, settings.progress
    dialect = engine_of(shared)
    pipeline = dialect.pipeline
    key = KEYS[kind]
    conn = dbapi_connect(shared, must_exist=True)
    try:
        try:
            columns = pipeline.column_names(conn, table)
        except Exception:
            raise errors.UsageError(f"{dialect.qualified(table)}: no such table in the shared database") from None
        finally:
            pipeline.rollback(conn)
    finally:
        conn.close()
    source = tenant_of.source(kind)
    if source is None:
        option = "--tenant-column or --tenant-property" if kind is Kind.SAGA else "--tenant-header"
        raise errors.UsageError(
            f"{dialect.qualified(table)} is {'a saga' if kind is Kind.SAGA else 'an outbox'} table: "
            f"name where its rows' tenant is with {option}"
        )
    missing = [name for name in (key, source) if name not in columns]
    if missing:
        raise errors.UsageError(f"{dialect.qualified(table)} has no column {missing[0]!r} (its columns: {', '.join(columns)})")
    by_tenant, rows, unreadable = _read_tenants(shared, table, key, source, tenant_of, kind)
    known = {tenant: keys for tenant, keys in by_tenant.items() if urls.url(tenant) is not None}
    unknown = {tenant: len(keys) for tenant, keys in by_tenant.items() if tenant not in known}
    job = _Job(shared, table, columns, key, urls, delete_source, batch_size)
    if spark is None or not known:
        outcomes = []
        for tenant, keys in sorted(known.items()):
            outcomes.append(carry(job, tenant, keys))
            if progress is not None:
                progress(dialect.qualified(table), outcomes[-1])
    else:  # one task per tenant at a time: a tenant's rows go to its database through one connection
        pairs = sorted(known.items())
        parallel = max(1, min(len(pairs), spark.sparkContext.defaultParallelism))
        tasks = spark.sparkContext.parallelize(pairs, len(pairs)).coalesce(parallel)
        outcomes = tasks.map(lambda pair: carry(job, pair[0], pair[1])).collect()
        for outcome in outcomes if progress is not None else ():
            progress(dialect.qualified(table), outcome)
    return TableMove(dialect.qualified(table), kind.value, rows, sorted(outcomes, key=lambda o: o.tenant), unknown, unreadable)


def placed_tables(config: Config, names: list[str], tenant_of: TenantOf) -> tuple[list[tuple[TableName, Kind]], list[str]]:
    """(the tables to carry, the placed tables left out for want of a tenant option): the head
    revision's tables placed in tenant databases, or those of them `names` lists (addresses)."""
    from alembic.script import ScriptDirectory

    from ..revisions import head_blueprint
    from ..schema import TENANT
    from .connect import table_name

    blueprint = head_blueprint(ScriptDirectory.from_config(config))[1]
    placed = [spec for spec in (blueprint.for_role(TENANT).tables if blueprint else ()) if spec.kind in KEYS]
    if not placed:
        raise errors.UsageError("the head revision places no saga or outbox table in tenant databases: compile with `tenants:` first")
    by_table = {spec.name.table: spec for spec in placed}
    chosen = []
    for name in names:
        spec = by_table.get(table_name(name).table)
        if spec is None:
            raise errors.UsageError(f"--table {name}: not a table the head revision places in tenant databases ({', '.join(by_table)})")
        chosen.append(spec)
    if names:
        return [(spec.name, spec.kind) for spec in chosen], []
    carried = [(spec.name, spec.kind) for spec in placed if tenant_of.source(spec.kind) is not None]
    left = [spec.name.table for spec in placed if tenant_of.source(spec.kind) is None]
    return carried, left


def move(
    shared: str, tables: Iterable[tuple[TableName, Kind]], tenant_of: TenantOf, urls: TenantUrls, settings: MoveSettings = MoveSettings()
) -> TenantMoveResult:
    """Carry every placed table's rows (see the module's docstring)."""
    from ..urls import display_url

    started = time.perf_counter()
    moved = [move_table(shared, table, kind, tenant_of, urls, settings) for table, kind in tables]
    return TenantMoveResult(display_url(shared), moved, settings.delete_source, round(time.perf_counter() - started, 3))


def summary(result: TenantMoveResult) -> list[str]:
    """The text report: a line per table and tenant, then what stays in the shared database."""
    lines = []
    for table in result.tables:
        lines.append(f"{table.table} ({table.kind}): {table.rows} row(s), {table.left} left in the shared database")
        for t in table.tenants:
            if t.error:
                lines.append(f"  {t.tenant}: failed, its {t.rows} row(s) left: {t.error}")
                continue
            done = f"{t.carried} carried, {t.present} there already"
            lines.append(f"  {t.tenant}: {t.rows} row(s): {done}, {t.deleted} deleted from the shared table")
            if t.conflicts:
                lines.append(
                    f"  {t.tenant}: {len(t.conflicts)} row(s) held by the tenant with other values, left: {', '.join(t.conflicts[:5])}"
                )
        for value, count in sorted(Counter(table.unknown).items()):
            what = "no tenant value" if value == UNKNOWN else f"tenant {value!r} is not in the map"
            lines.append(f"  unknown: {count} row(s) left ({what})")
        if table.unreadable:
            lines.append(f"  unknown: {table.unreadable} row(s) left (their JSON cannot be read)")
    return lines
