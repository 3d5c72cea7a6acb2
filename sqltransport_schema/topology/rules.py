"""The meaning of a topology, beyond its format: each rule is a small function over the model
that yields its problems; RULES lists them all and semantic_problems runs every one, so one run
reports every problem."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from .. import engines as engine_registry
from ..schema import PERSISTENCE_KINDS, Kind, TableName
from ..versions import FEATURE_SINCE, profile
from .format import SHARED_ONLY_TABLES, TENANT_TABLES, listed
from .model import Endpoint, Owned, Placed, Topology
from .problems import Mark, Problem

if TYPE_CHECKING:
    from ..engines import Dialect
    from ..versions import Profile


@dataclass
class Facts:
    """What the rules share: the topology, its version's profile, and its tables and indexes (walked once)."""

    t: Topology

    @cached_property
    def prof(self) -> Profile:
        return profile(self.t.transport_version)

    @cached_property
    def version_mark(self) -> Mark:
        return self.t.marks.get("transport_version", Mark(self.t.path, 1, 1))

    @cached_property
    def owned(self) -> list[Owned | _Index]:
        return _owned_tables(self.t)

    @cached_property
    def tables(self) -> list[Owned]:
        return [item for item in self.owned if not item.is_index]

    @property
    def engine_names(self) -> list[str]:
        return list(dict.fromkeys(self.t.engines))

    @cached_property
    def rank(self) -> dict[str, int]:
        return {source.path: i for i, source in enumerate(self.t.files)}

    @cached_property
    def duplicate_endpoints(self) -> list[tuple[Endpoint, Endpoint]]:
        """(endpoint, the first one of that name) for each endpoint whose name an earlier one has."""
        first: dict[str, Endpoint] = {}
        return [(ep, first[ep.name]) for ep in self.t.endpoints if first.setdefault(ep.name, ep) is not ep]

    @cached_property
    def duplicate_marks(self) -> set[Mark]:
        """Every place the duplicate endpoints write (their names, instances, sagas, outbox): their
        tables are one problem, the duplicate, not one collision each."""
        marks = set()
        for ep, _ in self.duplicate_endpoints:
            marks |= {ep.mark, *ep.marks.values()}
            for saga in ep.sagas:
                marks |= {saga.mark, *saga.marks.values()}
        return marks

    def position(self, mark: Mark) -> tuple[int, int, int]:
        """Where a mark is in load order: the root file, then each included file."""
        return (self.rank.get(mark.path, 0), mark.line or 0, mark.column or 0)

    def lacks(self, feature: str, mark: Mark, what: str) -> Problem:
        return Problem(
            mark,
            f"{what} needs transport version {FEATURE_SINCE[feature]} or later; this topology uses "
            f"{self.t.transport_version}. Raise transport_version or remove it",
        )


class _Index(NamedTuple):
    """An index in a table's namespace on one engine, named and placed as its table is."""

    name: TableName
    of: Owned  # the indexed table
    mark: Mark
    kind: Kind  # of the indexed table
    engine: str  # an index exists only on the engine that creates it
    is_index = True

    @property
    def what(self) -> str:
        """How problems name it (made only for a problem: a topology has tens of thousands)."""
        return f"index {self.name.table!r} of {self.of.what}"


def _owned_tables(t: Topology) -> list[Owned | _Index]:
    """The topology's tables (Topology.tables) and, per engine, the indexes that share their namespace."""
    tables = list(t.tables())
    indexes = []
    for engine_name in dict.fromkeys(t.engines):
        suffixes = engine_registry.get(engine_name).index_suffixes
        if not suffixes:
            continue
        for item in tables:
            spec = item.spec
            for suffix in suffixes.get(spec.kind, ()):
                name = spec.name
                indexes.append(_Index(TableName(name.table + suffix, name.schema, name.catalog), item, item.mark, spec.kind, engine_name))
    sagas = [item for item in tables if item.kind is Kind.SAGA]
    for engine_name in dict.fromkeys(t.engines):
        engine = engine_registry.get(engine_name)
        for item in sagas:
            for index in engine.saga_index_names(item.spec):
                indexes.append(_Index(index, item, item.mark, Kind.SAGA, engine_name))
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


