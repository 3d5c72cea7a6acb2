"""adopt: take over a database whose queue tables NServiceBus installers created.

Installers of every transport release left their own table shapes behind. `examine` (pure)
reads the transport version each live table was made by from its structure alone, compares
the database with the blueprint of each compiled revision, and says which revision the
database already is (stamp it) or which operations turn it into the head (the upgrade
plan). `run` is the I/O edge: it reads the catalog once, stamps, or applies the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import check, errors
from .migrate import ops
from .migrate.compile import create_op
from .migrate.execution import ROLE_OPTION
from .schema import SHARED, Blueprint, Kind, TableSpec
from .shapes import TableShape
from .versions import SHAPE_RELEASES, profile

if TYPE_CHECKING:
    from alembic.config import Config

    from .engines import Dialect


@dataclass(frozen=True)
class TableVerdict:
    spec: TableSpec  # as the target revision records it
    table: str  # display name on the engine
    status: str  # matches | missing | other_shape | not_transport
    versions: tuple[str, ...] = ()  # releases whose installer makes exactly the live shape
    found: TableSpec | None = None  # the live table as a spec (its own body_string / seq_type)
    differences: tuple[check.Finding, ...] = ()  # for not_transport: against the target shape
    renames: tuple[tuple[str, str], ...] = ()  # other_shape: indexes under another name, (live, expected)

    def to_json(self) -> dict:
        out = {
            "table": self.table,
            "kind": self.spec.kind.value,
            "status": self.status,
            "made_by": list(self.versions),
            "differences": [f.to_json() for f in self.differences],
        }
        if self.renames:
            out["renamed_indexes"] = [{"from": old, "to": new} for old, new in self.renames]
        return out


@dataclass
class Examination:
    engine: str
    head_revision: str | None
    head_version: str | None
    verdicts: list[TableVerdict] = field(default_factory=list)
    matching_revision: str | None = None  # newest revision the database already is
    plan: list[ops.TransportOp] = field(default_factory=list)  # turns the database into the head
    unmanaged: list[str] = field(default_factory=list)

    @property
    def adoptable(self) -> bool:
        return not any(v.status == "not_transport" for v in self.verdicts)

    @property
    def status(self) -> str:
        if not self.adoptable:
            return "not_adoptable"
        if self.matching_revision is not None:
            return "matches_head" if self.matching_revision == self.head_revision else "matches_revision"
        return "needs_upgrade"

    def to_json(self, engine: Dialect) -> dict:
        return {
            "status": self.status,
            "engine": self.engine,
            "head_revision": self.head_revision,
            "matching_revision": self.matching_revision,
            "made_by": [] if _untold(self.verdicts) else list(_common(self.verdicts)),
            "tables": [v.to_json() for v in self.verdicts],
            "unmanaged_tables": list(self.unmanaged),
            "plan": [op.describe(engine) for op in self.plan],
        }


def _span(versions: Sequence[str]) -> str:
    """Releases of one layout: "6.0" or "5.0.3 / 6.0.1 / 9.1 (one layout)"."""
    return versions[0] if len(versions) == 1 else " / ".join(versions) + " (one layout)"


def _common(verdicts: list[TableVerdict]) -> tuple[str, ...]:
    """Releases whose installer made every live transport table (empty if they disagree)."""
    sets = [set(v.versions) for v in verdicts if v.versions]
    if not sets:
        return ()
    common = set.intersection(*sets)
    return tuple(r for r in SHAPE_RELEASES if r in common)


# The tables whose shape the transport's release decides (an installer of that release makes them).
TRANSPORT_KINDS = frozenset({Kind.QUEUE, Kind.DELAYED, Kind.SUBSCRIPTIONS})


def _untold(verdicts: list[TableVerdict]) -> bool:
    """Whether the live tables leave the release open: none of them is a queue, delayed or subscription
    table (saga or outbox tables alone, which every release makes alike)."""
    live = [v for v in verdicts if v.versions]
    return bool(live) and not any(v.spec.kind in TRANSPORT_KINDS for v in live)


# adopt's line when the live tables do not tell the transport's release; {version}: topology.yaml's.
UNTOLD = (
    "the transport version cannot be told from these tables (every release makes them alike; no queue table shows it): "
    "adopting takes topology.yaml's transport_version {version}; if your endpoints run another release, set "
    "transport_version to it and compile before adopting"
)


# --------------------------------------------------------------------------- the pure core
def _variants(spec: TableSpec, engine: Dialect) -> list[TableSpec]:
    """The spec, then the same table with the other options an installer may have used."""
    if spec.kind is Kind.DELAYED:
        return [spec, spec._replace(body_string=not spec.body_string)]
    if spec.kind is not Kind.QUEUE:
        return [spec]
    out = [spec]
    for body_string in (spec.body_string, not spec.body_string):
        for seq_type in (spec.seq_type, "bigserial" if spec.seq_type == "serial" else "serial"):
            candidate = spec._replace(body_string=body_string, seq_type=seq_type)
            if candidate not in out:
                out.append(candidate)
    return out


def _releases(engine: Dialect, kind: Kind) -> list[str]:
    """Releases, newest first, whose installer can make this kind of table on this engine."""
    out = []
    for release in reversed(SHAPE_RELEASES):
        prof = profile(release)
        if engine.unsupported(prof):
            continue
        if (kind is Kind.DELAYED and not prof.delayed_delivery) or (kind is Kind.SUBSCRIPTIONS and not prof.subscriptions):
            continue
        out.append(release)
    return out


def judge(spec: TableSpec, version: str, live: TableShape | None, engine: Dialect) -> TableVerdict:
    """What the live table is, against the spec a revision of transport `version` records."""
    table = check.display(engine, spec.name)
    if live is None:
        return TableVerdict(spec, table, "missing")

    def fits(candidate: TableSpec, release: str) -> bool:
        expected = engine.expected_shape(candidate, profile(release))
        return not check._table_findings(table, expected, live, engine.case_insensitive_names)

    # Same shape as the target version's: the table is what the revision would make.
    if fits(spec, version):
        versions = tuple(
            r
            for r in reversed(_releases(engine, spec.kind))
            if engine.expected_shape(spec, profile(r)) == engine.expected_shape(spec, profile(version))
        )
        return TableVerdict(spec, table, "matches", versions or (version,), spec)
    renames = _renames(table, engine.expected_shape(spec, profile(version)), live, engine, spec)
    if renames:
        return TableVerdict(spec, table, "other_shape", (version,), spec, renames=renames)
    for candidate in _variants(spec, engine):
        # a release whose installer cannot add BodyString never made a table with that option
        made_by = [
            r
            for r in _releases(engine, spec.kind)
            if fits(candidate, r) and not (candidate.body_string and engine.body_string_unsupported(profile(r)))
        ]
        if made_by:
            return TableVerdict(spec, table, "other_shape", tuple(reversed(made_by)), candidate)
    differences = tuple(check._table_findings(table, engine.expected_shape(spec, profile(version)), live, engine.case_insensitive_names))
    return TableVerdict(spec, table, "not_transport", differences=differences)


def _renames(table: str, expected: TableShape, live: TableShape, engine: Dialect, spec: TableSpec) -> tuple[tuple[str, str], ...]:
    """The table's indexes under other names, when those are all that differ and the engine can
    rename an index in place (an earlier release of this project named saga indexes otherwise)."""
    findings = check._table_findings(table, expected, live, engine.case_insensitive_names)
    if not findings or any(f.category != "index_name" for f in findings):
        return ()
    if engine.rename_index(spec.name, "old", "new") is None:
        return ()
    return tuple(f.renamed for f in findings)


def examine(
    revisions: list[tuple[str, Blueprint]],
    live: dict[tuple, tuple],
    engine: Dialect,
) -> Examination:
    """revisions: (revision id, recorded blueprint), newest first; the first is the head."""
    if not revisions:
        return Examination(engine.name, None, None)
    head, target = revisions[0]
    shapes = {key: shape for key, (_, shape) in live.items()}
    verdicts = [judge(spec, target.transport_version, shapes.get(engine.table_key(spec.name)), engine) for spec in target.tables]
    result = Examination(engine.name, head, target.transport_version, verdicts)
    managed = {engine.table_key(spec.name) for _, bp in revisions for spec in bp.tables}
    result.unmanaged = sorted(check.display(engine, name) for key, (name, _) in live.items() if key not in managed)
    if not result.adoptable:
        return result
    for revision, recorded in revisions:
        if _is(recorded, shapes, live, engine):
            result.matching_revision = revision
            return result
    result.plan = _plan(target, verdicts)
    return result


def _is(recorded: Blueprint, shapes: dict, live: dict, engine: Dialect) -> bool:
    """Whether the database holds exactly the revision's tables (others may exist unmanaged)."""
    for spec in recorded.tables:
        if judge(spec, recorded.transport_version, shapes.get(engine.table_key(spec.name)), engine).status != "matches":
            return False
    return True


