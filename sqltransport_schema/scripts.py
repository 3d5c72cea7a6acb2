"""Deployment scripts a DBA reviews: Alembic's offline (--sql) output, made safe to re-run.

`render()` runs `alembic upgrade FROM:TO --sql` for SQL Server or PostgreSQL and puts a header in
front (topology sha256, revision range, engine, date). Alembic's own `alembic_version` statements
are rewritten as Alembic writes them (migrate/offline.py's RepeatableStamps, which migrations/env.py installs for every
offline upgrade on these engines), so that running the whole script a second time changes nothing:

- the version table is created only when missing;
- the first stamp (`INSERT`) happens only while the version table is empty;
- each later stamp (`UPDATE ... WHERE version_num = 'old'`) is guarded by the old revision.

The transport's own DDL is already idempotent (IF NOT EXISTS / guarded batches). Alembic's
statements are matched exactly; any other statement touching alembic_version (branch merges,
for example) is refused rather than passed through unguarded.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from .migrate.execution import CHECKPOINT_NOTE
from .migrate.locks import DEFAULT_TIMEOUT, TIMEOUT_OPTION, format_duration, lock_lines, lock_report, parse_duration
from .migrate.offline import ENGINES, ScriptError
from .schema import SHARED as SHARED_ROLE

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from alembic.config import Config

    from .migrate.ops import TransportOp


def _alembic_output(
    config: Config, engine: str, revision: str, marks: list | None = None, lock_timeout: str = DEFAULT_TIMEOUT, role: str = SHARED_ROLE
) -> str:
    """Alembic's offline output; marks (if given) gets (offset, operation) at the start of each
    operation's text and (offset, None) at its end."""
    from alembic import command

    from .migrate.execution import OFFLINE_HOOK_OPTION

    buffer = io.StringIO()
    if marks is not None:
        config.attributes[OFFLINE_HOOK_OPTION] = lambda operation: marks.append((buffer.tell(), operation))
    config.stdout = buffer
    config.output_buffer = buffer
    x = [f"url={ENGINES[engine]}", f"{TIMEOUT_OPTION}={lock_timeout}", *([f"role={role}"] if role != SHARED_ROLE else [])]
    config.cmd_opts = argparse.Namespace(x=x, quiet=True)
    config.attributes["configure_logging"] = False
    command.upgrade(config, revision, sql=True)
    return buffer.getvalue()


def _resolve(config: Config, rev: str | None, default: str) -> str:
    from alembic.script import ScriptDirectory

    if rev is None:
        rev = default
    if rev == "base":
        return "base"
    script = ScriptDirectory.from_config(config)
    resolved = script.get_revision(rev)
    if resolved is None:
        raise ScriptError(f"no revision {rev!r} (the migrations folder holds none)")
    return resolved.revision


def _range(config: Config, from_rev: str | None, to_rev: str | None) -> tuple[str, str, str]:
    """(first revision, last revision, the range as `alembic upgrade --sql` takes it)."""
    start = _resolve(config, from_rev, "base")
    end = _resolve(config, to_rev, "head")
    revision = f"{from_rev}:{to_rev or 'head'}" if from_rev and from_rev != "base" else (to_rev or "head")
    return start, end, revision


def _transport_versions(config: Config, start: str, end: str) -> str | None:
    """The transport version the revisions up to `end` build, `OLD -> NEW` where it changes after `start`."""
    from alembic.script import ScriptDirectory

    from .revisions import blueprint_at

    script = ScriptDirectory.from_config(config)
    new = blueprint_at(script, end) if end != "base" else None
    old = blueprint_at(script, start) if start != "base" else None
    if new is None:
        return None
    if old is None or old.transport_version == new.transport_version:
        return new.transport_version
    return f"{old.transport_version} -> {new.transport_version}"


def _queues(config: Config, end: str) -> frozenset | None:
    """The queue tables of the blueprint the script ends at (None: no revision records one)."""
    from alembic.script import ScriptDirectory

    from .revisions import blueprint_at

    blueprint = blueprint_at(ScriptDirectory.from_config(config), end) if end != "base" else None
    return blueprint.queue_names() if blueprint is not None else None


def _locks(engine: str, marks: list, lock_timeout: str, url: str | None, queues: frozenset | None = None) -> list[str]:
    """The header lines that say how long the script's statements wait for locks and which tables it
    rewrites under an exclusive lock (with each table's rows when url names the database)."""
    from . import engines as engine_registry

    dialect = engine_registry.get(engine)
    operations = [operation for _, operation in marks if operation is not None]
    rows = None
    if url is not None:
        from .db import catalog_connection, url_engine

        named = url_engine(url)  # before connecting: a database of another engine is not opened
        if named is not None and named.name != engine:
            raise ScriptError(f"--url is a {named.name} database; the script is for {engine}")
        with catalog_connection(url, ScriptError) as (found, connection):
            if found.name != engine:
                raise ScriptError(f"--url is a {found.name} database; the script is for {engine}")
            tables = [op.locked_table() for op in operations if op.locked_table() is not None]
            rows = found.catalog.row_counts(connection, tables)
    report = lock_report(operations, dialect, rows, queues)
    timeout = parse_duration(lock_timeout, "lock-timeout")
    if timeout:
        lines = [
            f"Each statement that locks a table waits at most {format_duration(timeout)} for its lock. Run it with "
            f"{dialect.script.RUN_STOPPING}: when a wait gives up, the script stops and its transaction rolls back; "
            "run it again later (docs/live-migrations.md)."
        ]
    else:
        lines = ["Statements wait for their locks as long as it takes (--lock-timeout 0)."]
    if report:
        where = " (rows as counted in the database)" if rows is not None else " (script --url URL counts their rows)"
        lines.append(f"Tables it changes in place{where}:")
        lines += ["  " + line for line in lock_lines(report)]
    else:
        lines.append("It changes no existing table in place: only short locks, on tables it creates.")
    return lines