def _engine_problems(f: Facts) -> Iterator[Problem]:
    """engines: not empty, each listed once, each able to hold the version."""
    t = f.t
    if not t.engines:
        known = ", ".join(engine_registry.ENGINES)
        yield Problem(t.marks.get("engines", f.version_mark), f"engines is empty: list at least one of {known}")
    seen_engines: set[str] = set()
    for name, mark in zip(t.engines, t.marks.get("engines_items", [])):
        if name in seen_engines:
            yield Problem(mark, f"engine {name!r} is listed twice; keep one")
        seen_engines.add(name)
    for name in f.engine_names:
        reason = engine_registry.get(name).unsupported(f.prof)
        if reason and "engines" not in t.marks:
            others = ", ".join(other for other in t.engines if other != name)
            yield Problem(
                f.version_mark,
                f"{reason}: engines is not set, so it defaults to all of {', '.join(t.engines)}; "
                f"write engines: [{others}] or raise transport_version",
            )
        elif reason:
            yield Problem(f.version_mark, f"{reason}: remove {name} from engines or raise transport_version")


def _endpoint_problems(f: Facts) -> Iterator[Problem]:
    """An endpoint's settings: features the version lacks, and contradictions with send_only."""
    t, prof = f.t, f.prof
    for ep, first in f.duplicate_endpoints:
        where = "in one of the files, " if ep.mark.path != first.mark.path else ""
        yield Problem(
            ep.mark_of("name"),
            f"duplicate endpoint {ep.name!r} (first declared at {first.mark_of('name')}): declare an endpoint once, "
            f"{where}its instances, sagas and settings in one entry; remove or rename this one",
        )
    for ep in t.endpoints:
        if ep.send_only and ep.delayed_delivery:
            yield Problem(
                ep.mark_of("delayed_delivery"),
                f"endpoint {ep.name!r} is send-only and so has no delayed table: remove delayed_delivery or send_only",
            )
        elif ep.delayed_delivery and not prof.delayed_delivery:
            yield f.lacks("delayed_delivery", ep.mark_of("delayed_delivery"), "delayed_delivery")
        if ep.send_only and ep.instances:
            yield Problem(ep.mark_of("instances"), f"endpoint {ep.name!r} is send-only and receives nothing: remove instances or send_only")
        if ep.body_string and ep.send_only:
            yield Problem(
                ep.mark_of("body_string"), f"endpoint {ep.name!r} is send-only and has no queue for a BodyString column: remove body_string"
            )
        elif ep.body_string and not prof.body_string:
            yield f.lacks("body_string", ep.mark_of("body_string"), "body_string")
        elif ep.body_string:
            for name in t.engines:
                reason = engine_registry.get(name).body_string_unsupported(prof)
                if reason:
                    yield Problem(
                        ep.mark_of("body_string"), f"endpoint {ep.name!r}: {reason}; remove body_string or change transport_version"
                    )


def _version_feature_problems(f: Facts) -> Iterator[Problem]:
    """A subscription table, and catalogs (three-part names), where the version has none."""
    t, prof = f.t, f.prof
    if t.subscriptions is not None and not prof.subscriptions:
        yield f.lacks("subscriptions", t.subscriptions.mark, "a subscription table")
    placed: list[Placed] = [*t.endpoints, *t.queues, *t.discard, *t.drop_protected] + ([t.subscriptions] if t.subscriptions else [])
    if not prof.three_part_names:
        if t.default_catalog is not None:
            yield f.lacks("catalog", t.marks["default_catalog"], f"default_catalog {t.default_catalog!r} (three-part names)")
        for item in placed:
            if item.catalog is not None and "catalog" in item.marks:
                yield f.lacks("catalog", item.mark_of("catalog"), f"catalog {item.catalog!r} (three-part names)")


