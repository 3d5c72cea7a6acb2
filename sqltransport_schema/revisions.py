"""Which topology the migrations record, and which revision a database is stamped with.

Every compiled revision carries the blueprint of its topology (its SNAPSHOT). compile asks for the
head's, check and the runtime for the deployed one's, adopt for all of them, the pipeline's plan
for two. Reading them is written here once, on Alembic's ScriptDirectory and MigrationContext and
the schema's Blueprint only, so that every layer above the engines may use it without importing
`migrate`. Alembic is imported when called: the runtime imports this module and never needs
Alembic until it looks a deployment up.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from . import errors
from .schema import SHARED, Blueprint, Kind, TableName, TableSpec, in_kind_order
from .versions import profile

if TYPE_CHECKING:
    from alembic.script import Script, ScriptDirectory
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Engine

# The table the migrations keep the deployed blueprint in (beside alembic_version, in the default
# schema), so the runtime opens from the database alone: no alembic.ini, no migrations folder.
BLUEPRINT_TABLE = "sqltransport_blueprint"


class SnapshotError(errors.NotFound):
    """The migrations or the stamp leave the topology unknown: several heads, branches that change
    one table (MergeConflict), a database stamped with no revision or with several."""


# --------------------------------------------------------------------------- the migrations folder
def blueprint_at(script: ScriptDirectory, revision_id: str) -> Blueprint | None:
    """The blueprint recorded by a revision, or by its nearest ancestor that records one; a merge
    that records none (`alembic merge heads`) has its parents' blueprints merged (History.merged)."""
    return History(script).blueprint(revision_id)


def recorded_blueprint(script: ScriptDirectory, revision_id: str) -> Blueprint:
    """As blueprint_at, for a revision that must record a topology (the one a database is stamped with)."""
    found = blueprint_at(script, revision_id)
    if found is None:
        raise SnapshotError(f"revision {revision_id} and its ancestors record no topology snapshot")
    return found


def head_blueprint(script: ScriptDirectory) -> tuple[str | None, Blueprint | None]:
    """(head revision id, blueprint recorded at or below the head); (None, None) before the first revision."""
    heads = script.get_heads()
    if len(heads) > 1:
        raise SnapshotError(f"migrations have several heads ({', '.join(heads)}); run `sqltransport-schema compile` to merge them")
    if not heads:
        return None, None
    return heads[0], blueprint_at(script, heads[0])


class MergeConflict(SnapshotError, errors.Conflict):
    """Two branches change the same table (or the transport version) differently: a database at
    their fork point would run both changes, in an order nobody chose."""


# A merge compares each table's spec and, for a queue, the shape of the version that built it; the
# transport version and the engines are compared under these keys beside the tables.
_VERSION = "transport_version"
_ENGINES = "engines"


def _parents(revision: Script) -> tuple[str, ...]:
    down = revision.down_revision
    return tuple(down) if isinstance(down, (tuple, list)) else ((down,) if down else ())


