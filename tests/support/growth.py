"""How a command's cost grows with the topology: measured at n and at 10n items, per item.

Wall time says nothing on a machine shared with other work, so three things are counted instead,
each per item (an endpoint of the topology):

- `visits`: specs read out of a Blueprint's tables (every scan, `in`, `reversed`), counted while
  `BlueprintVisits` watches. Exact. A per-table step that scans the whole blueprint makes it grow
  with n, which no linear path does: the rule "a per-table step never scans the blueprint".
- `statements`: statements sent to a database through SQLAlchemy (an engine event). Exact.
- `reads`: connections opened to SQLite files and the statements SQLite ran on them, counted at
  the driver (sqlite3), so a read that skips SQLAlchemy (a fleet target's one read of its
  alembic_version) is counted too. Exact. A per-target step that reads every target makes it grow.
- `cpu`: this process's CPU time (time.process_time, which another process's load does not add to),
  the least of a few runs; SQLite runs in this process, so its work is counted too. It catches what
  the two counts cannot see (a quadratic loop over anything else).

A path is guarded by registering it here with `@guarded(name, size)`: a function that builds what
the command needs at a size (untimed) and returns the `Operation` whose cost is measured.
tests/test_cost_growth.py measures every registered path.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

from sqltransport_schema import cli
from sqltransport_schema.fleet.file import Fleet
from sqltransport_schema.schema import Blueprint

from .projects import Project, new_project

GROWTH = 10  # the larger size is this many times the smaller
LIMIT = 2.5  # per-item cost at the larger size over that at the smaller one, at most
MEASURES = ("visits", "statements", "reads", "cpu")


# --------------------------------------------------------------------------- what is counted
class _CountedTables(tuple):
    """A blueprint's tables that count the specs read out of them (scans, `in`, `reversed`)."""

    counter: list[int]

    def __iter__(self):
        counter = self.counter
        for spec in tuple.__iter__(self):
            counter[0] += 1
            yield spec

    def __reversed__(self):
        counter = self.counter
        for i in range(len(self) - 1, -1, -1):
            counter[0] += 1
            yield tuple.__getitem__(self, i)

    def __contains__(self, item) -> bool:
        self.counter[0] += len(self)
        return tuple.__contains__(self, item)


class _CountedTargets(list):
    """A fleet's targets that count the targets read out of them (scans, `in`, `reversed`)."""

    counter: list[int]

    def __iter__(self):
        counter = self.counter
        for target in list.__iter__(self):
            counter[0] += 1
            yield target

    def __reversed__(self):
        counter = self.counter
        for i in range(len(self) - 1, -1, -1):
            counter[0] += 1
            yield list.__getitem__(self, i)

    def __contains__(self, item) -> bool:
        self.counter[0] += len(self)
        return list.__contains__(self, item)


class _Watched:
    """A data descriptor on a class standing in front of its instances' `attribute`, wrapping each
    value as it is set in a counted collection that adds to counter."""

    def __init__(self, attribute: str, counted: type, counter: list[int]) -> None:
        self.attribute, self.counted, self.counter = attribute, counted, counter

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return instance.__dict__[self.attribute]

    def __set__(self, instance, value) -> None:
        counted = self.counted(value)
        counted.counter = self.counter
        instance.__dict__[self.attribute] = counted


class BlueprintVisits:
    """Counts the specs read out of every Blueprint made while it watches, and the targets read out
    of every Fleet (fleet/file.py) loaded meanwhile: a per-table step that scans the blueprint, or a
    per-target step that scans the fleet, makes the count per item grow with n."""

    WATCHED = ((Blueprint, "tables", _CountedTables), (Fleet, "targets", _CountedTargets))

    def __init__(self) -> None:
        self.counter = [0]

    @contextlib.contextmanager
    def watching(self) -> Iterator[BlueprintVisits]:
        for owner, attribute, _ in self.WATCHED:
            assert attribute not in owner.__dict__, f"{owner.__name__}.{attribute} visits are counted already"
        for owner, attribute, counted in self.WATCHED:
            setattr(owner, attribute, _Watched(attribute, counted, self.counter))
        try:
            yield self
        finally:
            for owner, attribute, _ in self.WATCHED:
                delattr(owner, attribute)

    @property
    def count(self) -> int:
        return self.counter[0]


