"""`sqltransport-schema fleet ...`: upgrade, status, script, json-schema over the databases a
fleet file names (the work is in fleet/; this parses and prints). Progress goes to stderr, the
report to stdout (`--format json` or `markdown` for CI)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import shlex
import sys
from pathlib import Path

from .. import errors
from . import github
from .options import DEFAULT_CONFIG, add_command, add_options, formats, load_config
from .output import EXIT_CHANGES, EXIT_OK, describe, emit, emit_product, emit_status


def _fleet_path(args: argparse.Namespace) -> Path:
    """--fleet, else fleet.yaml beside the Alembic configuration."""
    from ..fleet.file import DEFAULT_FILE

    return Path(args.fleet) if args.fleet else Path(args.config).parent / DEFAULT_FILE


def _x(values: list[str]) -> tuple[str, ...]:
    """-x KEY=VALUE options for every target; a URL is the fleet file's to give."""
    for item in values:
        key, sep, _ = item.partition("=")
        if not sep:
            raise errors.UsageError(f"-x {item}: expected KEY=VALUE, e.g. -x discard=Sales.host-b")
        if key == "url":
            raise errors.UsageError("-x url=...: a fleet's URLs are its targets' (fleet.yaml); use --only NAME for one target")
        if key == "role":
            raise errors.UsageError("-x role=...: a target's role is the fleet file's (role: tenant); use --only NAME for one target")
    return tuple(values)


def _words(args: argparse.Namespace, *extra: str, x: bool = True) -> list[str]:
    """The fleet command as typed again (the resume command; a refusal's rerun, whose -x options
    the refusal writes itself: x=False): its options, never a URL."""
    words = ["sqltransport-schema", "fleet", "upgrade"]
    if args.config != DEFAULT_CONFIG:
        words += ["-c", args.config]
    if args.fleet:
        words += ["--fleet", args.fleet]
    if getattr(args, "journal", None):
        words += ["--journal", args.journal]
    if args.to_rev:
        words += ["--to", args.to_rev]
    if args.stage:
        words += ["--stage", args.stage]
    if getattr(args, "create_missing", False):
        words.append("--create-missing")
    if getattr(args, "check_between_stages", False):
        words.append("--check-between-stages")
    for pattern in getattr(args, "exclude", None) or ():
        words += ["--exclude", pattern]
    if args.parallel:
        words += ["--parallel", str(args.parallel)]
    if getattr(args, "master", None):
        words += ["--master", args.master]
    for item in getattr(args, "x", None) or () if x else ():
        words += ["-x", item]
    return [*words, *extra]


def _load(args: argparse.Namespace, settings_kind: str):  # noqa: ANN202 - (fleet, staged, migrations)
    from ..fleet import file
    from ..fleet.work import Migrations

    load_config(args.config)  # a missing alembic.ini is named before anything else
    fleet = file.load(_fleet_path(args))
    settings = _settings(args, settings_kind, fleet.read_timeout)
    migrations = Migrations(settings)
    fleet = fleet.placed(tenant_tables(migrations.script))
    stage, only = getattr(args, "stage", None), getattr(args, "only", None)
    if stage is not None and stage not in fleet.stage_names():
        raise errors.UsageError(f"--stage {stage}: the fleet has no such stage; its stages: {', '.join(fleet.stage_names())}")
    exclude = getattr(args, "exclude", None)
    for pattern in exclude or ():
        if not any(fnmatch.fnmatchcase(t.name, pattern) for t in fleet.targets):
            raise errors.UsageError(f"--exclude {pattern}: no target of the fleet matches")
    staged = fleet.staged(only, stage, exclude)
    if only and not any(targets for _, targets in staged):
        raise errors.UsageError(f"--only {' '.join(only)}: no target of the fleet matches")
    aside = fleet.set_aside(exclude)
    if aside:  # said on every run, so a target set aside is never forgotten there
        sys.stderr.write(f"set aside (--exclude, skip:): {', '.join(aside)}\n")
    return fleet, staged, migrations


def targets(args: argparse.Namespace) -> list:
    """The fleet file's targets in file order, each with its role settled, as --only, --exclude and
    --stage choose them where the command has them (outbox cleanup --fleet, status --fleet)."""
    return bounded_targets(args)[0]