class History:
    """The blueprint each revision leaves a database with, merges included, read once per revision.

    A revision that records a SNAPSHOT leaves that blueprint; one that records none leaves its
    parent's; a merge that records none leaves its parents' merged: Alembic runs every branch's
    revisions before the merge, so a table only one branch changed is as that branch left it, and
    a table two branches changed is a MergeConflict naming both."""

    def __init__(self, script: ScriptDirectory):
        self.script = script
        self._states: dict[str, Blueprint | None] = {}
        self._merges: dict[tuple[str, ...], Blueprint | None] = {}
        self._ancestors: dict[str, frozenset[str]] = {}
        self._touched: dict[str, dict] = {}

    def revision(self, revision_id: str) -> Script:
        found = self.script.get_revision(revision_id)
        if found is None:
            raise SnapshotError(f"revision {revision_id} is not in the migrations")
        return found

    def blueprint(self, revision_id: str) -> Blueprint | None:
        """The blueprint the revision leaves (None: no revision up to it records one)."""
        if revision_id not in self._states:
            revision = self.revision(revision_id)
            snapshot = getattr(revision.module, "SNAPSHOT", None)
            self._states[revision_id] = Blueprint.from_snapshot(snapshot) if snapshot is not None else self.before(revision)
        return self._states[revision_id]

    def before(self, revision: Script) -> Blueprint | None:
        """The blueprint a database has when Alembic is about to run the revision."""
        chain: list[Script] = []  # parents without a snapshot: they leave what is below them
        while True:
            parents = _parents(revision)
            if len(parents) != 1:
                found = self.merged(parents) if parents else None
                break
            parent = self.revision(parents[0])
            if parents[0] in self._states or getattr(parent.module, "SNAPSHOT", None) is not None:
                found = self.blueprint(parents[0])
                break
            chain.append(parent)
            revision = parent
        for below in chain:
            self._states[below.revision] = found
        return found

    def ancestors(self, revision_id: str) -> frozenset[str]:
        """The revision and every revision below it."""
        if revision_id not in self._ancestors:
            seen: set[str] = set()
            stack = [revision_id]
            while stack:
                current = stack.pop()
                if current in seen:
                    continue
                if current in self._ancestors:
                    seen |= self._ancestors[current]
                    continue
                seen.add(current)
                stack.extend(_parents(self.revision(current)))
            self._ancestors[revision_id] = frozenset(seen)
        return self._ancestors[revision_id]

    def touched(self, revision_id: str) -> dict:
        """key -> (value before, value after) of each table (and _VERSION, _ENGINES) the revision changes."""
        if revision_id not in self._touched:
            revision = self.revision(revision_id)
            if getattr(revision.module, "SNAPSHOT", None) is None:
                self._touched[revision_id] = {}  # it leaves what it found (its operations are not read here)
            else:
                self._touched[revision_id] = _changes(self.before(revision), self.blueprint(revision_id))
        return self._touched[revision_id]

    def merged(self, heads: tuple[str, ...] | list[str]) -> Blueprint | None:
        """The blueprint a database has once Alembic has run every one of `heads` (MergeConflict
        when two of them change one table differently)."""
        heads = tuple(heads)
        if heads not in self._merges:
            self._merges[heads] = self._merge(heads)
        return self._merges[heads]

    def _merge(self, heads: tuple[str, ...]) -> Blueprint | None:
        ancestries = [self.ancestors(head) for head in heads]
        branches = frozenset.union(*ancestries) - frozenset.intersection(*ancestries)
        touches: dict = {}
        for revision_id in sorted(branches):
            for key in self.touched(revision_id):
                touches.setdefault(key, []).append(revision_id)
        states = [state for state in (self.blueprint(head) for head in heads) if state is not None]
        if not states:
            return None
        values: dict = {_VERSION: states[0].transport_version, _ENGINES: states[0].engines}
        for state in states:  # tables no branch changed: as every head has them
            for spec in state.tables:
                values.setdefault(spec.name, _value(state, spec))
        for key, revisions in touches.items():
            # the last change of each branch that changes it (none of the others comes after it)
            last = [r for r in revisions if not any(r != other and r in self.ancestors(other) for other in revisions)]
            change = self.touched(last[0])[key]
            for other in last[1:]:
                if not _agree(key, change, self.touched(other)[key]):
                    raise MergeConflict(self._conflict(key, last[0], other))
            values[key] = change[1]
        version = values[_VERSION]
        tables = [value[0] for key, value in values.items() if isinstance(key, TableName) and value is not None]
        built = {spec.name: values[spec.name][2] for spec in tables if values[spec.name][2] != version}
        owners = {name: owner for state in states for name, owner in state.owners.items() if name in values and values[name] is not None}
        return Blueprint(version, values[_ENGINES], in_kind_order(tables), built=built, owners=owners)

    def _conflict(self, key: object, one: str, other: str) -> str:
        what = f"table {key}" if isinstance(key, TableName) else f"the {key.replace('_', ' ')}"
        sides = " and ".join(self._site(revision_id, key) for revision_id in (one, other))
        return (
            f"two branches change {what} differently: {sides}. `alembic upgrade` would run both on a database at "
            "their fork point, in an order nobody chose. Make one branch leave it alone (delete that branch's "
            "revision if no database has run it, and compile its change again after the merge), then compile"
        )

    def _site(self, revision_id: str, key: object) -> str:
        """Where a revision changes the key: its file, and the lines of its upgrade() that name the table."""
        revision = self.revision(revision_id)
        before, after = self.touched(revision_id)[key]
        if not isinstance(key, TableName):
            return f"{revision.path} ({key.replace('_', ' ')} {_shown(before)} -> {_shown(after)})"
        lines = "".join(f"; line {number}: {text}" for number, text in _op_lines(Path(revision.path), key)[:2])
        return f"{revision.path} ({_change_words(before, after)}{lines})"


