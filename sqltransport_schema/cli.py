"""sqltransport-schema command line. Exit codes: 0 ok, 1 changes found (compile --check) or drift (check), 2 error."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import engines
from . import topology as topology_module
from .urls import database_url

EXIT_OK, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2


def _config(path: str):
    from alembic.config import Config

    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such Alembic configuration; run from the project folder or pass -c")
    # quiet: compile reports what it wrote itself (and keeps --format json clean)
    return Config(path, cmd_opts=argparse.Namespace(quiet=True, x=None))


def _topology_path(args, config=None) -> Path:
    if args.topology:
        return Path(args.topology)
    if config is not None:
        configured = config.get_main_option("sqltransport.topology")
        if configured:
            return Path(config.config_file_name).parent / configured
    return Path("topology.yaml")


def _emit(args, payload: dict, text_lines: list[str], stream=None) -> None:
    stream = stream or sys.stdout
    if getattr(args, "format", "text") == "json":
        stream.write(json.dumps(payload, indent=2) + "\n")
    else:
        for line in text_lines:
            stream.write(line + "\n")


def _invalid(args, error: topology_module.TopologyError) -> int:
    payload = {"status": "invalid", "problems": [p.to_json() for p in error.problems]}
    lines = [str(p) for p in error.problems] + [f"{len(error.problems)} problem(s); nothing was written."]
    _emit(args, payload, lines, stream=sys.stderr if args.format == "text" else sys.stdout)
    return EXIT_ERROR


def cmd_validate(args) -> int:
    path = _topology_path(args)
    try:
        topo = topology_module.load(path)
    except topology_module.TopologyError as exc:
        return _invalid(args, exc)
    from .schema import blueprint

    tables = blueprint(topo).tables
    _emit(args, {"status": "valid", "file": str(path), "tables": len(tables)}, [f"{path}: valid ({len(tables)} tables)"])
    return EXIT_OK


def cmd_compile(args) -> int:
    from .migrate.compile import CompileError, compile_topology
    from .revisions import SnapshotError

    started = time.perf_counter()
    config = _config(args.config)
    path = _topology_path(args, config)
    try:
        topo = topology_module.load(path)
        plan, written = compile_topology(config, topo, args.message or "topology change", check=args.check)
    except topology_module.TopologyError as exc:
        return _invalid(args, exc)
    except (CompileError, SnapshotError) as exc:
        _emit(args, {"status": "error", "message": str(exc)}, [f"error: {exc}"], stream=sys.stderr)
        return EXIT_ERROR
    changes = plan.summary(limit=10**9)
    payload = {
        "status": "up-to-date" if plan.empty else ("pending" if args.check else "compiled"),
        "topology": str(path),
        "changes": changes,
        "revision": str(written) if written else None,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if plan.empty:
        _emit(args, payload, [f"{path}: nothing to compile; the migrations head matches the topology."])
        return EXIT_OK
    if args.check:
        lines = [f"{path} holds {len(changes)} change(s) not compiled yet:"] + [f"  {c}" for c in changes[:50]]
        if len(changes) > 50:
            lines.append(f"  ... and {len(changes) - 50} more")
        lines.append('Run: sqltransport-schema compile -m "describe the change"')
        _emit(args, payload, lines)
        return EXIT_CHANGES
    lines = [f"wrote {written}"] + [f"  {c}" for c in plan.summary(limit=50)]
    _emit(args, payload, lines)
    return EXIT_OK


def cmd_check(args) -> int:
    """Compare a live database with the topology of the revision it is stamped with."""
    from . import check

    try:
        config = _config(args.config)
        report = check.run(database_url(args.url, config), config)
    except (check.CheckError, FileNotFoundError) as exc:
        if args.format == "json":
            sys.stdout.write(json.dumps({"status": "error", "message": str(exc)}, indent=2) + "\n")
        elif args.format == "markdown":
            sys.stdout.write(f"### sqltransport-schema check: error\n\n{exc}\n")
        else:
            sys.stderr.write(f"error: {exc}\n")
        return EXIT_ERROR
    if args.format == "json":
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(report.markdown())
    else:
        sys.stdout.write("".join(line + "\n" for line in report.text_lines()))
    return EXIT_OK if report.in_sync else EXIT_CHANGES


def cmd_adopt(args) -> int:
    """Take over a database NServiceBus installers made: stamp the revision it is, or plan the upgrade."""
    from . import adopt

    try:
        config = _config(args.config)
        found, engine, action = adopt.run(database_url(args.url, config), config, stamp=not args.dry_run, apply=args.apply)
    except (adopt.AdoptError, FileNotFoundError) as exc:
        _emit(args, {"status": "error", "message": str(exc)}, [f"error: {exc}"], stream=sys.stderr)
        return EXIT_ERROR
    payload = {**found.to_json(engine), "action": action}
    _emit(args, payload, adopt.text_lines(found, engine, action))
    if found.status == "not_adoptable":
        return EXIT_ERROR
    if found.status == "needs_upgrade" and action != "applied":
        return EXIT_CHANGES
    return EXIT_OK


def cmd_statements(args) -> int:
    """Every runtime statement of one engine and version, as a DBA reviews them."""
    from .schema import TableName
    from .versions import profile

    engine = engines.get(args.engine)
    if args.sagas:
        return _print_statements(args, engine, "saga", _saga_statements(args, engine))
    if engine.saga_only:
        raise ValueError(f"{engine.name} holds saga tables only: add --sagas to print the saga statements of the topology")
    prof = profile(args.transport_version)
    reason = engine.unsupported(prof)
    if reason:
        raise ValueError(reason)
    queue = TableName(args.queue, args.schema, args.catalog)
    tables = {}
    if prof.delayed_delivery:
        tables["delayed"] = TableName(f"{args.queue}.{args.delayed_suffix}", args.schema, args.catalog)
    if prof.subscriptions:
        tables["subscriptions"] = TableName(args.subscription_table, args.schema, args.catalog)
    statements = engine.runtime_statements(prof, queue, topics=args.topics, peek_batch_size=args.peek_batch_size, **tables)
    return _print_statements(args, engine, f"transport {prof.version}", statements, {"transport_version": prof.version})


def _saga_statements(args, engine) -> dict:
    """Every saga table's statements, named <table>: <statement>."""
    from .schema import Kind, blueprint

    topo = topology_module.load(_topology_path(args))
    out = {}
    for spec in blueprint(topo).tables:
        if spec.kind is Kind.SAGA:
            for name, statement in engine.saga_statements(spec).items():
                out[f"{spec.name.table}: {name}"] = statement
    if not out:
        raise ValueError(f"{topo.path} declares no sagas")
    return out