def _at_sign_problems(f: Facts) -> Iterator[Problem]:
    """'@' separates the parts of a canonical address: no table name may contain it."""
    t = f.t
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


def _name_limit_problems(f: Facts) -> Iterator[Problem]:
    """Names an engine cannot hold (saga and outbox tables have their own limits, checked with their prefix)."""
    reported: set[tuple] = set()
    for engine_name in f.engine_names:
        engine = engine_registry.get(engine_name)
        for item in f.tables:
            if item.kind in PERSISTENCE_KINDS or not engine.holds(item.kind):
                continue
            for part, problem in engine.name_problems(item.name):
                if (item.mark, part) not in reported:
                    reported.add((item.mark, part))
                    yield Problem(item.mark, f"{part} name of {item.what} {problem}: shorten it")


def _script_name_problems(f: Facts) -> Iterator[Problem]:
    """Names an engine's deployment scripts cannot carry as written (SQL Server: `$(`, a sqlcmd variable)."""
    reported: set[tuple] = set()
    for engine_name in f.engine_names:
        engine = engine_registry.get(engine_name)
        for item in f.tables:
            if not engine.holds(item.kind):
                continue
            for part, problem in engine.script_name_problems(item.name):
                value = getattr(item.name, part)  # a schema is named once, where it first appears
                if (part, value) not in reported:
                    reported.add((part, value))
                    yield Problem(item.mark, f"{part} name of {item.what} {problem}: rename it")


def _collision_problems(f: Facts) -> Iterator[Problem]:
    """Two things that are one table on an engine. One problem per pair of places in the file: what
    derives from them (delayed tables, indexes) collides too but says nothing new. Reported at the later place."""
    collisions: dict[frozenset, list[tuple[Owned | _Index, Owned | _Index, str]]] = {}
    for engine_name in f.engine_names:
        engine = engine_registry.get(engine_name)
        first: dict[tuple, Owned | _Index] = {}
        for item in f.owned:
            if item.engine not in (None, engine_name):
                continue  # another engine's index
            if not engine.holds(item.kind):
                continue  # not deployed on this engine
            earlier = first.setdefault(engine.table_key(item.name), item)
            if earlier is not item and earlier.mark != item.mark and not {earlier.mark, item.mark} & f.duplicate_marks:
                collisions.setdefault(frozenset((earlier.mark, item.mark)), []).append((earlier, item, engine_name))
    for hits in collisions.values():
        earlier, item, _ = min(hits, key=lambda hit: hit[0].is_index + hit[1].is_index)  # tables before indexes
        on = [
            name
            for name in f.engine_names
            if any((e.what, i.what, engine_name) == (earlier.what, item.what, name) for e, i, engine_name in hits)
        ]
        if f.position(earlier.mark) > f.position(item.mark):
            earlier, item = item, earlier
        yield Problem(
            item.mark,
            f"{item.what} is the same table as {earlier.what} (at {earlier.mark}) on {', '.join(on)}: "
            + _collision_advice(earlier, item, on),
        )


def _discard_problems(f: Facts) -> Iterator[Problem]:
    """A discarded (or unprotected) table must really be gone from the topology."""
    t = f.t
    gone = [("discard", d) for d in t.discard] + [("drop_protected", d) for d in t.drop_protected]
    by_key = {
        engine_name: {engine_registry.get(engine_name).table_key(o.name): o for o in reversed(f.tables)}
        for engine_name in (f.engine_names if gone else ())
    }
    for key, d in gone:
        for engine_name, keys in by_key.items():
            hit = keys.get(engine_registry.get(engine_name).table_key(d.table_name))
            if hit is not None:
                yield Problem(
                    d.mark_of("name"), f"{d.name!r} is listed under {key} but is still {hit.what} (at {hit.mark}): remove one of them"
                )
                break


