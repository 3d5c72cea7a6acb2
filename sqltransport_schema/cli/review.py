"""What a DBA reviews: the runtime statements (statements), the GRANTs a login needs (grants),
the deployment script (script). listings.py, grants.py and scripts.py derive them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .. import engines, errors
from ..defaults import (
    DEFAULT_DELAYED_SUFFIX,
    DEFAULT_PEEK_BATCH_SIZE,
    DEFAULT_SUBSCRIPTION_TABLE,
    DEFAULT_TIMEOUT,
    DEFAULT_TOPICS,
    EXAMPLE_QUEUE,
)
from ..schema import TableName
from ..versions import LATEST
from .options import add_command, add_options, add_renamed, load_config, topology_path
from .output import EXIT_OK, emit_invalid, emit_product, emit_status


def cmd_statements(args: argparse.Namespace) -> int:
    """print every runtime statement of an engine and transport version

    Print every statement the transport runs at runtime (send, receive, peek, purge, delayed moves,
    subscriptions) for one engine and transport version, with the parameters each binds, as a DBA
    reviews them before granting a login; --sagas prints the statements of the topology's saga
    tables instead, --outbox those of its outbox tables (store, get, set as dispatched, cleanup).
    """
    from .. import listings
    from .. import topology as topology_module

    engine = engines.get(args.engine)
    if args.sagas:
        statements = listings.saga_statements(engine, topology_module.load(topology_path(args)))
        return _print_statements(args, engine, "saga", statements)
    if args.outbox:
        statements = listings.outbox_statements(engine, topology_module.load(topology_path(args)))
        return _print_statements(args, engine, "outbox", statements)
    prof, statements = listings.runtime_statements(
        engine,
        args.transport_version,
        TableName(args.queue, args.schema, args.catalog),
        subscription_table=args.subscription_table,
        delayed_suffix=args.delayed_suffix,
        topics=args.topics,
        peek_batch_size=args.peek_batch_size,
    )
    return _print_statements(args, engine, f"transport {prof.version}", statements, {"transport_version": prof.version})


def _print_statements(args: argparse.Namespace, engine: engines.Dialect, what: str, statements: dict, extra: dict | None = None) -> int:
    if args.format == "json":
        payload = {name: {"doc": st.doc, "params": list(st.params), "sql": st.sql} for name, st in statements.items()}
        sys.stdout.write(json.dumps({"engine": engine.name, **(extra or {}), "statements": payload}, indent=2) + "\n")
        return EXIT_OK
    comment = "--"
    sys.stdout.write(f"{comment} sqltransport-schema runtime statements: {engine.name}, {what}\n")
    for name, st in statements.items():
        params = ", ".join("@" + p for p in dict.fromkeys(st.params)) or "none"
        sys.stdout.write(f"\n{comment} {name}: {st.doc}\n{comment} parameters: {params}\n{st.sql.strip()}\n")
        if engine.batch_separator:
            sys.stdout.write(engine.batch_separator + "\n")
    return EXIT_OK


def cmd_grants(args: argparse.Namespace) -> int:
    """print the GRANT statements a runtime (or installer) login needs

    Print the GRANT statements a runtime login needs on the topology's tables (with --endpoint, only
    what that endpoint needs: receive from its own queues, send to every queue), or with --installer
    what the login that runs the migrations needs, or with --monitor what a monitoring login needs
    (status in every format, check: reads only, nothing that writes). Nothing is
    granted: a DBA reviews and runs them.
    """
    from .. import grants
    from .. import topology as topology_module

    engine = engines.get(args.engine)
    unsupported = (args.monitor and engine.grants.unsupported_monitor) or engine.grants.unsupported
    if unsupported:
        sys.stdout.write(unsupported + "\n")
        return EXIT_OK
    config = load_config(args.config) if args.topology is None else None
    path = topology_path(args, config)
    try:
        topo = topology_module.load(path)
    except topology_module.TopologyError as exc:
        return emit_invalid(args, exc)
    if args.installer and args.monitor:
        raise errors.UsageError("--installer and --monitor are two different logins: choose one")
    if args.monitor:
        if args.endpoint:
            raise errors.UsageError("--endpoint applies to runtime grants, not to --monitor (it reads every table)")
        lines = engine.grants.monitor(grants.monitor_plan(topo, args.db_role), args.login)
        what = "monitoring login (status, check: read only)"
    elif args.installer:
        if args.endpoint:
            raise errors.UsageError("--endpoint applies to runtime grants, not to --installer")
        lines = engine.grants.installer(grants.installer_plan(topo, args.db_role), args.login)
        what = "installer/migration login"
    else:
        lines = engine.grants.runtime(grants.runtime_plan(topo, args.endpoint, args.db_role), args.login)
        what = f"runtime login of endpoint {args.endpoint}" if args.endpoint else "runtime login (every endpoint)"
    where = ", in each tenant database" if args.db_role == "tenant" else ""
    header = f"-- sqltransport-schema grants: {engine.name}, {what}{where}, transport {topo.transport_version}, from {path}"
    sys.stdout.write("".join(line + "\n" for line in [header, *lines]))
    return EXIT_OK


def cmd_script(args: argparse.Namespace) -> int:
    """write the deployment script (SQL Server or PostgreSQL) a DBA reviews, safe to re-run

    Write the SQL script that upgrades a database from one revision to another (an empty database to
    the head by default), as Alembic's offline mode renders it with a header naming what it does,
    which tables it changes in place and how long each statement waits for its lock. The script is
    safe to run again; --split writes one file per endpoint.
    """
    from .. import scripts

    config = load_config(args.config)
    path = topology_path(args, config)
    request = scripts.ScriptRequest(args.engine, args.from_rev, args.to_rev, path, args.lock_timeout, args.url, args.db_role)
    encoding = engines.get(args.engine).script.FILE_ENCODING
    if args.split:
        folder = Path(args.split)
        files = scripts.render_split(config, request)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text, encoding=encoding)
        emit_status(args, {"status": "written", "files": [str(folder / n) for n in files]}, [f"wrote {folder / n}" for n in files])
        return EXIT_OK
    return emit_product(args.output, scripts.render(config, request), encoding)


def _duration(text: str) -> str:
    from ..migrate.locks import parse_duration

    parse_duration(text, "lock_timeout")  # a ValueError names the forms it takes
    return text


def add_statements(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "statements", cmd_statements, "sqltransport-schema statements --engine postgresql --transport-version 8.1 --queue Sales"
    )
    add_options(p, "engine", engine={"note": "whose SQL to print"})
    p.add_argument("--sagas", action="store_true", help="print the statements of every saga table in the topology instead")
    p.add_argument("--outbox", action="store_true", help="print the statements of every outbox table in the topology instead")
    add_options(p, "topology", topology={"flags": ("--topology",), "note": "for --sagas or --outbox", "shown": "default: topology.yaml"})
    p.add_argument("--transport-version", default=LATEST, help="the transport release whose statements to print (default: %(default)s)")
    p.add_argument("--queue", default=EXAMPLE_QUEUE, help="queue table the statements name (default: %(default)s)")
    p.add_argument("--schema", help="schema of the tables (default: the engine's default)")
    p.add_argument("--catalog", help="catalog (SQL Server three-part names)")
    p.add_argument(
        "--subscription-table", default=DEFAULT_SUBSCRIPTION_TABLE, help="the subscription table the statements name (default: %(default)s)"
    )
    p.add_argument(
        "--delayed-suffix", default=DEFAULT_DELAYED_SUFFIX, help="suffix of the queue's delayed-delivery table (default: %(default)s)"
    )
    p.add_argument("--topics", type=int, default=DEFAULT_TOPICS, help="how many topics find_subscribers takes (default: %(default)s)")
    p.add_argument(
        "--peek-batch-size",
        type=int,
        default=DEFAULT_PEEK_BATCH_SIZE,
        help="TOP n of the peek statement (SQL Server 4.1.2-6.0) (default: %(default)s)",
    )
    add_options(p, "format", format={"note": "text SQL with comments, json the statements as JSON"})


def add_grants(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "grants", cmd_grants, "sqltransport-schema grants --engine postgresql --login sales_app --endpoint Sales")
    add_options(p, "engine", engine={"note": "whose GRANTs to print"})
    # --role was the login: a role is a database's under tenant placement (--tenant, -x role=tenant)
    add_renamed(p, "--login", renamed_from=("--role",), required=True, help="the login to grant to (a PostgreSQL role, a SQL Server user)")
    p.add_argument("--endpoint", help="grant only what this endpoint needs (receive its own queues, send to every queue)")
    p.add_argument("--installer", action="store_true", help="what the installer/migration login needs instead")
    p.add_argument("--monitor", action="store_true", help="what a monitoring login needs instead (status, check: read only)")
    add_options(p, "tenant", "topology", "config")
    p.set_defaults(format="text")


def add_script(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "script", cmd_script, "sqltransport-schema script --engine postgresql -o deploy.sql")
    add_options(p, "engine", engine={"choices": ("mssql", "postgresql"), "note": "the script's"})
    add_options(p, "from_rev", "to_rev", "output")
    p.add_argument("--split", metavar="DIR", help="write one file per endpoint into DIR (00-shared.sql first, 99-alembic-version.sql last)")
    p.add_argument(
        "--lock-timeout",
        default=DEFAULT_TIMEOUT,
        type=_duration,
        help="how long each statement that locks a table waits for its lock (default: %(default)s; 0: as long as it takes)",
    )
    url = {"note": "the script's: its header gives the rows of each table it changes in place", "shown": "default: none read"}
    add_options(p, "url", url=url)
    add_options(p, "tenant", tenant={"note": "the script a DBA runs in each"})
    add_options(p, "topology", "config", topology={"note": "its sha256 goes in the header"})
    p.set_defaults(format="text")


PARSERS = {"statements": add_statements, "grants": add_grants, "script": add_script}