def bounded_targets(args: argparse.Namespace) -> tuple[list, float]:
    """targets(args), and the seconds each target's read may wait: --read-timeout, else the fleet file's, else the default."""
    _, staged, migrations = _load(args, "status")
    return [target for _, chosen in staged for target in chosen], migrations.settings.read_timeout


def _settings(args: argparse.Namespace, settings_kind: str, file_timeout: float | None = None):  # noqa: ANN202 - fleet.work.Settings
    from ..fleet.work import Settings
    from .options import read_timeout

    return Settings(
        read_timeout=read_timeout(args, file_timeout),
        config=args.config,
        to_rev=getattr(args, "to_rev", None) or "head",
        x=_x(getattr(args, "x", []) or []),
        dry_run=getattr(args, "dry_run", False),
        create_missing=getattr(args, "create_missing", False),
        rerun=tuple(_words(args, x=False)) if settings_kind == "upgrade" else (),
        check=getattr(args, "check", False),
        describe=describe,
    )


def tenant_tables(script) -> bool:  # noqa: ANN001 - an Alembic ScriptDirectory
    """Whether the history's head places tables in tenant databases (a fleet's templated targets are then tenants)."""
    from ..revisions import head_blueprint

    blueprint = head_blueprint(script)[1]
    return blueprint is not None and any(spec.tenant for spec in blueprint.tables)