def _included_files(topology: Path) -> list:
    """The files a valid topology includes, with their sha256 (an invalid one's header names its root file alone)."""
    from . import topology as topology_module

    try:
        return list(topology_module.load(topology).files[1:])
    except topology_module.TopologyError:
        return []


def header(
    engine: str,
    topology: Path | None,
    from_rev: str,
    to_rev: str,
    when: datetime | None = None,
    notes: Iterable[str] = (),
    transport: str | None = None,
) -> str:
    """transport: the transport version(s) the script's revisions build (`4.0 -> 9.1` across a change)."""
    from . import engines as engine_registry
    from .util import package_version

    when = when or datetime.now(timezone.utc)
    included = []
    if topology is not None and topology.is_file():
        digest = hashlib.sha256(topology.read_bytes()).hexdigest()
        topo = f"{topology} sha256 {digest}"
        included = [f"topology includes: {source.relative} sha256 {source.sha256}" for source in _included_files(topology)]
    else:
        topo = f"{topology} (not found; no sha256)" if topology is not None else "(none)"
    lines = [
        "sqltransport-schema deployment script",
        f"engine: {engine}",
        f"revisions: {from_rev} -> {to_rev}",
        f"topology: {topo}",
        *included,
        f"generated: {when.strftime('%Y-%m-%dT%H:%M:%SZ')}",
        f"written by: sqltransport-schema {package_version()}",
        f"transport version: {transport or 'unknown (no revision records a topology)'}",
        "Safe to re-run as a whole: tables are created only when missing and alembic_version is stamped once.",
        *filter(None, [engine_registry.get(engine).script.STOPPING_NOTE]),
        *notes,
    ]
    return "".join(f"-- {line}\n" for line in lines) + "\n"


@dataclass(frozen=True)
class ScriptRequest:
    """What a deployment script covers, whole or split: the engine, the revisions (from an empty
    database to the head by default), how long a statement waits for its lock, the topology file
    whose hash the header records and the database whose rows it counts (url)."""

    engine: str
    from_rev: str | None = None
    to_rev: str | None = None
    topology: Path | None = None
    lock_timeout: str = DEFAULT_TIMEOUT
    url: str | None = None
    role: str = SHARED_ROLE  # the tables of the shared database, or those of each tenant database (docs/tenants.md)

    def alembic_output(self, config: Config) -> tuple[str, str, str, list, list[str]]:
        """(start, end, Alembic's offline output made repeatable as written, where each operation's
        text begins and ends in it, the lock notes)."""
        if self.engine not in ENGINES:
            raise ScriptError(f"--engine must be one of {', '.join(ENGINES)}")
        start, end, revision = _range(config, self.from_rev, self.to_rev)
        marks: list = []
        text = _alembic_output(config, self.engine, revision, marks, self.lock_timeout, self.role)
        notes = _locks(self.engine, marks, self.lock_timeout, self.url, _queues(config, end))
        if self.role != SHARED_ROLE:
            notes.insert(0, "database: a tenant database (run it in each one): the tables topology.yaml places in tenant databases only")
        return start, end, text, marks, notes


def render(config: Config, request: ScriptRequest) -> str:
    """The whole reviewed script: header (with what it locks: with each table's rows when url names
    the database), then Alembic's offline output made idempotent."""
    start, end, body, _marks, notes = request.alembic_output(config)
    return header(request.engine, request.topology, start, end, notes=notes, transport=_transport_versions(config, start, end)) + body


# --------------------------------------------------------------------------- one file per endpoint
SHARED = ""  # owner of schemas and of tables no endpoint owns
LAST = None  # owner of what must run after every endpoint (schema removal, version stamping)


def _owner(operation: TransportOp, endpoints: Mapping[tuple, str], sagas: dict) -> str | None:
    """The endpoint whose tables (queues, delayed table, saga and outbox tables: sagas maps their names to it) an
    operation touches; SHARED or LAST for the rest. endpoints: (schema, catalog, name) -> name; a table
    is its endpoint's when named as it or as it plus a dot and more, the longest such name first
    ("Sales.Eu" before "Sales"), looked up by each prefix of the table's name, never by a scan."""
    from .migrate import ops

    if isinstance(operation, ops.DropSchemaIfEmptyOp):
        return LAST
    name = operation.table_name
    if name is None:
        return SHARED
    if name in sagas:
        return sagas[name]
    table = name.table
    while True:
        owner = endpoints.get((name.schema, name.catalog, table))
        if owner is not None:
            return owner
        table, dot, _ = table.rpartition(".")
        if not dot:
            return SHARED