@contextlib.contextmanager
def counted_statements() -> Iterator[list[int]]:
    """Every statement sent through any SQLAlchemy engine while it is open, counted."""
    counter = [0]

    def count(*_args, **_kwargs) -> None:
        counter[0] += 1

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield counter
    finally:
        event.remove(Engine, "before_cursor_execute", count)


@contextlib.contextmanager
def counted_reads() -> Iterator[list[int]]:
    """Every SQLite connection opened while it is open, and every statement SQLite runs on one, counted."""
    counter = [0]
    connect = sqlite3.connect

    def counting(*args, **kwargs):
        connection = connect(*args, **kwargs)
        counter[0] += 1

        def trace(_statement: str) -> None:
            counter[0] += 1

        connection.set_trace_callback(trace)
        return connection

    sqlite3.connect = sqlite3.dbapi2.connect = counting
    try:
        yield counter
    finally:
        sqlite3.connect = sqlite3.dbapi2.connect = connect


# --------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Operation:
    """What is measured (`run`), and what puts things back before each run, untimed (`reset`)."""

    run: Callable[[], object]
    reset: Callable[[], object] = lambda: None


@dataclass(frozen=True)
class GuardedPath:
    name: str
    size: int  # n: measured at n and GROWTH * n items
    build: Callable[[int, Path], Operation]  # the fixture at a size, in a folder of its own (untimed)


PATHS: dict[str, GuardedPath] = {}


def guarded(name: str, size: int) -> Callable[[Callable[[int, Path], Operation]], Callable[[int, Path], Operation]]:
    """Register a path: `build(items, folder)` makes its fixture for that many items and returns the Operation."""

    def register(build: Callable[[int, Path], Operation]) -> Callable[[int, Path], Operation]:
        assert name not in PATHS, f"path {name} is registered twice"
        PATHS[name] = GuardedPath(name, size, build)
        return build

    return register


# --------------------------------------------------------------------------- measuring
@dataclass
class Cost:
    items: int
    visits: int = 0
    statements: int = 0
    reads: int = 0
    cpu: float = float("inf")

    def per_item(self, measure: str) -> float:
        return getattr(self, measure) / self.items


def measure_once(operation: Operation, cost: Cost) -> None:
    """One run: the counts are exact (kept as they come), the CPU time the least seen."""
    operation.reset()
    visits = BlueprintVisits()
    with visits.watching(), counted_statements() as statements, counted_reads() as reads:
        started = time.process_time()
        operation.run()
        cpu = time.process_time() - started
    cost.visits, cost.statements, cost.reads, cost.cpu = visits.count, statements[0], reads[0], min(cost.cpu, cpu)


@dataclass
class Growth:
    """The costs of one path at n and at GROWTH * n, and which measures grew too much per item."""

    name: str
    small: Cost
    large: Cost
    rounds: int = 0

    def ratio(self, measure: str) -> float:
        small, large = self.small.per_item(measure), self.large.per_item(measure)
        if small == 0:
            return 1.0 if large == 0 else float("inf")
        return large / small

    def too_steep(self, measures: tuple[str, ...] = MEASURES) -> list[str]:
        return [m for m in measures if self.ratio(m) > LIMIT]

    def describe(self) -> str:
        rows = [f"{self.name}: n={self.small.items}, {GROWTH}n={self.large.items} ({self.rounds} round(s))"]
        for m in MEASURES:
            small, large = self.small.per_item(m), self.large.per_item(m)
            rows.append(f"  {m:<10} per item {small:12.6g} -> {large:12.6g}  x{self.ratio(m):.2f} (limit x{LIMIT})")
        return "\n".join(rows)


def growth(path: GuardedPath, folder: Path, repeats: int = 2, rounds: int = 3) -> Growth:
    """The path measured at n and GROWTH * n. The counts are exact at the first run; CPU time is the
    least of `repeats` runs at each size, the sizes taking turns; when CPU time alone grew too much,
    another round is run (up to `rounds`): a busy machine slows a run, never all of them, while a
    cost that really grows does so in every round."""
    small_op = path.build(path.size, folder / "small")
    large_op = path.build(path.size * GROWTH, folder / "large")
    small_op.run()  # the first run pays for imports and caches: not counted
    result = Growth(path.name, Cost(path.size), Cost(path.size * GROWTH))
    for result.rounds in range(1, rounds + 1):
        for _ in range(repeats):
            measure_once(small_op, result.small)
            measure_once(large_op, result.large)
        if result.too_steep(("visits", "statements", "reads")) or not result.too_steep(("cpu",)):
            break
    return result