def _plan(target: Blueprint, verdicts: list[TableVerdict]) -> list[ops.TransportOp]:
    """Operations that turn the examined tables into the head's; the same ones migrations run."""
    version = target.transport_version
    steps: list[ops.TransportOp] = [ops.EnsureSchemaOp(s) for s in target.schemas]
    for verdict in verdicts:
        spec, found = verdict.spec, verdict.found
        if verdict.status == "missing":
            steps.append(create_op(spec, version))
        elif verdict.status == "other_shape":
            made_by = verdict.versions[-1]
            if spec.kind is Kind.QUEUE and profile(made_by).queue_shape != profile(version).queue_shape:
                steps.append(ops.ChangeQueueVersionOp(spec.name, made_by, version))
            if found.body_string != spec.body_string:
                steps.append((ops.AddBodyStringOp if spec.body_string else ops.DropBodyStringOp)(spec.name, version))
            if found.seq_type != spec.seq_type:
                steps.append(ops.ChangeQueueSeqTypeOp(spec.name, found.seq_type, spec.seq_type))
            steps += [ops.RenameIndexOp(spec.name, old, new) for old, new in verdict.renames]
    return steps


# --------------------------------------------------------------------------- the I/O edge
class AdoptError(errors.Refused):
    """Adoption could not run or must not: unreachable database, already stamped, no revisions."""


