"""fleet script: the reviewed deployment script of each target (scripts.render), named for it, in
the target's role (a tenant database's script holds the tenant tables alone); or, for SQL Server
targets that are catalogs of one server, one script per stage (a USE of each catalog before its
target's section).

Targets at the same revision, on the same engine and in the same role get the same script, so each
is rendered once; each file names its target (the URL's password masked). Where a target is comes
from its own alembic_version, or from --from (every target taken to be there, none read: for a DBA
without access to the databases, or a SQL Server whose driver this machine lacks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import errors
from ..schema import SHARED, TENANT
from .file import Stage, Target
from .work import Migrations, describe

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

PER_STAGE_ENGINE = "mssql"  # the engine whose catalogs one script can move between (USE)


@dataclass(frozen=True)
class TargetScript:
    target: Target
    engine: str
    stamps: tuple[str, ...]  # where the target is (read, or --from)
    destination: tuple[str, ...]
    text: str  # the rendered script, shared by the targets at the same place

    @property
    def head(self) -> str:
        """The comment line that names the target: its name, URL (password masked), role, revisions."""
        role = f", role {self.target.role}" if self.target.role == TENANT else ""
        to_rev = ",".join(self.destination) or "base"
        return f"-- target: {self.target.name} ({self.target.shown_url}){role}, from {','.join(self.stamps) or '<base>'} to {to_rev}\n"


@dataclass
class Planned:
    scripts: list[TargetScript]
    at_revision: list[str]  # names of targets with nothing to run
    failed: list[tuple[str, str]]  # (name, error line)


def assumed_stamps(migrations: Migrations, from_rev: str) -> tuple[str, ...]:
    """The revisions a database at --from holds (base: none)."""
    if from_rev == "base":
        return ()
    try:
        revisions = migrations.script.get_revisions(from_rev)
    except Exception as error:  # noqa: BLE001 - alembic's resolution errors: one line, exit 2
        raise errors.UsageError(f"--from {from_rev}: {error}") from None
    if not revisions or any(r is None for r in revisions):
        raise errors.UsageError(f"--from {from_rev}: the migrations hold no such revision")
    return tuple(sorted(r.revision for r in revisions if r is not None))


def engine_of(target: Target) -> str:
    from sqlalchemy.engine import make_url

    from ..db import normalise_url
    from ..engines import for_sqlalchemy

    return for_sqlalchemy(make_url(normalise_url(target.url)).get_backend_name()).name


def plan(migrations: Migrations, targets: list[Target], from_rev: str | None = None) -> Planned:
    """Each target's script (none for a target at the revision); a target that cannot be read or
    rendered is its own failure line."""
    from .. import scripts

    configured = migrations.config.get_main_option("sqltransport.topology")
    topology = Path(migrations.config.config_file_name).parent / configured if configured else Path("topology.yaml")
    assumed = assumed_stamps(migrations, from_rev) if from_rev is not None else None
    rendered: dict[tuple[str, tuple[str, ...], str], str] = {}
    planned = Planned([], [], [])
    for target in targets:
        try:
            stamps = assumed if assumed is not None else migrations.stamps(target.url)
            if stamps == migrations.destination:
                planned.at_revision.append(target.name)
                continue
            engine, role = engine_of(target), target.role or SHARED
            if engine not in scripts.ENGINES:
                planned.failed.append((target.name, f"a {engine} database: scripts are for {' and '.join(scripts.ENGINES)} databases"))
                continue
            key = (engine, stamps, role)
            if key not in rendered:
                request = scripts.ScriptRequest(engine, ",".join(stamps) or None, migrations.settings.to_rev, topology, role=role)
                rendered[key] = scripts.render(migrations.config, request)
            planned.scripts.append(TargetScript(target, engine, stamps, migrations.destination, rendered[key]))
        except Exception as error:  # noqa: BLE001 - one target's failure is its line
            planned.failed.append((target.name, describe(error, target, migrations.settings.describe)))
    return planned


def write_per_target(planned: Planned, folder: Path) -> list[Path]:
    """FOLDER/<target>.sql each, in its engine's file encoding (SQL Server's with a byte-order mark, as `script -o`)."""
    from .. import engines

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for each in planned.scripts:
        path = folder / f"{each.target.name}.sql"
        path.write_text(each.head + each.text, encoding=engines.get(each.engine).script.FILE_ENCODING)
        written.append(path)
    return written


# --------------------------------------------------------------------------- one script per stage
def _url(target: Target) -> URL:
    from sqlalchemy.engine import make_url

    from ..db import normalise_url

    return make_url(normalise_url(target.url))


def _server(url: URL) -> str:
    return f"{url.host or 'localhost'}{f':{url.port}' if url.port else ''}"


def check_per_stage(staged: list[tuple[Stage, list[Target]]]) -> None:
    """--per-stage takes SQL Server targets that name their catalog, each stage's on one server
    (a usage error otherwise, before any database is read)."""
    for stage, targets in staged:
        servers: dict[str, str] = {}
        for target in targets:
            engine = engine_of(target)
            if engine != PER_STAGE_ENGINE:
                raise errors.UsageError(
                    f"--per-stage: target {target.name} is a {engine} database; a stage's script is for SQL Server catalogs "
                    "on one server (without --per-stage each target gets its own script)"
                )
            url = _url(target)
            if not url.database:
                raise errors.UsageError(f"--per-stage: target {target.name}'s URL ({target.shown_url}) names no catalog (its database)")
            servers.setdefault(_server(url), target.name)
        if len(servers) > 1:
            named = ", ".join(f"{server} ({name})" for server, name in servers.items())
            raise errors.UsageError(
                f"--per-stage: stage {stage.name}'s targets are on more than one server: {named}; a stage's script runs on one server"
            )


def stage_script(stage: Stage, scripts: list[TargetScript]) -> str:
    """The stage's targets' scripts, each after a USE of its catalog, in one file that stops at its
    first error as each of them does (so the batch that turns execution back on is the file's last,
    not each section's): safe to run again as a whole, each section being its target's own script."""
    from .. import engines

    script = engines.get(PER_STAGE_ENGINE).script
    closing = script.CLOSING or ""
    first = _url(scripts[0].target)
    lines = [
        f"sqltransport-schema deployment script of stage {stage.name}: {len(scripts)} target(s), catalogs on {_server(first)}",
        "Each section is its target's own script (its header below) after a USE of the target's catalog.",
        "Safe to re-run as a whole. It stops at its first error: the sections after it do not run; "
        f"run it again once that target is fixed (the sections done do nothing). Run it with {script.RUN_STOPPING}.",
        "targets: " + ", ".join(s.target.name for s in scripts),
    ]
    sections = []
    for each in scripts:
        body = each.text.removesuffix(closing) if closing and each.text.endswith(closing) else each.text
        catalog = _url(each.target).database or ""
        sections.append("\n" + each.head + script.use_catalog(catalog, f"sqltransport-schema: target {each.target.name}") + body)
    return "".join(f"-- {line}\n" for line in lines) + "".join(sections) + closing


def write_per_stage(planned: Planned, staged: list[tuple[Stage, list[Target]]], folder: Path) -> list[Path]:
    """FOLDER/<stage>.sql for each stage with a target to script."""
    from .. import engines

    folder.mkdir(parents=True, exist_ok=True)
    by_name = {s.target.name: s for s in planned.scripts}
    written = []
    for stage, targets in staged:
        mine = [by_name[t.name] for t in targets if t.name in by_name]
        if mine:
            path = folder / f"{stage.name}.sql"
            path.write_text(stage_script(stage, mine), encoding=engines.get(PER_STAGE_ENGINE).script.FILE_ENCODING)
            written.append(path)
    return written