def _value(state: Blueprint, spec: TableSpec) -> tuple:
    """What a merge compares of a table: its spec, the shape of the version that built it, that version."""
    built = state.built_with(spec.name)
    return (spec, profile(built).queue_shape if spec.kind is Kind.QUEUE else None, built)


def _changes(before: Blueprint | None, after: Blueprint | None) -> dict:
    """key -> (before, after) for each table, the version and the engines that differ between two blueprints."""
    if after is None or before is after:
        return {}
    if before is None:
        out: dict = {_VERSION: (None, after.transport_version), _ENGINES: (None, after.engines)}
        out.update({spec.name: (None, _value(after, spec)) for spec in after.tables})
        return out
    out = {}
    if before.transport_version != after.transport_version:
        out[_VERSION] = (before.transport_version, after.transport_version)
    if before.engines != after.engines:
        out[_ENGINES] = (before.engines, after.engines)
    old = {spec.name: _value(before, spec) for spec in before.tables}
    for spec in after.tables:
        value = _value(after, spec)
        was = old.pop(spec.name, None)
        if was is None or was[:2] != value[:2]:
            out[spec.name] = (was, value)
    out.update({name: (was, None) for name, was in old.items()})
    return out


def _agree(key: object, one: tuple, other: tuple) -> bool:
    """Two branches' changes of one key that every order of running leaves alike: the same transport
    version or engines. Never a table: even two creations alike clash (the second adopts the first's
    table, but a downgrade past the merge drops it twice)."""
    return not isinstance(key, TableName) and one[1] == other[1]


def _shown(value: object) -> str:
    return "none" if value is None else (", ".join(value) if isinstance(value, tuple) else str(value))


_NOUNS = {
    Kind.QUEUE: "queue",
    Kind.DELAYED: "delayed table",
    Kind.SUBSCRIPTIONS: "subscription table",
    Kind.SAGA: "saga table",
    Kind.OUTBOX: "outbox table",
}


def _change_words(before: tuple | None, after: tuple | None) -> str:
    if before is None:
        return f"creates the {_NOUNS[after[0].kind]}"
    if after is None:
        return f"drops the {_NOUNS[before[0].kind]}"
    diffs = [
        f"{f} {getattr(before[0], f)!r} -> {getattr(after[0], f)!r}" for f in _SPEC_FIELDS if getattr(before[0], f) != getattr(after[0], f)
    ]
    if before[1] != after[1]:
        diffs.append(f"transport {before[2]} -> {after[2]}")
    return "changes " + ", ".join(diffs)


_SPEC_FIELDS = ("kind", "body_string", "seq_type", "protected", "correlation", "transitional", "saga_prefix", "tenant")


def _op_lines(path: Path, name: TableName) -> list[tuple[int, str]]:
    """(line number, text) of each operation in the file's upgrade() that names the table."""
    import json

    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    literal = json.dumps(name.table, ensure_ascii=False)
    found, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("def "):
            inside = line.startswith("def upgrade(")
            continue
        stripped = line.strip()
        if inside and stripped.startswith("op.") and f"({literal}" in stripped:
            if name.schema is None or f"schema={json.dumps(name.schema, ensure_ascii=False)}" in stripped:
                found.append((number, stripped))
    return found