_CHECKPOINT = re.compile(re.escape(CHECKPOINT_NOTE.split(":")[0]) + r":[^\n]*\n+COMMIT;\n+BEGIN;\n+")


def _file_name(index: int, owner: str, width: int = 2) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", owner).strip("._") or "endpoint"
    return f"{index:0{width}d}-{safe}.sql"


def render_split(config: Config, request: ScriptRequest) -> dict[str, str]:
    """The same script as render(), as one file per endpoint (its queues, delayed, saga and outbox tables), in
    run order: 00-shared.sql (schemas, shared queues, the subscription table), one file per endpoint, then 99-alembic-version.sql
    (schema removals and version stamping, which must come last). Each file is its own transaction, and
    records as its last statement that it completed; the last file stamps only when every other file did
    (Script.part_done, Script.parts_check), so a part that failed or was skipped leaves the version as it was."""
    from . import engines as engine_registry
    from . import topology as topology_module

    topology = request.topology
    if topology is None or not topology.is_file():
        raise ScriptError(f"splitting by endpoint needs the topology file ({topology} not found)")
    endpoints = topology_module.load(topology).endpoints
    sagas = {ep.saga_spec(saga).name: ep.name for ep in endpoints for saga in ep.sagas}
    sagas.update((ep.outbox_spec().name, ep.name) for ep in endpoints if ep.outbox)
    owners = {(ep.schema, ep.catalog, ep.name): ep.name for ep in endpoints}
    start, end, text, marks, notes = request.alembic_output(config)
    engine, lock_timeout = request.engine, request.lock_timeout
    dialect = engine_registry.get(engine)
    # each file runs in a session of its own: each sets the lock timeout (the last file has Alembic's own)
    prologue = dialect.script.lock_timeout(parse_duration(lock_timeout, "lock-timeout"))
    prologue = prologue + "\n\n" if prologue else ""

    parts: dict[str | None, list[str]] = {SHARED: []}
    frame: list[str] = []  # Alembic's own text: transaction, version table, stamps
    position = 0
    # The whole script's part-way commits (migrate.execution._checkpoint) go into the parts: a part
    # commits before an operation when the whole script committed since the part's previous one, so
    # no part's transaction holds more operations than one of the whole script's.
    commits: list[str] = []
    committed: dict[str | None, int] = {}  # owner -> how many of the whole's commits its transaction follows
    for (begin, operation), (finish, closing) in zip(marks[::2], marks[1::2]):
        assert closing is None
        between = text[position:begin]
        commits += _CHECKPOINT.findall(between)
        frame.append(_CHECKPOINT.sub("", between))
        owner = _owner(operation, owners, sagas)
        part = parts.setdefault(owner, [])
        if part and owner is not LAST and committed.get(owner, 0) < len(commits):
            part.append(commits[-1])
        committed[owner] = len(commits)
        part.append(text[begin:finish])
        position = finish
    frame.append(text[position:])
    last = parts.pop(LAST, [])

    head = header(engine, topology, start, end, notes=notes, transport=_transport_versions(config, start, end))
    order = [SHARED] + [e for e in dict.fromkeys(o for o in parts if o != SHARED)]
    files: dict[str, str] = {}
    width = max(2, len(str(len(order))))  # 00-shared.sql ... 99-alembic-version.sql; 000- ... 999- past 98 endpoints
    names = [_file_name(0, "shared", width)] + [_file_name(i + 1, owner, width) for i, owner in enumerate(order[1:])]
    final = "9" * width + "-alembic-version.sql"
    deployment = f"{start}:{end}"  # what each part's completion marker is recorded under
    for name, owner in zip(names, order):
        what = "schemas, shared queues and tables" if owner == SHARED else f"endpoint {owner}"
        note = f"-- part: {what}. Run the files in name order: {names[0]} first, {final} last.\n\n"
        done = dialect.script.part_done(deployment, name)
        files[name] = head + note + dialect.script.SCRIPT_BEGIN + prologue + "".join(parts[owner]) + done + dialect.script.SCRIPT_COMMIT
    # The frame keeps Alembic's transaction: schema removals go inside it, before the stamps.
    body = "".join(frame)
    if last:
        marker = body.find("-- Running upgrade")
        cut = body.find("\n\n", marker) + 2 if marker >= 0 else 0
        body = body[:cut] + "".join(last) + body[cut:]
    # the stamps commit only if every part recorded that it completed: checked last, before the commit
    commit = body.rindex(dialect.script.SCRIPT_COMMIT.split("\n")[0] + "\n")
    body = body[:commit] + dialect.script.parts_check(deployment, names) + body[commit:]
    note = "-- part: version stamping (and schema removal), only once every other part completed. Run it after every other file.\n\n"
    files[final] = head + note + body
    return files