def _saga_problems(f: Facts) -> Iterator[Problem]:
    """Sagas: contradictions, correlation types an engine cannot hold, names over an engine's limits."""
    t, engine_names = f.t, f.engine_names
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


def _outbox_problems(f: Facts) -> Iterator[Problem]:
    """Outbox tables: a send-only endpoint handles no messages; names over an engine's limits."""
    for ep in f.t.endpoints:
        if not ep.outbox:
            continue
        if ep.send_only:
            yield Problem(
                ep.mark_of("outbox"),
                f"endpoint {ep.name!r} is send-only and handles no messages, so it has no outbox: remove outbox or send_only",
            )
        for engine_name in f.engine_names:
            for problem in engine_registry.get(engine_name).outbox_name_problems(ep.outbox_spec()):
                yield Problem(ep.mark_of("outbox"), f"outbox table of endpoint {ep.name!r} on {engine_name}: {problem}: shorten it")
    yield from _outbox_index_clashes(f)


def _outbox_index_clashes(f: Facts) -> Iterator[Problem]:
    """Two outbox tables whose indexes would have one name in one schema (PostgreSQL: SQL persistence's
    unprefixed Index_DispatchedAt and Index_Dispatched). Reported at the later endpoint's outbox."""
    outboxes = [ep for ep in f.t.endpoints if ep.outbox and not ep.send_only and ep.mark not in f.duplicate_marks]
    for engine_name in f.engine_names:
        engine = engine_registry.get(engine_name)
        first: dict[tuple, Endpoint] = {}
        for ep in sorted(outboxes, key=lambda ep: f.position(ep.mark_of("outbox"))):
            indexes = engine.saga_index_names(ep.outbox_spec())
            earlier = next((first[key] for key in map(engine.table_key, indexes) if key in first), None)
            for key in map(engine.table_key, indexes):
                first.setdefault(key, ep)
            if earlier is None:
                continue
            schema = ep.schema or f.t.default_schema or engine.default_schema
            unset = "" if "engines" in f.t.marks else f"; engines is not set, so it includes {engine_name}: list the engines you use"
            yield Problem(
                ep.mark_of("outbox"),
                f"endpoint {ep.name!r} has an outbox in {engine_name} schema {schema!r}, as endpoint {earlier.name!r} "
                f"(at {earlier.mark_of('outbox')}) has: {engine_name} names indexes per schema, and both outbox tables want "
                f"SQL persistence's {listed([index.table for index in indexes])}, so the second table would get none "
                "(SQL persistence's script skips them: CREATE INDEX IF NOT EXISTS) and check would report them missing. "
                f"Give endpoint {ep.name!r} its own schema (schema: under the endpoint), or remove outbox from one of them" + unset,
            )


def _tenant_problems(f: Facts) -> Iterator[Problem]:
    """Tenant placement: only SQL persistence's tables live in tenant databases; the transport needs
    its queues, delayed and subscription tables in the shared one (every endpoint reads them there)."""
    marks = f.t.marks.get("tenants_items", [])
    for value, mark in zip(f.t.tenant_tables, marks):
        if value in SHARED_ONLY_TABLES:
            yield Problem(
                mark,
                f"tenants: {value} cannot live in tenant databases: the transport needs its {listed(SHARED_ONLY_TABLES)} tables "
                f"in the shared database, where every endpoint sends and receives. Remove {value!r}; only "
                f"{listed(TENANT_TABLES)} can be placed in tenant databases",
            )


RULES: tuple[Callable[[Facts], Iterator[Problem]], ...] = (
    _engine_problems,
    _endpoint_problems,
    _version_feature_problems,
    _at_sign_problems,
    _name_limit_problems,
    _script_name_problems,
    _collision_problems,
    _saga_problems,
    _outbox_problems,
    _tenant_problems,
    _discard_problems,
)


def semantic_problems(t: Topology) -> Iterator[Problem]:
    """Every rule's problems, in RULES order (TopologyError sorts them by place)."""
    facts = Facts(t)
    for rule in RULES:
        yield from rule(facts)