def _print_statements(args, engine, what: str, statements: dict, extra: dict | None = None) -> int:
    if args.format == "json":
        payload = {name: {"doc": st.doc, "params": list(st.params), "sql": st.sql} for name, st in statements.items()}
        sys.stdout.write(json.dumps({"engine": engine.name, **(extra or {}), "statements": payload}, indent=2) + "\n")
        return EXIT_OK
    comment = "--"
    sys.stdout.write(f"{comment} sqltransport-schema runtime statements: {engine.name}, {what}\n")
    for name, st in statements.items():
        params = ", ".join("@" + p for p in dict.fromkeys(st.params)) or "none"
        sys.stdout.write(f"\n{comment} {name}: {st.doc}\n{comment} parameters: {params}\n{st.sql.strip()}\n")
        if engine.name == "mssql":
            sys.stdout.write("GO\n")
    return EXIT_OK


def cmd_grants(args) -> int:
    """The GRANT statements a runtime login (or, with --installer, the migration login) needs."""
    from . import grants

    engine = engines.get(args.engine)
    if engine.grants_unsupported:
        sys.stdout.write(engine.grants_unsupported + "\n")
        return EXIT_OK
    config = _config(args.config) if args.topology is None else None
    path = _topology_path(args, config)
    try:
        topo = topology_module.load(path)
    except topology_module.TopologyError as exc:
        return _invalid(args, exc)
    if args.installer:
        if args.endpoint:
            raise ValueError("--endpoint applies to runtime grants, not to --installer")
        plan = grants.installer_plan(topo)
        lines = engine.installer_grants(plan, args.role)
        what = "installer/migration login"
    else:
        plan = grants.runtime_plan(topo, args.endpoint)
        lines = engine.runtime_grants(plan, args.role)
        what = f"runtime login of endpoint {args.endpoint}" if args.endpoint else "runtime login (every endpoint)"
    header = f"-- sqltransport-schema grants: {engine.name}, {what}, transport {topo.transport_version}, from {path}"
    sys.stdout.write("".join(line + "\n" for line in [header, *lines]))
    return EXIT_OK