def snapshots(script: ScriptDirectory) -> Iterator[tuple[str, Blueprint]]:
    """(revision id, recorded blueprint) of every revision that records one, newest first."""
    for revision in script.walk_revisions():
        snapshot = getattr(revision.module, "SNAPSHOT", None)
        if snapshot is not None:
            yield revision.revision, Blueprint.from_snapshot(snapshot)


# --------------------------------------------------------------------------- the database's stamp
def stamps(connection: Connection, version_table: str | None = None) -> tuple[str, ...]:
    """The revisions the database's version table holds (none before the first upgrade)."""
    from alembic.runtime.migration import MigrationContext

    opts = {"version_table": version_table} if version_table else {}
    return tuple(MigrationContext.configure(connection, opts=opts).get_current_heads())


# What a message about a database's stamps tells to run, unless its caller knows the database's URL
# (urls.upgrade_command: `alembic -x url=URL upgrade head`, the URL the user gave).
UPGRADE = "alembic upgrade head"


def deployed_revision(connection: Connection, upgrade: str = UPGRADE) -> str:
    """The one revision the database is stamped with; upgrade: the command its refusal names."""
    return only_revision(stamps(connection), upgrade)


def only_revision(heads: tuple[str, ...], upgrade: str = UPGRADE) -> str:
    """The one revision of a database's stamps (SnapshotError when it holds none or several, naming `upgrade`:
    urls.upgrade_command of the database's URL where the caller knows it)."""
    if len(heads) != 1:
        raise SnapshotError(f"the database is stamped with {len(heads)} revisions ({', '.join(heads) or 'none'}); run `{upgrade}`")
    return heads[0]


def _blueprint_table() -> Table:
    from sqlalchemy import Column, MetaData, String, Table, Text

    return Table(BLUEPRINT_TABLE, MetaData(), Column("revision", String(64), primary_key=True), Column("snapshot", Text, nullable=False))


def record_blueprint(connection: Connection, script: ScriptDirectory, role: str = SHARED) -> None:
    """Keep BLUEPRINT_TABLE at the blueprint of the revision the database is now stamped with, the
    tables of the database's role only (migrate.env runs this after every online upgrade or downgrade,
    in its transaction); at base the table goes."""
    table = _blueprint_table()
    heads = stamps(connection)
    found = blueprint_at(script, heads[0]) if len(heads) == 1 else None
    if found is not None:
        found = found.for_role(role)
    if found is None:
        table.drop(connection, checkfirst=True)
        return
    table.create(connection, checkfirst=True)
    connection.execute(table.delete())
    connection.execute(table.insert().values(revision=heads[0], snapshot=found.to_snapshot()))


def stored_blueprint(connection: Connection) -> Blueprint | None:
    """The blueprint the migrations left in BLUEPRINT_TABLE, if it matches the stamp (None otherwise)."""
    from sqlalchemy import inspect, select
    from sqlalchemy.exc import DBAPIError

    if not inspect(connection).has_table(BLUEPRINT_TABLE):
        return None
    table = _blueprint_table()
    try:
        row = connection.execute(select(table.c.revision, table.c.snapshot)).first()
    except DBAPIError:  # a login without the grant (`sqltransport-schema grants` gives it): read the migrations
        connection.rollback()
        return None
    if row is None or stamps(connection) != (row.revision,):
        return None
    return Blueprint.from_snapshot(row.snapshot)


def deployed_blueprint(engine: Engine, config_file: str = "alembic.ini", upgrade: str = UPGRADE) -> Blueprint:
    """The blueprint of the revision the database is stamped with (what the runtime serves): the
    copy the migrations stored in the database, else read from the migrations config_file names.
    upgrade: the command a refusal names (urls.upgrade_command of the database's URL)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    with engine.connect() as conn:
        stored = stored_blueprint(conn)
        if stored is not None:
            return stored
        revision = deployed_revision(conn, upgrade)
    if not Path(config_file).is_file():
        raise SnapshotError(
            f"the database holds no {BLUEPRINT_TABLE} (stamped by an offline script, or by a release before it) and "
            f"{config_file} does not exist: run `{upgrade}` once online, or pass the project's alembic.ini"
        )
    return recorded_blueprint(ScriptDirectory.from_config(Config(config_file)), revision)
