"""What a topology holds once read: placed tables, endpoints, sagas, and `Topology.tables()`,
the one walk over the tables a topology owns."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from ..schema import Correlation, Kind, TableName, TableSpec, default_table_prefix, protected_by_default
from ..versions import profile
from .format import DEFAULT_SUBSCRIPTION_TABLE
from .problems import Mark

if TYPE_CHECKING:
    from ..versions import Profile


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
    outbox: bool = False  # SQL persistence's outbox table <table_prefix>OutboxData

    @property
    def saga_table_prefix(self) -> str:
        return self.table_prefix if self.table_prefix is not None else default_table_prefix(self.name)

    def persistence_table(self, saga: Saga) -> str:
        return self.saga_table_prefix + (saga.table_suffix if saga.table_suffix is not None else saga.name)

    def saga_spec(self, saga: Saga) -> TableSpec:
        return TableSpec(
            Kind.SAGA,
            TableName(self.persistence_table(saga), self.schema, self.catalog),
            correlation=saga.correlation,
            transitional=saga.transitional,
            saga_prefix=self.saga_table_prefix,
        )

    def outbox_spec(self) -> TableSpec:
        """The endpoint's outbox table: <prefix>OutboxData beside its saga tables (Oracle names it apart)."""
        name = TableName(self.saga_table_prefix + "OutboxData", self.schema, self.catalog)
        return TableSpec(Kind.OUTBOX, name, saga_prefix=self.saga_table_prefix)

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
    archive: str | None = None  # the archive table beside it (docs/console.md)

    def archive_spec(self) -> TableSpec | None:
        """The queue's archive table, in its schema and catalog; None without `archive:`."""
        if self.archive is None:
            return None
        return TableSpec(Kind.ARCHIVE, TableName(self.archive, self.schema, self.catalog), queue=self.name)


class Owned(NamedTuple):
    """A table the topology owns: its spec, what the file calls it, and where the file makes it."""

    spec: TableSpec
    role: str  # "endpoint", "instance queue", "delayed table", "queue", "subscription table", "saga table", "outbox table",
    # "archive table" or "action log"
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
    tenant_tables: tuple[str, ...] = ()  # `tenants: {tables: [...]}`: sagas, outbox (docs/tenants.md)
    action_log: Placed | None = None  # the console's action log table (docs/console.md)
    marks: dict = field(default_factory=dict, compare=False, repr=False)
    files: tuple[Source, ...] = field(default=(), compare=False, repr=False)  # the root file first, then what it includes

    def subscription_table(self, prof: Profile) -> TableName | None:
        if self.subscriptions_disabled or not prof.subscriptions:
            return None
        if self.subscriptions is not None:
            return self.subscriptions.table_name
        return TableName(DEFAULT_SUBSCRIPTION_TABLE, self.default_schema, self.default_catalog)

    def marks_by_table(self) -> dict[TableName, Mark]:
        """Where the file makes each table (annotations of a table's problems point there)."""
        return {owned.name: owned.mark for owned in self.tables()}

    def tables(self) -> Iterator[Owned]:
        """Every table the topology owns, with what the file calls it and where it makes it.

        The one walk over the topology's tables: schema.blueprint keeps the specs, the name
        checks of validation also read the roles and marks. Order: each endpoint's queues and delayed table,
        then the queues, the subscription table, the saga tables, the outbox tables, the queues'
        archive tables and the action log.
        Walked once per topology (it is frozen): validation and the blueprint read the same list.
        """
        return iter(self._owned)

    @cached_property
    def _owned(self) -> tuple[Owned, ...]:
        return tuple(self._walk())

    def _walk(self) -> Iterator[Owned]:
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
        sagas_placed, outbox_placed = "sagas" in self.tenant_tables, "outbox" in self.tenant_tables
        for ep in self.endpoints:
            for saga in ep.sagas:
                spec = ep.saga_spec(saga)
                yield Owned(spec._replace(tenant=True) if sagas_placed else spec, "saga table", saga.mark_of("name"))
        for ep in self.endpoints:
            if ep.outbox:
                spec = ep.outbox_spec()
                yield Owned(spec._replace(tenant=True) if outbox_placed else spec, "outbox table", ep.mark_of("outbox"))
        for q in self.queues:
            archive = q.archive_spec()
            if archive is not None:
                yield Owned(archive, "archive table", q.mark_of("archive"))
        if self.action_log is not None:
            log = TableSpec(Kind.ACTION_LOG, self.action_log.table_name)
            yield Owned(log, "action log", self.action_log.mark_of("table"))


@dataclass(frozen=True)
class Source:
    """One file of a topology: as problems name it, as revisions record it (relative to the root
    file's folder, with /), and the sha256 of its bytes."""

    path: str
    relative: str
    sha256: str
