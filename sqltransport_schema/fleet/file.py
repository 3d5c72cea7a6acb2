"""fleet.yaml: the targets (a list, a URL template with names, or a query of a control database)
and the stages that take them. Read with the topology's Reader, so every mistake is one located
`error: file:line:col:` line; ${VAR} in a URL is read from the environment, so no secret lives in
the file. FORMAT also generates fleet.schema.json.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..schema import ROLES, SHARED, TENANT
from ..topology.format import Field, field_schema
from ..topology.problems import Mark, Problem, TopologyError
from ..topology.reader import Obj, Reader, compose, decode
from ..urls import display_url
from ..util import duration_ms

DEFAULT_FILE = "fleet.yaml"
ON_ERROR = ("stop", "continue")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

_ROLE = Field(
    "enum",
    "Its role under tenant placement (docs/tenants.md): shared (the default for a listed target) or tenant "
    "(the default for url_template's and a query's targets); its migrations run with -x role=<role>.",
    values=ROLES,
)
TARGET = Field(
    "object",
    "One database of the fleet.",
    title="target",
    fields={
        "name": Field("name", "The target's name: what reports, the journal, --only and stages call it.", required=True),
        "url": Field("string", "Its database URL; ${VAR} is read from the environment (keep passwords out of the file).", required=True),
        "role": _ROLE,
        "labels": Field(
            "list",
            "Labels a stage's select: takes it by (region-eu, tier-gold).",
            items=Field("name", "A label."),
            default=[],
        ),
    },
)
QUERY = Field(
    "object",
    "Targets read from a control database: each row is (name, url), (name, url, role) or (name, url, role, labels: "
    "comma-separated), or (name) alone with url_template.",
    title="query",
    fields={
        "url": Field("string", "The control database's URL (${VAR} from the environment).", required=True),
        "sql": Field("string", "The query, e.g. SELECT name, url FROM tenants WHERE active.", required=True),
    },
)
STAGE = Field(
    "object",
    "A stage: its targets are upgraded only once every stage before it (or each of its depends_on) succeeded.",
    title="stage",
    fields={
        "name": Field("name", "The stage's name (--stage NAME).", required=True),
        "targets": Field(
            "list",
            "Target names or glob patterns (tenant_*). The last stage takes every target no stage before it took.",
            items=Field("name", "A target name or a glob pattern."),
        ),
        "select": Field(
            "list",
            "Labels: the stage takes the targets that carry every one of them (with targets:, those that match both).",
            items=Field("name", "A label."),
        ),
        "depends_on": Field(
            "list",
            "Stages (earlier in the file) this one waits for. Once any stage has depends_on, the stages form a graph: a "
            "stage without it waits for none, and stages with no dependency between them run at the same time.",
            items=Field("name", "A stage's name."),
        ),
        "check": Field(
            "boolean",
            "Before a later stage starts, `fleet status --check` of this stage's targets must be clean (at the "
            "revision, in sync with it); else the run stops there (as --check-between-stages does for every stage).",
            default=False,
        ),
        "parallel": Field("count", "Targets upgraded at once (worker processes).", default=1),
        "on_error": Field(
            "enum",
            "stop: a failed target stops the stage; continue: the stage goes on (up to max_failures).",
            values=ON_ERROR,
            default="stop",
        ),
        "max_failures": Field("limit", "Failed targets the stage tolerates before it stops: a count or a percentage (10%)."),
        "bake": Field(
            "string",
            "A wait after the stage upgraded something, before the next stage starts (a duration: 30s, 10m): time for "
            "its endpoints to show trouble.",
        ),
        "pause_after": Field(
            "boolean",
            "Stop the run once this stage has upgraded something, for approval: running the same command again "
            "goes on (the stage's targets are at the revision then, so it pauses no more).",
            default=False,
        ),
    },
)
FORMAT = Field(
    "object",
    "sqltransport-schema fleet",
    title="fleet",
    fields={
        "targets": Field("list", "Targets by name and URL.", items=TARGET, default=[]),
        "url_template": Field("string", "A URL with {name} in it, filled from each of names."),
        "names": Field("list", "The names url_template is filled with.", items=Field("name", "A target name."), default=[]),
        "query": QUERY,
        "stages": Field("list", "Stages in order (default: one stage of every target).", items=STAGE, default=[]),
        "read_timeout": Field(
            "string",
            "How long a target's connection and version read may take before it is reported as timed out: a duration "
            "(500ms, 10s, 1m; default 10s); --read-timeout overrides it.",
        ),
        "skip": Field(
            "list",
            "Targets set aside: names or glob patterns no command takes until removed from here (as --exclude).",
            items=Field("name", "A target name or a glob pattern."),
            default=[],
        ),
    },
)


class FleetFileError(TopologyError):
    """Problems in a fleet file; each names file:line:column (printed as the topology's are)."""


@dataclass(frozen=True)
class Target:
    name: str
    url: str = field(repr=False)  # ${VAR} filled in: may hold a password, never printed
    role: str | None = None  # tenant placement's role (schema.ROLES); unset: see Fleet.placed
    labels: tuple[str, ...] = field(default=(), compare=False)  # what a stage's select: takes it by
    templated: bool = field(default=False, compare=False)  # from url_template or a query: a tenant by default

    @property
    def shown_url(self) -> str:
        return display_url(self.url)


@dataclass(frozen=True)
class Stage:
    name: str
    patterns: tuple[str, ...] = ()
    parallel: int = 1
    on_error: str = "stop"
    max_failures: int | str | None = None
    bake: float = 0.0  # seconds to wait after the stage upgraded something
    pause_after: bool = False  # stop the run after the stage upgraded something (approval)
    select: tuple[str, ...] = ()  # labels a target must all carry
    depends_on: tuple[str, ...] | None = None  # None: the stage before it (no stage of the file names any)
    check: bool = False  # status --check of its targets clean before a later stage starts

    def tolerated(self, size: int) -> int | None:
        """Failures the stage goes on after (None: any number): max_failures as a count (a
        percentage of the stage's size, rounded down), else 0 under on_error stop."""
        if self.max_failures is None:
            return 0 if self.on_error == "stop" else None
        if isinstance(self.max_failures, str):
            return int(size * float(self.max_failures.rstrip("%")) / 100)
        return self.max_failures

    def matches(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)

    def takes(self, target: Target) -> bool:
        """Whether the stage names the target: by its targets: patterns and its select: labels, each given."""
        if not self.patterns and not self.select:
            return False
        return (not self.patterns or self.matches(target.name)) and set(self.select) <= set(target.labels)


@dataclass
class Fleet:
    path: Path
    targets: list[Target]
    stages: list[Stage]
    marks: dict[str, Mark] = field(default_factory=dict)  # where the file names each listed target (a query's: none)
    skip: tuple[str, ...] = ()  # the file's skip: names or globs of targets set aside
    read_timeout: float | None = None  # seconds (the file's read_timeout:), None: the default

    def set_aside(self, exclude: list[str] | None = None) -> list[str]:
        """Names of the targets the file's skip: and `exclude` (glob patterns) set aside, in file order."""
        patterns = (*self.skip, *(exclude or ()))
        return [t.name for t in self.targets if any(fnmatch.fnmatchcase(t.name, p) for p in patterns)]

    def staged(
        self, only: list[str] | None = None, stage: str | None = None, exclude: list[str] | None = None
    ) -> list[tuple[Stage, list[Target]]]:
        """Each stage with its targets in file order (only: glob patterns of the targets to take;
        stage: that stage alone; exclude, with the file's skip:, those to leave out). A target belongs
        to the first stage that names it; the last takes the rest."""
        taken: set[str] = set()
        out = []
        for index, each in enumerate(self.stages):
            last = index == len(self.stages) - 1
            mine = [t for t in self.targets if t.name not in taken and (last or each.takes(t))]
            taken.update(t.name for t in mine)
            out.append((each, mine))
        if only:
            out = [(s, [t for t in ts if any(fnmatch.fnmatchcase(t.name, p) for p in only)]) for s, ts in out]
        aside = set(self.set_aside(exclude))
        if aside:
            out = [(s, [t for t in ts if t.name not in aside]) for s, ts in out]
        if stage is not None:
            out = [(s, ts) for s, ts in out if s.name == stage]
        return out

    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def dependencies(self) -> dict[str, tuple[str, ...]]:
        """Each stage's name -> the stages it waits for: its depends_on once any stage has one (a
        graph), else the stage before it (a chain, in file order)."""
        if any(s.depends_on is not None for s in self.stages):
            return {s.name: s.depends_on or () for s in self.stages}
        return {s.name: (self.stages[i - 1].name,) if i else () for i, s in enumerate(self.stages)}

    def placed(self, tenant_tables: bool) -> Fleet:
        """The fleet with every target's role settled: its own, else under tenant placement (the
        topology places tables in tenant databases) `tenant` for a url_template's or a query's target
        and `shared` for a listed one; without placement every database is the shared one."""

        def settled(target: Target) -> Target:
            if target.role is not None:
                return target
            return replace(target, role=TENANT if tenant_tables and target.templated else SHARED)

        return replace(self, targets=[settled(t) for t in self.targets])


def expand(text: str, mark: Mark, problems: list[Problem], environ: Mapping[str, str], written: str | None = None) -> str | None:
    """text with each ${VAR} replaced by the environment's value; a variable not set is a problem at
    its own line and column in `written` (the value as the file has it at mark, when text was made
    from it: a url_template filled with a name), once however many targets share the text."""
    missing = [name for name in dict.fromkeys(VARIABLE.findall(text)) if name not in environ]
    for name in missing:
        at = (written if written is not None else text).find("${" + name + "}")
        where = replace(mark, column=mark.column + at) if at >= 0 and mark.column is not None else mark
        problem = Problem(where, f"the environment variable {name} is not set: export it, or write the value in place of ${{{name}}}")
        if problem not in problems:
            problems.append(problem)
    if missing:
        return None
    return VARIABLE.sub(lambda m: environ[m.group(1)], text)


def load(path: str | Path, environ: Mapping[str, str] | None = None) -> Fleet:
    """The fleet of the file at path (a query's targets read from its control database)."""
    path = Path(path)
    environ = os.environ if environ is None else environ
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FleetFileError(
            [Problem(Mark(str(path), 1, 1), "fleet file not found; create it (docs/fleets.md) or pass --fleet FILE")]
        ) from None
    problems: list[Problem] = []
    text = decode(data, str(path), problems)
    node = compose(text, str(path), problems) if text is not None else None
    if node is None and not problems:
        problems.append(Problem(Mark(str(path), 1, 1), "the fleet file is empty; it needs targets, url_template with names, or query"))
    root = Reader(str(path), problems).read(node, FORMAT, "fleet") if node is not None else None
    if problems or not isinstance(root, Obj):
        raise FleetFileError(problems or [Problem(Mark(str(path), 1, 1), "not a fleet file")])
    marks: dict[str, Mark] = {}
    targets = _targets(root, str(path), problems, environ, marks)
    stages = _stages(root, targets, problems)
    for pattern, where in root.get("skip", []):
        if targets and not any(fnmatch.fnmatchcase(t.name, pattern) for t in targets):
            problems.append(Problem(where, f"skip: {pattern!r} matches no target of the fleet; correct it or remove it"))
    read_timeout = None
    if "read_timeout" in root.marks:
        milliseconds = duration_ms(root.get("read_timeout"))
        if not milliseconds:
            problems.append(Problem(root.marks["read_timeout"], "read_timeout is a duration above 0 with its unit, e.g. 500ms, 10s or 1m"))
        else:
            read_timeout = milliseconds / 1000
    if problems:
        raise FleetFileError(problems)
    return Fleet(path, targets, stages, marks, tuple(pattern for pattern, _ in root.get("skip", [])), read_timeout)


def _targets(root: Obj, path: str, problems: list[Problem], environ: Mapping[str, str], marks: dict[str, Mark]) -> list[Target]:
    """The targets, in file order; marks gets the line naming each listed one (a query's row is in
    its control database, not the file)."""
    found: list[tuple[Target, Mark]] = []
    for entry, _ in root.get("targets", []):
        url = expand(entry.get("url"), entry.marks["url"], problems, environ)
        if url is not None:
            labels = tuple(label for label, _ in entry.get("labels", []))
            found.append((Target(entry.get("name"), url, entry.get("role"), labels), entry.marks["name"]))
    template, names = root.get("url_template"), root.get("names", [])
    if template is not None and "{name}" not in template:
        problems.append(Problem(root.marks["url_template"], "url_template needs {name} in it, e.g. postgresql://app@db1/tenant_{name}"))
        template = None
    if names and "url_template" not in root.marks:
        problems.append(
            Problem(root.marks["names"], "names need a url_template to fill, e.g. url_template: postgresql://app@db1/tenant_{name}")
        )
    if template is not None and not names and "query" not in root.marks:
        problems.append(Problem(root.marks["url_template"], "url_template needs names (or a query) to fill it"))
    for name, mark in names if template is not None else ():
        url = expand(template.replace("{name}", name), root.marks["url_template"], problems, environ, template)
        if url is not None:
            found.append((Target(name, url, templated=True), mark))
    query = root.get("query")
    listed = len(found)
    if query is not None:
        found += _queried(query, template, root.marks.get("url_template"), problems, environ)
    if not found and not problems:
        problems.append(Problem(root.mark, "the fleet names no target: add targets, url_template with names, or query"))
    seen: dict[str, Mark] = {}
    out = []
    for index, (target, mark) in enumerate(found):
        if index < listed and target.name not in seen:
            marks[target.name] = mark
        if target.name in seen:
            problems.append(Problem(mark, f"target {target.name!r} is named twice (first at line {seen[target.name].line}); keep one"))
            continue
        seen[target.name] = mark
        out.append(target)
    return out


def _queried(
    query: Obj, template: str | None, template_mark: Mark | None, problems: list[Problem], environ: Mapping[str, str]
) -> list[tuple[Target, Mark]]:
    """The targets a control database's query returns (a problem at the query when it cannot be run)."""
    from sqlalchemy import exc, pool, text

    from ..db import DatabaseURLError, NoDatabase, failure, make_engine

    url = expand(query.get("url"), query.marks["url"], problems, environ)
    if url is None:
        return []
    mark = query.marks["sql"]
    try:
        engine = make_engine(url, poolclass=pool.NullPool, must_exist=True)
        try:
            with engine.connect() as connection:
                rows = [tuple(row) for row in connection.execute(text(query.get("sql")))]
        finally:
            engine.dispose()
    except (DatabaseURLError, NoDatabase) as error:
        problems.append(Problem(query.marks["url"], str(error)))
        return []
    except exc.SQLAlchemyError as error:
        problems.append(Problem(mark, f"the query failed: {scrub(failure(error), url)}"))
        return []
    out = []
    for row in rows:
        if not row or not isinstance(row[0], str) or not row[0].strip():
            problems.append(Problem(mark, f"the query returned a row whose first column is not a name: {row[:1]!r}; select name, url"))
            return []
        at, written = mark, None  # a URL of the row: the query's; the template's: its own line
        if len(row) >= 2 and row[1] is not None:
            raw = str(row[1])
        elif template is not None:
            raw = template.replace("{name}", row[0])
            at, written = template_mark or mark, template
        else:
            problems.append(Problem(mark, f"the query returned {row[0]!r} without a URL: select name, url (or add a url_template)"))
            return []
        role = row[2] if len(row) >= 3 else None
        if role is not None and role not in ROLES:
            problems.append(Problem(mark, f"the query returned role {role!r} for {row[0]!r}; expected one of {', '.join(ROLES)}"))
            return []
        expanded = expand(raw, at, problems, environ, written)
        labels = tuple(label.strip() for label in str(row[3] or "").split(",") if label.strip()) if len(row) >= 4 else ()
        if expanded is not None:
            out.append((Target(row[0], expanded, role, labels, templated=True), mark))
    return out


def _stages(root: Obj, targets: list[Target], problems: list[Problem]) -> list[Stage]:
    entries = root.get("stages", [])
    if not entries:
        return [Stage("all")]
    stages, seen = [], {}
    for index, (entry, mark) in enumerate(entries):
        name = entry.get("name")
        if name in seen:
            problems.append(Problem(entry.marks["name"], f"stage {name!r} is named twice (first at line {seen[name]}); keep one"))
            continue
        patterns = tuple(pattern for pattern, _ in entry.get("targets", []))
        select = tuple(label for label, _ in entry.get("select", []))
        last = index == len(entries) - 1
        if not patterns and not select and not last:
            problems.append(Problem(mark, f"stage {name!r} needs targets or select: only the last stage takes the rest"))
        for pattern, where in entry.get("targets", []):
            if not any(fnmatch.fnmatchcase(t.name, pattern) for t in targets) and targets:
                problems.append(Problem(where, f"{pattern!r} matches no target of the fleet; correct it or remove it"))
        for label, where in entry.get("select", []):
            if targets and not any(label in t.labels for t in targets):
                problems.append(Problem(where, f"select: no target has the label {label!r}; add it to a target's labels or remove it"))
        depends_on = None
        if "depends_on" in entry.marks:
            depends_on = tuple(dependency for dependency, _ in entry.get("depends_on", []))
            for dependency, where in entry.get("depends_on", []):
                if dependency not in seen:
                    earlier = ", ".join(seen) or "none"
                    problems.append(
                        Problem(where, f"depends_on: {dependency!r} is not a stage before {name!r} (the stages before it: {earlier})")
                    )
        seen[name] = mark.line
        bake = 0.0
        if "bake" in entry.marks:
            milliseconds = duration_ms(entry.get("bake"))
            if milliseconds is None:
                problems.append(Problem(entry.marks["bake"], "bake is a duration with its unit, e.g. 30s or 10m"))
            else:
                bake = milliseconds / 1000
        options = {"bake": bake, "pause_after": entry.get("pause_after", False), "check": entry.get("check", False)}
        stage = Stage(name, patterns, entry.get("parallel", 1), entry.get("on_error", "stop"), entry.get("max_failures"), **options)
        stages.append(replace(stage, select=select, depends_on=depends_on))
    return stages


def scrub(text: str, *urls: str) -> str:
    """text with the password of each URL masked, wherever it appears (a driver's message may quote it)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    for url in urls:
        try:
            password = make_url(url).password
        except ArgumentError:
            password = None
        text = text.replace(url, display_url(url))
        if password:
            text = text.replace(str(password), "***")
    return text


def json_schema() -> dict:
    """The JSON Schema of fleet.yaml, generated from FORMAT."""
    schema = field_schema(FORMAT)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://sqltransport-schema.dev/fleet.schema.json"
    return schema