def run(url: str, config: Config, *, stamp: bool = True, apply: bool = False, role: str = SHARED) -> tuple[Examination, object, str]:
    """Examine the database; stamp the matching revision (or apply the plan, then stamp the head).
    role: the database's under tenant placement (docs/tenants.md), whose tables each revision is read for;
    a revision that places no table in a tenant database is no match for one (its tables came later).

    Returns (examination, engine, action) where action says what was written: "stamped",
    "applied", or "nothing".
    """
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    from .db import catalog_connection
    from .revisions import snapshots, stamps

    try:
        script = ScriptDirectory.from_config(config)
        revisions = [(revision, found.for_role(role)) for revision, found in snapshots(script)]
        if role != SHARED:
            revisions = revisions[:1] + [(revision, found) for revision, found in revisions[1:] if found.tables]
    except CommandError as exc:
        raise AdoptError(str(exc)) from None
    if not revisions:
        raise AdoptError("the migrations hold no compiled revision; run `sqltransport-schema compile` first")
    version_table = config.get_main_option("version_table") or "alembic_version"
    with catalog_connection(url, AdoptError) as (engine, connection):
        stamped = stamps(connection, version_table)
        if stamped:
            raise AdoptError(
                f"the database is already stamped with {', '.join(stamped)}: it is managed; "
                "use `sqltransport-schema check` to compare it with the topology"
            )
        catalogs = sorted({spec.name.catalog for _, bp in revisions for spec in bp.tables if spec.name.catalog is not None})
        live = {
            k: v for k, v in engine.catalog.read_shapes(connection, catalogs).items() if v[0].table.casefold() != version_table.casefold()
        }
        connection.rollback()  # reads only; what follows writes in its own transaction
        found = examine(revisions, live, engine)
        action = "nothing"
        context = MigrationContext.configure(connection, opts={"version_table": version_table, ROLE_OPTION: role})
        if found.status in ("matches_head", "matches_revision") and stamp:
            with connection.begin():
                context.stamp(script, found.matching_revision)
            action = "stamped"
        elif found.status == "needs_upgrade" and apply:
            with connection.begin():
                operations = Operations(context)
                for op in found.plan:
                    operations.invoke(op)
                context.stamp(script, found.head_revision)
            action = "applied"
    return found, engine, action


def text_lines(found: Examination, engine: Dialect, action: str, url: str | None = None) -> list[str]:
    """adopt's report for people; url: the database's as the user gave it, which a suggested upgrade repeats."""
    from .urls import upgrade_command

    lines = []
    made_by = _common(found.verdicts)
    if made_by and _untold(found.verdicts):
        lines.append(UNTOLD.format(version=found.head_version))
    elif made_by:
        lines.append(f"the tables were made by transport {_span(made_by)}")
    for v in found.verdicts:
        if v.status == "matches":
            continue
        if v.status == "missing":
            lines.append(f"missing: {v.table} ({v.spec.kind.value} table)")
        elif v.status == "other_shape":
            lines.append(f"other shape: {v.table}: made by transport {_span(v.versions)}" + _options(v))
        else:
            lines.append(f"not a transport table: {v.table}: " + "; ".join(f"{f.category} {f.detail}" for f in v.differences))
    lines += [f"unmanaged: {name} (in no revision's topology; left alone)" for name in found.unmanaged]
    if found.status == "not_adoptable":
        lines.append("not adoptable: rename or move the tables above, or change topology.yaml to other names")
    elif found.matching_revision is not None:
        verb = "stamped" if action == "stamped" else "matches"
        tail = "" if found.status == "matches_head" else f"; run `{upgrade_command(url)}` to apply the later revisions"
        lines.append(f"{verb} revision {found.matching_revision}{tail}")
    else:
        lines.append(f"upgrade plan to the head {found.head_revision} (transport {found.head_version}):")
        lines += [f"  {op.describe(engine)}" for op in found.plan]
        lines.append(
            "applied and stamped the head"
            if action == "applied"
            else "nothing written; run again with --apply to run this plan and stamp the head"
        )
    return lines


def _options(v: TableVerdict) -> str:
    notes = []
    if v.found.body_string != v.spec.body_string:
        notes.append("with BodyString" if v.found.body_string else "without BodyString")
    if v.found.seq_type != v.spec.seq_type:
        notes.append(f"Seq {v.found.seq_type}")
    return f" ({', '.join(notes)})" if notes else ""
