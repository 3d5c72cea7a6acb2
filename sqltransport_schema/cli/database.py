"""Commands on a live database: check (drift from the deployed revision), adopt (take over tables
NServiceBus installers made). The work is in check.py and adopt.py; this parses and prints."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import errors
from ..urls import database_url
from . import github
from .options import DEFAULT_CONFIG, add_command, add_options, formats, load_config, read_timeout, topology_path
from .output import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, emit, emit_error

if TYPE_CHECKING:
    from alembic.config import Config

    from ..check import Report


def cmd_check(args: argparse.Namespace) -> int:
    """compare a live database with the topology its migrations record

    Compare the tables of a live database with the blueprint recorded by the revision it is stamped
    with, and report every difference once (missing or extra tables, columns, types, indexes,
    revisions not applied yet). It changes nothing; exit 1 on drift, or when topology.yaml (or a file
    it includes) holds changes not compiled into the migrations yet (a warning on stderr says what to
    run), 0 in sync (docs/check.md lists the categories). On SQL Server it needs 2008 or later
    (sys.indexes' has_filter and filter_definition; docs/sql-server-versions.md), and says so on an
    older server.
    """
    from .. import check
    from ..migrate.compile import uncompiled

    try:
        # from any folder: without alembic.ini (the default -c) the database's own blueprint is compared
        config = load_config(args.config) if args.config != DEFAULT_CONFIG or Path(args.config).is_file() else None
        report = check.run(database_url(args.url, config), config, args.db_role, read_timeout=read_timeout(args))
        notice = uncompiled(config) if config is not None else None
    except (check.CheckError, errors.NotFound) as exc:
        if args.format == github.FORMAT:
            github.append_summary(f"### sqltransport-schema check: error\n\n{exc}\n")
        if args.format == "markdown":
            sys.stdout.write(f"### sqltransport-schema check: error\n\n{exc}\n")
            return EXIT_ERROR
        return emit_error(args, str(exc))
    if notice is not None:
        notice.warn()
    if args.format in ("markdown", github.FORMAT):
        from ..pictures import mermaid_block
        from ..pictures.sources import MARKDOWN_TABLES, from_check

        markdown = report.markdown() + (f"\n**Not compiled:** {notice.notice()}\n" if notice else "")
        markdown += "\n" + mermaid_block(from_check(report, MARKDOWN_TABLES))
        if args.format == github.FORMAT:
            found = _findings(report, config)
            if notice is not None:
                found.append(github.Annotation(notice.notice(), file=notice.topology, title="sqltransport-schema check: not compiled"))
            github.report(found, report.text_lines(), markdown)
        else:
            sys.stdout.write(markdown)
    else:
        emit(args, {**report.to_json(), **({"uncompiled": notice.to_json()} if notice else {})}, report.text_lines())
    return EXIT_OK if report.in_sync and notice is None else EXIT_CHANGES


def _findings(report: Report, config: Config | None) -> list[github.Annotation]:
    """check's findings as annotations, each on the topology line that makes its table (the
    topology of alembic.ini; a table it does not make, or no topology: at no file)."""
    from .. import check, engines
    from .. import topology as topology_module

    marks = {}
    if config is not None:
        try:
            topo = topology_module.load(topology_path(argparse.Namespace(topology=None), config))
        except (errors.SqltransportError, OSError):
            topo = None  # the annotations then name no file; the findings are what matters
        if topo is not None:
            dialect = engines.get(report.engine)
            marks = {check.display(dialect, name): mark for name, mark in topo.marks_by_table().items()}
    found = []
    for finding in report.findings:
        message = f"{finding.table}: {finding.detail}" if finding.table else finding.detail
        level = "notice" if finding.severity == "info" else "error"
        title = f"sqltransport-schema check: {finding.category}"
        found.append(github.Annotation.at(marks.get(finding.table), message, level=level, title=title))
    return found


def cmd_adopt(args: argparse.Namespace) -> int:
    """take over a database NServiceBus installers made: stamp it, or print the upgrade plan

    Read the transport release of each table NServiceBus installers made from its structure, compare
    with every compiled revision and stamp the newest revision the database already is (exit 0).
    When none matches, print the upgrade plan and exit 1 (--apply runs it and stamps the head);
    tables that are not transport tables make it refuse (exit 2).
    """
    from .. import adopt

    try:
        config = load_config(args.config)
        url = database_url(args.url, config)
        found, engine, action = adopt.run(url, config, stamp=not args.dry_run, apply=args.apply, role=args.db_role)
    except (adopt.AdoptError, errors.NotFound) as exc:
        return emit_error(args, str(exc), json_stream=sys.stderr)
    emit(args, {**found.to_json(engine), "action": action}, adopt.text_lines(found, engine, action, url))
    if found.status == "not_adoptable":
        return EXIT_ERROR
    if found.status == "needs_upgrade" and action != "applied":
        return EXIT_CHANGES
    return EXIT_OK


def add_check(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "check", cmd_check, "sqltransport-schema check --url postgresql://postgres@127.0.0.1/app --format markdown")
    add_options(p, "url", "tenant", "format", "config", "read_timeout", format=formats("report"))


def add_adopt(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "adopt", cmd_adopt, "sqltransport-schema adopt --url postgresql://postgres@127.0.0.1/app --dry-run")
    add_options(p, "url", "tenant")
    add_options(p, "dry_run")
    p.add_argument("--apply", action="store_true", help="when the tables need upgrading, run the plan and stamp the head")
    add_options(p, "format", "config")


PARSERS = {"check": add_check, "adopt": add_adopt}
