"""compile: diff topology.yaml against the blueprint recorded at the migrations head
and write one revision whose operations read like the change. No database needed.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from .. import errors
from ..revisions import History, SnapshotError, head_blueprint
from ..schema import Blueprint, Kind, TableSpec, blueprint, kept_subscription_table
from ..topology import Topology
from ..util import gc_paused
from ..versions import FEATURE_SINCE, lowers, profile
from . import ops, saga_ops
from .refusals import CONTENTS
from .saga_plan import saga_alterations
from .write import write_revision


def create_op(spec: TableSpec, version: str) -> ops.TransportOp:
    """The operation that creates a table of any kind."""
    if spec.kind is Kind.SAGA:
        return saga_ops.CreateSagaTableOp(spec)
    if spec.kind is Kind.OUTBOX:
        return saga_ops.CreateOutboxTableOp(spec)
    return ops.CREATE_OPS[spec.kind](spec, version)


@dataclass
class Plan:
    old: Blueprint | None
    new: Blueprint
    upgrade: list[ops.TransportOp]
    merges: tuple[str, ...] = ()  # the heads a merge revision joins (old: the blueprint once all of them ran)

    @property
    def downgrade(self) -> list[ops.TransportOp]:
        steps = [op.reverse() for op in reversed(self.upgrade)]
        following = kept_subscription_table(self.old, self.new)
        for step in steps:  # a queue the downgrade drops takes its subscription rows along
            if isinstance(step, ops.DropQueueOp):
                step.subscriptions = following
        return steps

    @property
    def empty(self) -> bool:
        """Nothing to record. The tables' order is not a change: moving an entry within the topology,
        or to a file it includes, leaves every table as it is. A merge is always recorded."""
        old, new = self.old, self.new
        if self.merges or self.upgrade:
            return False
        if old is None or (old.transport_version, old.engines) != (new.transport_version, new.engines):
            return False
        return old.tables == new.tables or set(old.tables) == set(new.tables)

    def summary(self, limit: int = 20) -> list[str]:
        lines = [op.describe() for op in self.upgrade]
        if self.old is not None and self.old.transport_version != self.new.transport_version:
            lines.insert(0, f"transport version {self.old.transport_version} -> {self.new.transport_version}")
        if self.merges:
            lines.insert(0, f"merge of {len(self.merges)} heads: {', '.join(self.merges)}")
        if len(lines) > limit:
            lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
        return lines


def plan(old: Blueprint | None, new: Blueprint, merges: tuple[str, ...] = ()) -> Plan:
    """The operations that turn the old blueprint into the new one, in a safe order. Each old table
    is dropped or changed from the version that built it (old.built_with: after a merge of branches
    at different versions, not every table is at old's version)."""
    old_tables = old.by_name() if old else {}
    new_tables = new.by_name()
    built_with = old.built_with if old else (lambda name: new.transport_version)
    version = new.transport_version
    steps: list[ops.TransportOp] = []

    old_schemas = set(old.schemas) if old else set()
    steps += [ops.EnsureSchemaOp(s) for s in new.schemas if s not in old_schemas]

    for spec in new.tables:
        before = old_tables.get(spec.name)
        # another kind, or moved between the shared database and the tenant ones: dropped where it was, made where it goes
        if before is None or before.kind is not spec.kind or before.tenant != spec.tenant:
            if before is not None:
                steps.append(_drop(before, built_with(before.name), new, old))
            steps.append(create_op(spec, version))
            continue
        steps += _alterations(before, spec, built_with(before.name), version, new.online_rewrites)

    removed = [spec for spec in reversed(old.tables if old else ()) if spec.name not in new_tables]
    _refuse_case_renames(removed, [spec for spec in new.tables if spec.name not in old_tables], new.engines)
    steps += [_drop(spec, built_with(spec.name), new, old) for spec in removed]

    new_schemas = set(new.schemas)
    steps += [ops.DropSchemaIfEmptyOp(s) for s in reversed(old.schemas if old else ()) if s not in new_schemas]
    return Plan(old, new, steps, merges)


def _drop(spec: TableSpec, version: str, new: Blueprint, old: Blueprint) -> ops.TransportOp:
    """The drop of a table the new topology no longer has; protected queues need their override; a
    queue takes the rows of the (old) subscription table that name it along."""
    allow_protected = spec.name in new.drop_protected
    if spec.protected and not allow_protected:
        name = spec.name
        entry = ", ".join(f"{part}: {value}" for part, value in zip(("name", "schema", "catalog"), name) if value is not None)
        raise CompileError(
            f"queue {name} is protected (error and audit queues are, and any marked protected: true): "
            "a migration will not drop it. Put it back in topology.yaml, or, if it must go, add "
            f"`- {{{entry}}}` under drop_protected: (and under discard: to drop it with its messages)"
        )
    if spec.kind is Kind.SAGA:
        return saga_ops.DropSagaTableOp(spec, spec.name in new.discarded)
    if spec.kind is Kind.OUTBOX:
        return saga_ops.DropOutboxTableOp(spec, spec.name in new.discarded)
    if spec.kind is Kind.QUEUE:
        following = kept_subscription_table(old, new)
        return ops.DropQueueOp(spec, version, spec.name in new.discarded, allow_protected and spec.protected, following)
    return ops.DROP_OPS[spec.kind](spec, version, spec.name in new.discarded, allow_protected=allow_protected and spec.protected)


def _refuse_case_renames(removed: list[TableSpec], added: list[TableSpec], engine_names: Iterable[str]) -> None:
    """A drop and a create of one table (names differing only in case) would lose its messages."""
    from .. import engines

    if not removed:
        return
    for name in engine_names:
        engine = engines.get(name)
        added_keys = {engine.table_key(spec.name): spec for spec in added}
        for spec in removed:
            twin = added_keys.get(engine.table_key(spec.name))
            if twin is not None:
                raise CompileError(
                    f"{twin.name} and the removed {spec.name} are the same table on {name}, which compares names "
                    "without case: renaming a queue by letter case is not supported; keep the old spelling"
                )


def _alterations(before: TableSpec, after: TableSpec, old_version: str, version: str, online: bool = False) -> list[ops.TransportOp]:
    if after.kind is Kind.SAGA:
        try:
            return saga_alterations(before, after)
        except ValueError as exc:
            raise CompileError(str(exc)) from None
    steps: list[ops.TransportOp] = []
    if after.kind is Kind.DELAYED and before.body_string != after.body_string:
        steps.append((ops.AddBodyStringOp if after.body_string else ops.DropBodyStringOp)(after.name, version))
    if after.kind is not Kind.QUEUE:
        return steps  # delayed and subscription tables have one shape in every version that has them
    if profile(old_version).queue_shape != profile(version).queue_shape:
        steps.append(ops.ChangeQueueVersionOp(after.name, old_version, version))
    if before.body_string != after.body_string:
        steps.append(ops.AddBodyStringOp(after.name, version, online) if after.body_string else ops.DropBodyStringOp(after.name, version))
    if before.seq_type != after.seq_type:
        steps.append(ops.ChangeQueueSeqTypeOp(after.name, before.seq_type, after.seq_type, online))
    return steps


# --------------------------------------------------------------------------- consent
ALLOW_DOWNGRADE = "--allow-downgrade"

# Why a table kind goes when the version is lowered: the release its feature starts in.
_FEATURE = {Kind.DELAYED: ("native delayed delivery", "delayed_delivery"), Kind.SUBSCRIPTIONS: ("subscription table", "subscriptions")}


def downgrade_losses(result: Plan) -> list[str]:
    """Each table change of a plan that lowers transport_version, with what it loses; empty when
    the plan does not lower it. Such a plan is compiled only with ALLOW_DOWNGRADE."""
    old, new = result.old, result.new
    if old is None or not lowers(old.transport_version, new.transport_version):
        return []
    from .. import engines

    lines = []
    for step in result.upgrade:
        if isinstance(step, ops.ChangeQueueVersionOp):
            before, after = profile(step.from_version), profile(step.to_version)
            for name in new.engines:
                effects = engines.get(name).version_change_effects(before, after)
                if effects:
                    lines.append(f"queue {step.table} on {name}: " + "; ".join(effects))
        elif step.drops:
            kind = step.table.kind
            what = f"the {CONTENTS[kind]} it holds are lost"
            what += "" if step.discard_messages else " (the upgrade refuses while it holds any)"
            feature, field = _FEATURE.get(kind, (None, None))
            if feature and getattr(profile(old.transport_version), field) and not getattr(profile(new.transport_version), field):
                what += f"; transport {new.transport_version} has no {feature} (from {FEATURE_SINCE[field]})"
            lines.append(f"{step.noun} {step.table.name} dropped: {what}")
        elif isinstance(step, ops.DropBodyStringOp):
            lines.append(f"BodyString column of {step.table} dropped (computed from Body: no data is lost)")
    return lines or [f"no table changes; the runtime uses the statements of {new.transport_version}"]


# --------------------------------------------------------------------------- revisions
class CompileError(errors.Refused):
    """A refusal of compile: the message, and the lines it lists below it (details)."""

    def __init__(self, message: str, details: list[str] | None = None):
        super().__init__(message)
        self.details = details or []


def _consented(result: Plan, allow_downgrade: bool, where: str) -> Plan:
    """The plan, unless it lowers transport_version without ALLOW_DOWNGRADE (then a refusal listing
    each table change and what it loses); where: the file:line:column of transport_version."""
    losses = [] if allow_downgrade else downgrade_losses(result)
    if losses:
        raise CompileError(
            f"{where}: transport_version lowered from {result.old.transport_version} to {result.new.transport_version}, "
            f"which changes the tables as listed below and loses what each line says; nothing was written. "
            f"If that is what you want, compile it with {ALLOW_DOWNGRADE}",
            losses,
        )
    return result


def compile_topology(
    config: Config,
    topology: Topology,
    message: str | None,
    check: bool = False,
    topology_file: str | None = None,
    switch: bool = False,
    allow_downgrade: bool = False,
) -> tuple[Plan, Path | None]:
    """Write the revision for the topology's changes (unless check); returns the plan and the new file.

    Several heads (branches merged in git) get one merge revision joining them all, from the
    blueprint a database has once every branch ran (revisions.History.merged) to the topology.
    topology_file: the file's path relative to alembic.ini, recorded in the revision; another file
    than the history's is refused unless switch (it would drop every table of the other). A plan
    that lowers transport_version is refused unless allow_downgrade (downgrade_losses)."""
    with gc_paused():
        script = ScriptDirectory.from_config(config)
        recorded = history_topology(script)
        if topology_file and recorded and recorded != topology_file and not switch:
            raise CompileError(
                f"the migrations in {script.dir} are compiled from {recorded}, not {topology_file}: compiling it would "
                f"drop every table {recorded} adds. Pass --topology {recorded}, or --topology-switch to make "
                f"{topology_file} their topology from now on"
            )
        new = blueprint(topology)
        if check:
            from .snapshot_check import snapshot_problems

            replayed = snapshot_problems(script)
            if replayed:
                raise CompileError(replayed[0] + (f" (and {len(replayed) - 1} more problem(s))" if len(replayed) > 1 else ""))
            return plan_at_head(script, new), None
        files = [(source.relative, source.sha256) for source in topology.files]
        merging = len(script.get_heads()) > 1
        where = str(topology.marks.get("transport_version", topology.path))
        return write_revision(
            config,
            message,
            lambda script: _consented(plan_at_head(script, new), allow_downgrade, where),
            topology_file,
            files,
            head="heads" if merging else "head",
        )


def history_topology(script: ScriptDirectory) -> str | None:
    """The topology file the newest revision that records one was compiled from."""
    return _newest_record(script, "TOPOLOGY_FILE")


def changed_files(config: Config, topology: Topology) -> list[str]:
    """The files of the topology (relative to its root file) that differ from the ones the newest
    revision recording their sha256 was compiled from: edited, added or no longer included."""
    recorded = _newest_record(ScriptDirectory.from_config(config), "TOPOLOGY_SHA256")
    if recorded is None:
        return []
    now = {source.relative: source.sha256 for source in topology.files}
    return [name for name in {**now, **recorded} if now.get(name) != recorded.get(name)]


def _newest_record(script: ScriptDirectory, name: str) -> Any:
    """A module attribute of the newest revision that has it, down from the first head that has
    one (past a merge, down its first parent)."""
    for head in script.get_heads():
        revision = script.get_revision(head)
        while revision is not None:
            recorded = getattr(revision.module, name, None)
            if recorded is not None:
                return recorded
            down = revision.down_revision
            down = down[0] if isinstance(down, (tuple, list)) else down
            revision = script.get_revision(down) if down else None
    return None


# --------------------------------------------------------------------------- uncompiled changes
SHOWN_UNCOMPILED = 3  # changes the one-line notice names; then "and N more"


@dataclass(frozen=True)
class Uncompiled:
    """topology.yaml (or a file it includes) holds what the migrations' head does not record: the one
    notice `alembic upgrade`, `check`, `status` and `compile --check` print on stderr (notice())."""

    topology: str  # the root file, as the notice shows it
    plan: Plan
    files: tuple[str, ...] = ()  # the files changed since the last compile, when more than the root file (relative to its folder)
    options: tuple[str, ...] = ()  # what `compile` needs besides -m to compile the same file (-c, --topology)

    @property
    def command(self) -> str:
        """What to run: compile, titled by the change as compile would title it without -m."""
        from .message import revision_message

        title = revision_message(self.plan)
        for special in ("\\", '"', "$", "`"):  # the title in double quotes, as a shell reads it back
            title = title.replace(special, "\\" + special)
        return " ".join(["sqltransport-schema compile", *self.options, "-m", f'"{title}"'])

    def notice(self) -> str:
        """The one line (after `warning: `) every command prints for it."""
        if self.plan.merges:
            heads = f"{len(self.plan.merges)} heads ({', '.join(self.plan.merges)})"
            return f"the migrations have {heads}, branches merged in git, not compiled into a merge yet. Run: {self.command}"
        changes = self.plan.summary(limit=10**9)
        more = len(changes) - SHOWN_UNCOMPILED
        shown = "; ".join(changes[:SHOWN_UNCOMPILED]) + (f"; and {more} more" if more > 0 else "")
        where = self.topology + (f" (changed: {', '.join(self.files)})" if self.files else "")
        count = f"{len(changes)} change{'s' if len(changes) != 1 else ''}"
        return f"{where} differs from the migrations' head: {count} not compiled yet ({shown}). Run: {self.command}"

    def warn(self) -> None:
        """The notice on stderr, where every command that finds it says it (its product stays on stdout)."""
        sys.stderr.write(f"warning: {self.notice()}\n")
        sys.stderr.flush()

    def to_json(self) -> dict:
        return {"topology": self.topology, "changes": self.plan.summary(limit=10**9), "files": list(self.files), "run": self.command}


def uncompiled(config: Config) -> Uncompiled | None:
    """The one comparison of topology.yaml with the migrations' head, for every command that reads either:
    None when they agree, or when there is nothing to compare (no topology file, an invalid one, migrations
    that cannot be read: the command that reads them says so itself). The file compared is the one the
    migrations were compiled from (TOPOLOGY_FILE, relative to alembic.ini), else alembic.ini's
    sqltransport.topology."""
    from ..topology import TopologyError, load

    try:
        script = ScriptDirectory.from_config(config)
        chosen = history_topology(script) or config.get_main_option("sqltransport.topology")
        path = Path(config.config_file_name or "alembic.ini").parent / chosen if chosen else None
        if path is None or not path.is_file():
            return None
        topology = load(path)
        result = plan_at_head(script, blueprint(topology))
    except (TopologyError, CompileError, SnapshotError, CommandError, OSError):
        return None
    return None if result.empty else pending(config, topology, result)


def pending(config: Config, topology: Topology, result: Plan) -> Uncompiled:
    """The notice for a plan (not empty) from the migrations' head to the topology."""
    options = []
    ini = config.config_file_name or "alembic.ini"
    if Path(ini).resolve() != Path("alembic.ini").resolve():
        options += ["-c", shlex.quote(_shown(Path(ini)))]
    configured = config.get_main_option("sqltransport.topology")
    default = Path(ini).parent / configured if configured else Path("topology.yaml")
    if Path(topology.path).resolve() != default.resolve():
        options += ["--topology", shlex.quote(_shown(Path(topology.path)))]
    files = tuple(changed_files(config, topology))
    if not set(files) - {topology.files[0].relative}:  # the root file alone: its name says it
        files = ()
    return Uncompiled(_shown(Path(topology.path)), result, files, tuple(options))


def _shown(path: Path) -> str:
    """A path as a notice shows it: relative to the working folder when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def plan_at_head(script: ScriptDirectory, new: Blueprint) -> Plan:
    """The plan from the blueprint at the migrations head to `new`; with several heads, the plan of
    their merge, from the blueprint a database has once all of them ran."""
    heads = tuple(script.get_heads())
    if len(heads) > 1:
        try:
            return plan(History(script).merged(heads), new, merges=heads)
        except SnapshotError as exc:
            raise CompileError(str(exc)) from None
    _, old = head_blueprint(script)
    return plan(old, new)
