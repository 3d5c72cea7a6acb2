"""check: compare a live database with the topology its migrations say it holds.

The core (`diff`) is pure: the blueprint of the revision the database is stamped with, the
migrations head, and the live table shapes an engine read from the catalog go in; a Report
comes out. `run` is the I/O edge: it connects, reads the stamp, the revisions and the catalog.
docs/check.md documents the categories and the JSON output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import errors
from .schema import SHARED, Blueprint, TableName
from .shapes import UNKNOWN_EXPRESSION, UNKNOWN_PREDICATE, IndexShape, TableShape, normalise_expression
from .versions import profile

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy.engine import Connection

    from .engines import Dialect
    from .schema import TableSpec

# In report order. unmanaged_table is information only: it never makes the check fail.
CATEGORIES = (
    "unapplied_revisions",
    "missing_table",
    "extra_managed_table",
    "unmanaged_table",
    "missing_column",
    "extra_column",
    "column_type",
    "column_name",
    "column_default",
    "column_numbering",
    "generated_column",
    "column_collation",
    "missing_index",
    "extra_index",
    "index_name",
    "index_columns",
    "index_predicate",
    "trigger",
    "orphaned_subscription",
)
INFO_CATEGORIES = frozenset({"unmanaged_table"})
# What a check without the migrations (no alembic.ini) cannot know.
NO_MIGRATIONS = (
    "no alembic.ini: compared with the blueprint the database records; revisions not applied yet are not known, "
    "and tables of other revisions are reported as unmanaged (run from the project folder, or pass -c, for both)"
)


class CheckError(errors.SqltransportError):
    """The check could not run: unreachable database, no stamp, unreadable migrations."""


@dataclass(frozen=True)
class Finding:
    category: str
    table: str | None
    detail: str
    renamed: tuple[str, str] | None = field(default=None, compare=False)  # index_name: (live name, expected name)

    @property
    def severity(self) -> str:
        return "info" if self.category in INFO_CATEGORIES else "drift"

    def to_json(self) -> dict:
        return {"category": self.category, "severity": self.severity, "table": self.table, "detail": self.detail}

    def sort_key(self) -> tuple:
        return (CATEGORIES.index(self.category), self.table or "", self.detail)


@dataclass
class Report:
    engine: str
    deployed_revision: str | None
    head_revision: str | None
    findings: list[Finding] = field(default_factory=list)
    unapplied_revisions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the check could not know (json: only when there are some)
    expected: Blueprint | None = field(default=None, repr=False, compare=False)  # the blueprint compared with (not in to_json)

    @property
    def drift(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "drift"]

    @property
    def in_sync(self) -> bool:
        return not self.drift

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for finding in self.findings:
            out[finding.category] = out.get(finding.category, 0) + 1
        return out

    def to_json(self) -> dict:
        return {
            "status": "in_sync" if self.in_sync else "drift",
            "engine": self.engine,
            "deployed_revision": self.deployed_revision,
            "head_revision": self.head_revision,
            "unapplied_revisions": list(self.unapplied_revisions),
            "findings": [f.to_json() for f in self.findings],
            "counts": self.counts(),
            **({"notes": list(self.notes)} if self.notes else {}),
        }

    def text_lines(self) -> list[str]:
        lines = [f"{f.severity}: {f.category}: " + (f"{f.table}: " if f.table else "") + f.detail for f in self.findings]
        lines += [f"note: {note}" for note in self.notes]
        if self.in_sync:
            lines.append("in sync")
        else:
            lines.append(f"drift: {len(self.drift)} difference(s) from revision {self.deployed_revision}")
        return lines

    def markdown(self) -> str:
        title = "in sync" if self.in_sync else f"drift ({len(self.drift)} difference(s))"
        lines = [
            f"### sqltransport-schema check: {title}",
            "",
            f"Engine `{self.engine}`, database at revision `{self.deployed_revision}`, migrations head `{self.head_revision}`.",
            *(f"\nNote: {note}" for note in self.notes),
        ]
        if self.findings:
            lines += ["", "| Severity | Category | Table | Detail |", "|---|---|---|---|"]
            for f in self.findings:
                cells = [f.severity, f.category, f.table or "", f.detail]
                lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
        return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def display(engine: Dialect, name: TableName) -> str:
    schema = name.schema if name.schema is not None else engine.default_schema
    return ".".join(part for part in (name.catalog, schema, name.table) if part is not None)


def _column(type_nullable: tuple[str, bool], flags: tuple[str, ...] = ()) -> str:
    type_, nullable = type_nullable
    return " ".join((type_, *flags, "null" if nullable else "not null"))


# --------------------------------------------------------------------------- the pure core
@dataclass(frozen=True)
class Known:
    """What a check knows of a database besides its tables' shapes, read together with them (one
    object: diff's callers pass all of it or none). unapplied: revision ids between the deployed
    revision and the head. history: table_key -> the revision whose blueprint records the table,
    for tables of other revisions than the deployed one. subscriptions: the rows (endpoint, topic,
    address) of the subscription table; those whose address names no live table are drift (a
    publish of their topic fails)."""

    unapplied: list[str] | tuple[str, ...] = ()
    history: dict[tuple, str] | None = None
    subscriptions: list[tuple[str, str, str]] | tuple[tuple[str, str, str], ...] = ()


def diff(
    expected: Blueprint,
    deployed_revision: str | None,
    head_revision: str | None,
    live: dict[tuple, tuple[TableName, TableShape]],
    *,
    engine: Dialect,
    known: Known = Known(),
) -> Report:
    """Every difference between the live tables and the expected blueprint, each reported once.

    engine: builds expected shapes and table keys (no database); known: the rest read of the database.
    """
    unapplied, history, subscriptions = known.unapplied, known.history, known.subscriptions
    report = Report(engine.name, deployed_revision, head_revision, unapplied_revisions=list(unapplied), expected=expected)
    findings = report.findings
    if unapplied:
        findings.append(Finding("unapplied_revisions", None, f"{len(unapplied)} revision(s) not applied: {', '.join(unapplied)}"))
    prof = profile(expected.transport_version)
    expected_keys = set()
    for spec in expected.tables:
        if not engine.holds(spec.kind):
            continue  # not deployed on this engine (queue tables on a saga-only engine)
        key = engine.table_key(spec.name)
        expected_keys.add(key)
        table = display(engine, spec.name)
        found = live.get(key)
        if found is None:
            findings.append(Finding("missing_table", table, f"{spec.kind.value} table is not in the database"))
            continue
        findings += _table_findings(table, engine.expected_shape(spec, prof), found[1], engine.case_insensitive_names)
    history = history or {}
    for key, (name, _shape) in live.items():
        if key in expected_keys:
            continue
        if key in history:
            findings.append(
                Finding(
                    "extra_managed_table",
                    display(engine, name),
                    f"recorded by revision {history[key]}, not by the deployed revision {deployed_revision}",
                )
            )
        else:
            findings.append(Finding("unmanaged_table", display(engine, name), "in no revision's topology; left alone"))
    if subscriptions:
        from .runtime.status import UNSUBSCRIBE_HINT, orphaned_subscriptions

        table = display(engine, expected.subscription_table)
        for orphan in orphaned_subscriptions(engine, subscriptions, live):
            findings.append(Finding("orphaned_subscription", table, f"{orphan.describe()}: {UNSUBSCRIBE_HINT}"))
    findings.sort(key=Finding.sort_key)
    note = unread_definitions(live, engine)
    if note is not None:
        report.notes.append(note)
    return report


def _table_findings(table: str, want: TableShape, have: TableShape, case_insensitive: bool) -> list[Finding]:
    out = []
    for column, spec in want.columns.items():
        flags = want.column_flags(column)
        if column not in have.columns:
            out.append(Finding("missing_column", table, f"{column} ({_column(spec, flags)})"))
        elif (have.columns[column], have.column_flags(column)) != (spec, flags):
            found = _column(have.columns[column], have.column_flags(column))
            out.append(Finding("column_type", table, f"{column}: expected {_column(spec, flags)}, found {found}"))
    for column, spec in have.columns.items():
        if column not in want.columns:
            out.append(Finding("extra_column", table, f"{column} ({_column(spec, have.column_flags(column))})"))
    shared = [column for column in want.columns if column in have.columns]
    for column in shared:
        if column in want.names and column in have.names and want.names[column] != have.names[column]:
            found = have.names[column]
            out.append(Finding("column_name", table, f"{column}: expected identifier {want.names[column]}, found {found}"))
    for category, attribute, spell, absent in _COLUMN_ATTRIBUTES:
        expected, live = getattr(want, attribute), getattr(have, attribute)
        if not expected and not live:
            continue
        for column in shared:
            want_value, have_value = expected.get(column), live.get(column)
            if have_value == UNKNOWN_EXPRESSION and want_value is not None:
                continue  # there, its definition not readable by this login: the report's note says so
            if want_value != have_value and normalise_expression(want_value) != normalise_expression(have_value):
                said = [absent if value is None else spell.format(value) for value in (want_value, have_value)]
                out.append(Finding(category, table, f"{column}: expected {said[0]}, found {said[1]}"))
    out += _index_findings(table, want.indexes, have.indexes, case_insensitive)
    fold = _fold(case_insensitive)
    expected_triggers = {fold(t) for t in want.triggers}
    for trigger in have.triggers:
        if fold(trigger) not in expected_triggers:
            out.append(Finding("trigger", table, f"trigger {trigger}: our DDL creates no trigger on this table"))
    return out


# (category, TableShape attribute, how a value reads, how its absence reads): compared for each column
# on both sides, expressions normalised (normalise_expression).
_COLUMN_ATTRIBUTES = (
    ("column_default", "defaults", "default {}", "no default"),
    ("column_numbering", "numbering", "{}", "no sequence, identity or AUTOINCREMENT"),
    ("generated_column", "generated", "generated as {}", "not generated"),
    ("column_collation", "collations", "collation {}", "the default collation"),
)


def _fold(case_insensitive: bool) -> Callable[[str], str]:
    """How the engine compares object names."""
    return str.casefold if case_insensitive else str


def _index_findings(table: str, want: list[IndexShape], have: list[IndexShape], case_insensitive: bool) -> list[Finding]:
    fold = _fold(case_insensitive)
    remaining = list(have)
    out = []
    unmatched = []
    named = {fold(i.name) for i in want if i.name is not None}
    for index in want:  # indexes our DDL names: compared by name, then structure
        if index.name is None:
            unmatched.append(index)
            continue
        live = next((i for i in remaining if i.name is not None and fold(i.name) == fold(index.name)), None)
        if live is None:
            # The same index under another name is one difference (renamed), not a missing and an extra one.
            live = next((i for i in remaining if i.structure() == index.structure() and fold(i.name or "") not in named), None)
            if live is not None:
                remaining.remove(live)
                out.append(Finding("index_name", table, f"{index.describe()} is named {live.name}", (live.name, index.name)))
            else:
                out.append(Finding("missing_index", table, index.describe()))
            continue
        remaining.remove(live)
        if live.keys() != index.keys():
            out.append(Finding("index_columns", table, f"{index.name}: expected {index.describe()}, found {live.describe()}"))
        elif not _same_predicate(index, live):
            out.append(Finding("index_predicate", table, f"{index.name}: expected {_predicate(index)}, found {_predicate(live)}"))
    for index in unmatched:  # implicit indexes (primary keys, UNIQUE): by structure alone
        live = next((i for i in remaining if i.keys() == index.keys() and _same_predicate(index, i)), None)
        if live is not None:
            remaining.remove(live)
            continue
        live = next((i for i in remaining if i.keys() == index.keys()), None)
        if live is not None:
            remaining.remove(live)
            out.append(Finding("index_predicate", table, f"{live.name}: expected {_predicate(index)}, found {_predicate(live)}"))
            continue
        # Same key columns and uniqueness, another kind or INCLUDE list (SQL Server only:
        # elsewhere clustered and include are never set, so keys() matched above).
        live = next((i for i in remaining if (i.columns, i.unique) == (index.columns, index.unique)), None)
        if live is not None:
            remaining.remove(live)
            out.append(Finding("index_columns", table, f"{live.name}: expected {index.describe()}, found {live.describe()}"))
        else:
            out.append(Finding("missing_index", table, index.describe()))
    out += [Finding("extra_index", table, index.describe()) for index in remaining]
    return out


def _same_predicate(want: IndexShape, have: IndexShape) -> bool:
    """Whether a live index's predicate is the expected one; one the login cannot read
    (UNKNOWN_PREDICATE) is taken as the expected filter when one is expected (has_filter agrees)."""
    if have.predicate == UNKNOWN_PREDICATE:
        return want.predicate is not None
    return have.predicate == want.predicate


def _predicate(index: IndexShape) -> str:
    if index.predicate == UNKNOWN_PREDICATE:
        return "a filter whose definition this login cannot read (needs VIEW DEFINITION)"
    return f"where {index.predicate}" if index.predicate else "no predicate"


def unread_definitions(live: dict[tuple, tuple[TableName, TableShape]], engine: Dialect) -> str | None:
    """The note of a check whose login could not read some definitions (SQL Server without VIEW
    DEFINITION): filtered indexes compared as filtered, defaults and computed columns as present,
    their definitions not compared."""
    unread = sorted(
        f"{display(engine, name)}.{index.name}"
        for name, shape in live.values()
        for index in shape.indexes
        if index.predicate == UNKNOWN_PREDICATE
    )
    unread += sorted(
        f"{display(engine, name)}.{column}"
        for name, shape in live.values()
        for column in {**shape.defaults, **shape.generated}
        if UNKNOWN_EXPRESSION in (shape.defaults.get(column), shape.generated.get(column))
    )
    if not unread:
        return None
    return (
        f"unknown: the definitions of {len(unread)} filtered index(es), default(s) or computed column(s) "
        f"({', '.join(unread[:5])}{', ...' if len(unread) > 5 else ''}) are not visible to this login (needs VIEW DEFINITION, "
        "e.g. `GRANT VIEW DEFINITION ON SCHEMA::dbo TO role` for each schema); each was compared as there, its definition was not"
    )


# --------------------------------------------------------------------------- the I/O edge
class Reference:
    """What a database of one history and role is compared with, whichever database it is: the
    head, every revision's recorded tables (their catalogs, each table's newest revision) and, per
    revision a database is stamped with, its expected blueprint and the revisions after it. Made
    once: a fleet worker checks many databases against one (fleet/work.py)."""

    def __init__(self, script: ScriptDirectory, role: str = SHARED, version_table: str = "alembic_version"):
        from alembic.util import CommandError

        from . import revisions

        self.script, self.role = script, role
        try:
            self.head, _ = revisions.head_blueprint(script)
            self.recorded = [(revision, spec) for revision, bp in revisions.snapshots(script) for spec in bp.for_role(role).tables]
        except (CommandError, revisions.SnapshotError) as exc:
            raise CheckError(str(exc)) from None
        # the catalogs every revision places tables in (SQL Server three-part names)
        self.catalogs = sorted({spec.name.catalog for _, spec in self.recorded if spec.name.catalog is not None})
        self.own = frozenset({version_table.casefold(), revisions.BLUEPRINT_TABLE})  # the migrations' bookkeeping
        self._deployed: dict[str, tuple[Blueprint, list[str]]] = {}
        self._history: dict[str, dict[tuple, str]] = {}

    def at(self, deployed: str) -> tuple[Blueprint, list[str]]:
        """(the blueprint the revision records for the role, the revisions after it up to the head)."""
        if deployed not in self._deployed:
            from alembic.util import CommandError

            from . import revisions

            try:
                expected = revisions.recorded_blueprint(self.script, deployed).for_role(self.role)
                self._deployed[deployed] = (expected, _unapplied(self.script, deployed, self.head))
            except (CommandError, revisions.SnapshotError) as exc:
                raise CheckError(str(exc)) from None
        return self._deployed[deployed]

    def history(self, engine: Dialect) -> dict[tuple, str]:
        if engine.name not in self._history:
            self._history[engine.name] = _history(self.recorded, engine)
        return self._history[engine.name]


def compare(connection: Connection, engine: Dialect, deployed: str, reference: Reference) -> Report:
    """The check of the database on connection, stamped with deployed, against reference: its
    catalog read (the engine's bulk queries) and its subscriptions; the rest is the reference's."""
    expected, unapplied = reference.at(deployed)
    live = engine.catalog.read_shapes(connection, reference.catalogs)
    subscriptions = _subscriptions(connection, engine, expected, live)
    live = {key: value for key, value in live.items() if value[0].table.casefold() not in reference.own}
    history = reference.history(engine)
    return diff(expected, deployed, reference.head, live, engine=engine, known=Known(unapplied, history, subscriptions))


def run(
    url: str, config: Config | None, role: str = SHARED, script: ScriptDirectory | None = None, read_timeout: float | None = None
) -> Report:
    """Connect, read the stamp, the revisions and the catalog; diff. Raises CheckError (past
    read_timeout, the seconds of a connection, statement or lock wait: saying how long it waited).

    role: the database's under tenant placement (docs/tenants.md): the shared database's tables, or
    a tenant database's; each revision's blueprint is read for that role.
    script: the configuration's migrations, loaded already.

    config None (no alembic.ini): the deployed blueprint is the one the migrations stored in the
    database (as `status` reads it); revisions not applied and tables of other revisions are then
    unknown, and the report says so."""
    import sqlalchemy as sa
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError
    from sqlalchemy.engine import make_url

    from . import revisions
    from .db import catalog_connection, normalise_url
    from .urls import upgrade_command

    try:
        make_url(normalise_url(url))
    except sa.exc.ArgumentError as exc:
        raise CheckError(f"invalid database URL: {exc}") from None
    reference = None
    if config is not None:
        try:
            script = script or ScriptDirectory.from_config(config)
        except CommandError as exc:
            raise CheckError(str(exc)) from None
        version_table = config.get_main_option("version_table") or "alembic_version"
        reference = Reference(script, role, version_table)
    elif script is not None:
        reference = Reference(script, role)
    with catalog_connection(url, CheckError, read_timeout) as (engine, connection):
        try:
            deployed = revisions.deployed_revision(connection, upgrade_command(url))
            stored = revisions.stored_blueprint(connection) if reference is None else None
        except revisions.SnapshotError as exc:
            raise CheckError(str(exc)) from None
        if reference is not None:
            return compare(connection, engine, deployed, reference)
        if stored is None:
            raise CheckError(
                f"the database holds no {revisions.BLUEPRINT_TABLE} (stamped by an offline script, or by a release before it) "
                "and there is no alembic.ini here: run from the project folder or pass -c alembic.ini"
            )
        # the stored blueprint is already the database's role's (migrate/env.py records it so)
        recorded = [(deployed, spec) for spec in stored.tables]
        catalogs = sorted({spec.name.catalog for _, spec in recorded if spec.name.catalog is not None})
        live = engine.catalog.read_shapes(connection, catalogs)
        subscriptions = _subscriptions(connection, engine, stored, live)
    own = {"alembic_version", revisions.BLUEPRINT_TABLE}
    live = {key: value for key, value in live.items() if value[0].table.casefold() not in own}
    report = diff(stored, deployed, None, live, engine=engine, known=Known(history=_history(recorded, engine), subscriptions=subscriptions))
    report.notes.append(NO_MIGRATIONS)
    return report


def _subscriptions(connection: Connection, engine: Dialect, expected: Blueprint, live: dict) -> list[tuple[str, str, str]]:
    """The rows (endpoint, topic, address) of the deployed subscription table, if it is there."""
    table = expected.subscription_table
    if table is None or not engine.live_bus.supported or engine.table_key(table) not in live:
        return []
    statement = engine.live_bus.subscriptions(table, profile(expected.transport_version))
    return [tuple(row) for row in connection.execution_options(no_parameters=True).exec_driver_sql(statement.sql)]


def _unapplied(script: ScriptDirectory, deployed: str, head: str | None) -> list[str]:
    """Revisions after the deployed one up to the head, oldest first."""
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    if head is None or deployed == head:
        return []
    from .revisions import History

    history = History(script)
    try:
        if script.get_revision(deployed) is None:
            raise RevisionError(deployed)
        below_head = history.ancestors(head)
        if deployed not in below_head:
            raise RevisionError(deployed)
        # every revision `alembic upgrade` runs: past a merge, each branch's (not one path)
        pending = below_head - history.ancestors(deployed)
    except (CommandError, RevisionError):
        raise CheckError(
            f"the database is stamped with revision {deployed}, which is not an ancestor of the migrations head {head}"
        ) from None
    return [r.revision for r in reversed(list(script.walk_revisions())) if r.revision in pending]


def _history(recorded: Iterable[tuple[str, TableSpec]], engine: Dialect) -> dict[tuple, str]:
    """table_key -> newest revision whose snapshot records the table (recorded: newest first)."""
    out: dict[tuple, str] = {}
    for revision, spec in recorded:
        out.setdefault(engine.table_key(spec.name), revision)
    return out