# --------------------------------------------------------------------------- the commands
def topology_text(endpoints: int, body_string: bool = False, first: int = 0, schemas: bool = False) -> str:
    """Endpoints with two instance queues and a delayed table, one in five with a saga and an outbox
    (in a schema of its own: two outboxes in one PostgreSQL schema are refused, docs/outbox.md),
    and the error and audit queues; with schemas (PostgreSQL alone, SQLite has none), every ten
    endpoints in a schema of their own."""
    engines = "[postgresql]" if schemas else "[postgresql, sqlite]"
    lines = ['transport_version: "9.1"', f"engines: {engines}", "endpoints:"]
    for i in range(first, first + endpoints):
        lines.append(f"  - name: Endpoint{i:06d}\n    instances: [host-a, host-b]")
        if i % 5 == 0 or schemas:
            lines.append(f"    schema: o{i}" if i % 5 == 0 else f"    schema: s{i // 10}")
        if body_string:
            lines.append("    body_string: true")
        if i % 5 == 0:
            lines.append(f"    outbox: true\n    sagas:\n      - name: Saga{i}\n        correlation: {{name: OrderId, type: guid}}")
    lines.append("queues:\n  - name: error\n  - name: audit")
    return "\n".join(lines) + "\n"


def call(*args: str, expect: tuple[int, ...] = (0,)) -> str:
    """The command line, in this process; its output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse's refusal of the arguments
            code = exc.code
    assert code in expect, f"{' '.join(args)} exited {code}: {err.getvalue()[-2000:]}"
    return out.getvalue()


def project_with(folder: Path, *topologies: str) -> Project:
    """A project whose history compiles each topology in turn."""
    project = new_project(folder)
    for i, text in enumerate(topologies):
        project.write_topology(text)
        call("compile", "-m", f"step {i}", "-c", str(project.ini), "--format", "json")
    return project


_DEPLOYED: dict[int, tuple[Project, Path]] = {}


def deployed(endpoints: int, folder: Path) -> tuple[Project, Path]:
    """A project of that many endpoints and a SQLite database upgraded to its head (made once per size)."""
    if endpoints not in _DEPLOYED:
        project = project_with(folder / f"deployed-{endpoints}", topology_text(endpoints))
        database = project.root / "queues.db"
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            project.upgrade(f"sqlite:///{database}")
        _DEPLOYED[endpoints] = project, database
    return _DEPLOYED[endpoints]


def ini(project: Project) -> str:
    return str(project.ini)


@guarded("compile", 40)
def _compile(endpoints: int, folder: Path) -> Operation:
    """The first compile of the topology (every table created)."""
    project = project_with(folder)
    project.write_topology(topology_text(endpoints, schemas=True))

    def reset() -> None:
        for revision in project.versions.glob("*.py"):
            revision.unlink()

    return Operation(lambda: call("compile", "-m", "initial", "-c", ini(project), "--format", "json"), reset)


@guarded("compile --check", 40)
def _compile_check(endpoints: int, folder: Path) -> Operation:
    """The replay of a history of two revisions (the second drops half the endpoints and adds as many)."""
    half = endpoints // 2
    project = project_with(folder, topology_text(endpoints, schemas=True), topology_text(endpoints, first=half, schemas=True))
    return Operation(lambda: call("compile", "--check", "-c", ini(project), "--format", "json"))


@guarded("compile +1 revision", 40)
def _compile_change(endpoints: int, folder: Path) -> Operation:
    """A compile on top of a history: half the endpoints replaced (drops, with their subscription rows)."""
    project = project_with(folder, topology_text(endpoints, schemas=True))
    project.write_topology(topology_text(endpoints, first=endpoints // 2, schemas=True))
    first = set(project.versions.glob("*.py"))

    def reset() -> None:
        for revision in set(project.versions.glob("*.py")) - first:
            revision.unlink()

    return Operation(lambda: call("compile", "-m", "change", "-c", ini(project), "--format", "json"), reset)


@guarded("check", 25)
def _check(endpoints: int, folder: Path) -> Operation:
    project, database = deployed(endpoints, folder.parent)
    return Operation(lambda: call("check", "--url", f"sqlite:///{database}", "-c", ini(project), "--format", "json"))


@guarded("status", 25)
def _status(endpoints: int, folder: Path) -> Operation:
    project, database = deployed(endpoints, folder.parent)
    return Operation(lambda: call("status", "--url", f"sqlite:///{database}", "-c", ini(project), "--format", "json"))


@guarded("script", 25)
def _script(endpoints: int, folder: Path) -> Operation:
    """The PostgreSQL deployment script, whole and split by endpoint."""
    project = project_with(folder, topology_text(endpoints))
    split = folder / "split"

    def run() -> None:
        call("script", "--engine", "postgresql", "-c", ini(project), "-o", str(folder / "deploy.sql"))
        call("script", "--engine", "postgresql", "-c", ini(project), "--split", str(split))

    return Operation(run, lambda: shutil.rmtree(split, ignore_errors=True))


@guarded("adopt plan", 15)
def _adopt(endpoints: int, folder: Path) -> Operation:
    """adopt --dry-run of a database no revision matches (its tables lack the BodyString the head adds):
    every verdict, and a plan of a change per table."""
    _, built = deployed(endpoints, folder.parent)
    database = folder / "adopted.db"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(built, database)
    with contextlib.closing(sqlite3.connect(database)) as connection:
        connection.execute("DROP TABLE alembic_version")  # as an installer left it: not stamped
        connection.commit()
    project = project_with(folder / "project", topology_text(endpoints, body_string=True))
    url = f"sqlite:///{database}"
    return Operation(lambda: call("adopt", "--url", url, "-c", ini(project), "--dry-run", "--format", "json", expect=(1,)))


@guarded("graph", 25)
def _graph(endpoints: int, folder: Path) -> Operation:
    """The topology drawn (Mermaid and DOT), and the live database drawn (status and check's reading)."""
    project, database = deployed(endpoints, folder.parent)

    def run() -> None:
        for form in ("mermaid", "dot"):
            call("graph", "-c", ini(project), "--format", form, "-o", str(folder / f"topology.{form}"))
        call("graph", "-c", ini(project), "--url", f"sqlite:///{database}", "-o", str(folder / "live.mmd"))

    folder.mkdir(parents=True, exist_ok=True)
    return Operation(run)


@guarded("fleet plan and status", 10)
def _fleet(targets: int, folder: Path) -> Operation:
    """A fleet of SQLite tenant files (half at the head, half never upgraded): the file loaded and
    staged, each target's upgrade planned (--dry-run: its one read of alembic_version) and its status
    read with check's drift summary, in this process, as a fleet worker does them (the commands run
    them in worker processes, whose cost no counter here would see). The item is a target."""
    from sqltransport_schema.fleet import file
    from sqltransport_schema.fleet.work import WOULD_UPGRADE, Migrations, Settings

    project, database = deployed(2, folder.parent)
    tenants = folder / "tenants"
    tenants.mkdir(parents=True, exist_ok=True)
    names = [f"t{i:05d}" for i in range(targets)]
    for name in names[::2]:
        shutil.copy(database, tenants / f"{name}.db")
    fleet_file = folder / "fleet.yaml"
    stages = "stages:\n  - name: canary\n    targets: [t00000]\n  - name: rest\n"
    fleet_file.write_text(f"url_template: sqlite:///{tenants}/{{name}}.db\nnames: [{', '.join(names)}]\n{stages}", encoding="utf-8")

    def reset() -> None:
        for name in names[1::2]:  # a status read of a missing file makes it: each run starts with none
            (tenants / f"{name}.db").unlink(missing_ok=True)

    def run() -> None:
        fleet = file.load(fleet_file)
        staged = [t for _, ts in fleet.staged() for t in ts]
        plan = Migrations(Settings(config=ini(project), dry_run=True))
        planned = [plan.upgrade(t).outcome for t in staged]
        assert planned.count(WOULD_UPGRADE) == targets // 2, planned
        status = Migrations(Settings(config=ini(project), check=True))
        drifted = [status.status(t).drift for t in staged]
        assert sum(1 for d in drifted if d and d["in_sync"]) == targets - targets // 2, drifted

    return Operation(run, reset)