def cmd_upgrade(args: argparse.Namespace) -> int:
    """bring every database of the fleet to a revision, stage by stage, in parallel, resumable

    Upgrade each target of the fleet file to --to (the head by default) with the project's own
    migrations, locks, refusals and -x consent options, as `alembic upgrade` on one database: stage
    after stage (a stage starts once the one before it succeeded), each stage's targets in parallel
    worker processes. A target already at the revision costs one read of its alembic_version. Every
    attempt is journalled; a run that stopped, failed or was killed is finished by running it again.
    Exit 0 every target reached the revision, 1 some failed or were not attempted (listed, with the
    command that resumes), 2 a usage error.
    """
    from ..fleet import journal as journals
    from ..fleet import report, runner

    fleet, staged, migrations = _load(args, "upgrade")
    revision = ",".join(migrations.destination) or None
    journal = None
    if not args.dry_run:
        journal = journals.Journal(Path(args.journal) if args.journal else journals.default_path(fleet.path))
    total = sum(len(targets) for _, targets in staged)
    progress = report.Progress(total, quiet=args.format != "text" and not sys.stderr.isatty())
    batch = None
    if args.master:
        from ..fleet.spark import batches

        batch = batches(args, migrations, journal)
    try:
        reports = runner.upgrade(
            fleet,
            migrations,
            staged,
            journal,
            shlex.join(_words(args)),
            runner.RunSettings(args.parallel, progress.update, progress.say, args.check_between_stages),
            batch=batch,
        )
    finally:
        progress.close()
        if journal is not None:
            journal.close()
        if batch is not None:
            batch.cleanup()
    left = list(runner.incomplete(reports)) or [r.stage.name for r in reports if r.status == runner.STOPPED]
    resume = shlex.join(_words(args)) if left and not args.dry_run else None
    if args.format == "json":
        sys.stdout.write(json.dumps(report.upgrade_json(reports, revision, resume, args.dry_run), indent=2) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(report.upgrade_markdown(reports, revision, resume))
    else:
        lines = _upgrade_lines(args, reports, revision, resume, total, bool(left))
        if args.format == github.FORMAT:  # the lines in the log, the markdown report in the job summary
            github.report([], lines, report.upgrade_markdown(reports, revision, resume))
        else:
            sys.stdout.write("".join(line + "\n" for line in lines))
    return EXIT_CHANGES if left else EXIT_OK


def _upgrade_lines(args: argparse.Namespace, reports: list, revision: str | None, resume: str | None, total: int, left: bool) -> list[str]:
    """fleet upgrade's report for people: each stage's summary, then where every target is."""
    from ..fleet import report, runner

    lines = report.summary_lines(reports, resume)
    verb = "would reach" if args.dry_run else "reached"
    past = sum(r.outcome == runner.PAST for stage in reports for r in stage.results.values())
    if not left and past:  # never "reached" of a target left past the revision
        lines.append(f"every target {verb} {revision or '<base>'} or is past it ({total} target(s), {past} past it, not downgraded)")
    elif not left:
        lines.append(f"every target {verb} {revision or '<base>'} ({total} target(s))")
    return lines


def cmd_status(args: argparse.Namespace) -> int:
    """which database of the fleet is at which revision (and, with --check, which drifted)

    Read each target's revision (one connection and one read of alembic_version) and say whether it
    is at the head or how many revisions behind; --check adds check's drift summary (missing or
    extra tables, columns, indexes). Exit 0 when every target is at the head (and in sync), 1 when
    any is behind, drifted or unreachable (listed), 2 on a usage error.
    """
    from ..fleet import journal as journals
    from ..fleet import status
    from ..fleet.pool import Pool
    from .serving import serve_options

    args.to_rev = None
    listen = serve_options(args)
    fleet, staged, migrations = _load(args, "status")
    targets = [t for _, ts in staged for t in ts]
    parallel = args.parallel or max(s.parallel for s, _ in staged)
    with Pool(migrations, "status") as pool:
        if listen is not None:
            return _serve(pool, staged, parallel, fleet.path, *listen)
        results = {r.target: r for r in pool.run(targets, parallel, lambda: False)}
    rows = [status.Row(t, results[t.name]) for t in targets]
    head = ",".join(migrations.destination) or None
    gone = journals.removed(Path(args.journal) if args.journal else journals.default_path(fleet.path), {t.name for t in fleet.targets})
    lines = status.text_lines(rows, head) + [entry.line() for entry in gone]
    if args.format == "markdown":
        sys.stdout.write(status.markdown(rows, head, args.check))
    elif args.format == github.FORMAT:
        github.report(_attention(rows, head, fleet.marks), lines, status.markdown(rows, head, args.check))
    else:
        emit(args, {**status.to_json(rows, head), "removed": [entry.to_json() for entry in gone]}, lines)
    return EXIT_OK if all(row.ok for row in rows) else EXIT_CHANGES


def _serve(pool, staged: list, parallel: int, path: Path, host: str, port: int, min_interval: float) -> int:  # noqa: ANN001 - a fleet Pool
    """fleet status --serve: each target's reachability and revision as Prometheus families, until SIGTERM or Ctrl-C."""
    from ..fleet.exporter import FleetCollector
    from .serving import serve_collector

    collector = FleetCollector(pool, staged, parallel, min_interval, log=sys.stderr.write)
    return serve_collector(collector, host, port, f"{sum(len(ts) for _, ts in staged)} target(s) of {path}")


def _attention(rows: list, head: str | None, marks: dict) -> list[github.Annotation]:
    """Each target behind, drifted or unreachable as an annotation on the fleet file's line that
    names it (a target from a query: at no file)."""
    from ..fleet import status

    return [
        github.Annotation.at(marks.get(row.target.name), status.describe(row, head), title=f"sqltransport-schema fleet status: {row.state}")
        for row in rows
        if not row.ok
    ]


def cmd_script(args: argparse.Namespace) -> int:
    """write the deployment script of each target, named for it, for a DBA to review

    For each target of the fleet, read its revision (or take --from's) and write the script that
    takes it to --to (the head by default) into FOLDER/<target>.sql, its header naming the target
    (its URL with the password masked); targets at the revision get none. The scripts are
    `script`'s, in each target's engine and role (a tenant database's: the tenant tables): safe to
    run again. --per-stage writes FOLDER/<stage>.sql instead, for SQL Server targets that are
    catalogs of one server: each target's section after a USE of its catalog.
    """
    from ..fleet import scripts

    args.dry_run = True
    fleet, staged, migrations = _load(args, "script")
    if args.per_stage:
        scripts.check_per_stage([(s, ts) for s, ts in staged if ts])
    targets = [t for _, ts in staged for t in ts]
    planned = scripts.plan(migrations, targets, args.from_rev)
    folder = Path(args.out_dir)
    written = scripts.write_per_stage(planned, staged, folder) if args.per_stage else scripts.write_per_target(planned, folder)
    lines = [f"wrote {path}" for path in written] + [f"at revision {name}: no script" for name in planned.at_revision]
    lines += [f"failed {name}: {error}" for name, error in planned.failed]
    payload = {
        "status": "failed" if planned.failed else "written",
        "files": [str(p) for p in written],
        "at_revision": planned.at_revision,
        "failed": [{"name": n, "error": e} for n, e in planned.failed],
    }
    emit_status(args, payload, lines)
    return EXIT_CHANGES if planned.failed else EXIT_OK


def cmd_json_schema(args: argparse.Namespace) -> int:
    """print the JSON Schema of fleet.yaml (for editors)

    Print the JSON Schema of the fleet file (fleet.schema.json), generated from the same declaration
    that validates it, for editors' completion and checks.
    """
    from ..fleet.file import json_schema

    return emit_product(args.output, json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n")


def _common(p: argparse.ArgumentParser) -> None:
    add_options(p, "fleet", "config", "only", "exclude", "stage", "parallel", "read_timeout")


def _add_upgrade(fsub: argparse._SubParsersAction) -> None:
    p = add_command(fsub, "upgrade", cmd_upgrade, "sqltransport-schema fleet upgrade --stage canary --parallel 4")
    _common(p)
    add_options(p, "to_rev", "dry_run")
    p.add_argument(
        "-x",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an alembic -x option for every target (discard=..., drop_protected=..., lock_timeout=..., if_busy=skip); "
        "one target's consent: --only NAME -x discard=...",
    )
    p.add_argument(
        "--create-missing",
        action="store_true",
        help="make a target's database first when it is not there (PostgreSQL: CREATE DATABASE from the server's "
        "postgres database; SQLite: the file's folder)",
    )
    p.add_argument(
        "--check-between-stages",
        action="store_true",
        help="before a stage starts, `fleet status --check` of the stages it follows must be clean (at the revision, "
        "in sync), else the run stops there (a stage's check: true in the fleet file does so for that stage)",
    )
    add_options(p, "journal")
    add_options(p, "format", format=formats("report"))
    spark = p.add_argument_group("Spark")
    master = {"note": "run the targets as Spark tasks there", "shown": "default: no Spark, the targets run in worker processes"}
    add_options(spark, "master", "conf", master=master)


def _add_status(fsub: argparse._SubParsersAction) -> None:
    p = add_command(fsub, "status", cmd_status, "sqltransport-schema fleet status --check --format markdown")
    _common(p)
    add_options(p, "check", check={"note": "drift, in check's summary per target"})
    add_options(p, "journal", journal={"note": "the targets it holds that the fleet file no longer names are listed"})
    add_options(p, "format", format=formats("report"))
    add_options(p, "serve", "min_interval")


def _add_script(fsub: argparse._SubParsersAction) -> None:
    p = add_command(fsub, "script", cmd_script, "sqltransport-schema fleet script --out-dir scripts/ --per-stage --from base")
    _common(p)
    add_options(p, "from_rev", "to_rev", from_rev={"note": "every target, none read (base: empty databases)", "shown": "default: its own"})
    # -o/--output is a file elsewhere: the folder is --out-dir
    add_options(p, "out_dir", out_dir={"required": True, "note": "one <target>.sql each", "renamed_from": ("-o", "--output")})
    p.add_argument(
        "--per-stage",
        action="store_true",
        help="one <stage>.sql per stage instead, for SQL Server targets that are catalogs of one server (a USE of each)",
    )
    add_options(p, "format")


def _add_json_schema(fsub: argparse._SubParsersAction) -> None:
    p = add_command(fsub, "json-schema", cmd_json_schema, "sqltransport-schema fleet json-schema -o fleet.schema.json")
    add_options(p, "output")


def add_fleet(sub: argparse._SubParsersAction) -> None:
    """many databases from one history: upgrade, status, script (fleet.yaml)

    Run the migrations over a fleet of databases (a database per tenant, environment or region)
    named in fleet.yaml beside alembic.ini: upgrade them in stages and in parallel, resumably
    (journalled), read which is at which revision and which drifted, write each one's script
    (docs/fleets.md).
    """
    fleet = add_command(sub, "fleet", add_fleet, "sqltransport-schema fleet status", group=True)
    fsub = fleet.add_subparsers(dest="fleet_command", required=True)
    for add in (_add_upgrade, _add_status, _add_script, _add_json_schema):
        add(fsub)


PARSERS = {"fleet": add_fleet}