def cmd_script(args) -> int:
    """The deployment script a DBA reviews: Alembic's offline output, safe to re-run."""
    from . import scripts

    config = _config(args.config)
    path = _topology_path(args, config)
    if args.split:
        folder = Path(args.split)
        files = scripts.render_split(config, args.engine, args.from_rev, args.to_rev, path)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
        _emit(args, {"status": "written", "files": [str(folder / n) for n in files]}, [f"wrote {folder / n}" for n in files])
        return EXIT_OK
    text = scripts.render(config, args.engine, args.from_rev, args.to_rev, path)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        sys.stderr.write(f"wrote {args.output}\n")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_json_schema(args) -> int:
    text = json.dumps(topology_module.json_schema(), indent=2, ensure_ascii=False) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sqltransport-schema", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, with_config=True):
        p.add_argument("--topology", "-t", help="topology file (default: sqltransport.topology in alembic.ini, else ./topology.yaml)")
        p.add_argument("--format", choices=("text", "json"), default="text", help="output for people or for CI")
        if with_config:
            p.add_argument("--config", "-c", default="alembic.ini", help="Alembic configuration (default: alembic.ini)")

    p = sub.add_parser("compile", help="write a revision for the changes in topology.yaml")
    common(p)
    p.add_argument("-m", "--message", help="revision message")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when topology.yaml holds uncompiled changes")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("validate", help="validate topology.yaml and report every problem")
    common(p, with_config=False)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("check", help="compare a live database with the topology its migrations record")
    p.add_argument("--url", help="database URL (default: SQLTRANSPORT_URL, else sqlalchemy.url in alembic.ini)")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text", help="output for people, CI, or a pull-request comment")
    p.add_argument("--config", "-c", default="alembic.ini", help="Alembic configuration (default: alembic.ini)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("adopt", help="take over a database NServiceBus installers made: stamp it, or print the upgrade plan")
    p.add_argument("--url", help="database URL (default: SQLTRANSPORT_URL, else sqlalchemy.url in alembic.ini)")
    p.add_argument("--dry-run", action="store_true", help="examine only; stamp nothing")
    p.add_argument("--apply", action="store_true", help="when the tables need upgrading, run the plan and stamp the head")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output for people or for CI")
    p.add_argument("--config", "-c", default="alembic.ini", help="Alembic configuration (default: alembic.ini)")
    p.set_defaults(func=cmd_adopt)

    p = sub.add_parser("statements", help="print every runtime statement of an engine and transport version")
    p.add_argument("--engine", required=True, choices=tuple(engines.ENGINES))
    p.add_argument("--sagas", action="store_true", help="print the statements of every saga table in the topology instead")
    p.add_argument("--topology", help="topology file for --sagas (default: topology.yaml)")
    p.add_argument("--transport-version", default="9.1")
    p.add_argument("--queue", default="MyQueue", help="queue table the statements name (default: MyQueue)")
    p.add_argument("--schema", help="schema of the tables (default: the engine's default)")
    p.add_argument("--catalog", help="catalog (SQL Server three-part names)")
    p.add_argument("--subscription-table", default="SubscriptionRouting")
    p.add_argument("--delayed-suffix", default="Delayed")
    p.add_argument("--topics", type=int, default=1, help="how many topics find_subscribers takes")
    p.add_argument("--peek-batch-size", type=int, default=100, help="TOP n of the peek statement (SQL Server 4.1.2-6.0)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_statements)

    p = sub.add_parser("grants", help="print the GRANT statements a runtime (or installer) login needs")
    p.add_argument("--engine", required=True, choices=tuple(engines.ENGINES))
    p.add_argument("--role", required=True, help="the login/role to grant to")
    p.add_argument("--endpoint", help="grant only what this endpoint needs (receive its own queues, send to every queue)")
    p.add_argument("--installer", action="store_true", help="what the installer/migration login needs instead")
    p.add_argument("--topology", "-t", help="topology file (default: sqltransport.topology in alembic.ini, else ./topology.yaml)")
    p.add_argument("--config", "-c", default="alembic.ini", help="Alembic configuration (default: alembic.ini)")
    p.set_defaults(func=cmd_grants, format="text")

    p = sub.add_parser("script", help="write the deployment script (SQL Server or PostgreSQL) a DBA reviews, safe to re-run")
    p.add_argument("--engine", required=True, choices=("mssql", "postgresql"))
    p.add_argument("--from", dest="from_rev", help="revision the database is at (default: an empty database)")
    p.add_argument("--to", dest="to_rev", help="revision to upgrade to (default: head)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.add_argument("--split", metavar="DIR", help="write one file per endpoint into DIR (00-shared.sql first, 99-alembic-version.sql last)")
    p.add_argument("--topology", "-t", help="topology file whose sha256 the header records (default: sqltransport.topology in alembic.ini, else ./topology.yaml)")
    p.add_argument("--config", "-c", default="alembic.ini", help="Alembic configuration (default: alembic.ini)")
    p.set_defaults(func=cmd_script, format="text")

    from .pipeline.cli import add_parser as add_pipeline_parser  # pipeline move/plan/run/archive/replay/backfill

    add_pipeline_parser(sub)

    p = sub.add_parser("json-schema", help="print the JSON Schema of topology.yaml")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_json_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
