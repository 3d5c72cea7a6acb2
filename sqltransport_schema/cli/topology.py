"""Commands on topology.yaml alone: validate, compile (a revision from its changes), json-schema."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .. import engines
from . import github
from .options import add_command, add_options, formats, load_config, topology_path
from .output import EXIT_CHANGES, EXIT_OK, emit, emit_error, emit_invalid, emit_product, emit_status

if TYPE_CHECKING:
    from ..migrate.compile import Plan
    from ..topology import Topology

SHOWN_CHANGES = 50  # changes `compile` lists; JSON holds them all


def cmd_validate(args: argparse.Namespace) -> int:
    """validate topology.yaml and report every problem

    Read topology.yaml and report every problem it holds at once, each with its file, line and
    column and what to write instead; exit 2 when there is one. Nothing is written and no database
    is read.
    """
    from .. import topology as topology_module

    path = topology_path(args)
    try:
        topo = topology_module.load(path)
    except topology_module.TopologyError as exc:
        return emit_invalid(args, exc)
    from ..schema import blueprint

    tables = blueprint(topo).tables
    payload = {"status": "valid", "file": str(path), "tables": len(tables)}
    files = ""
    if len(topo.files) > 1:  # the root file includes others
        payload["files"] = [source.path for source in topo.files]
        files = f" in {len(topo.files)} files"
    line = f"{path}: valid ({len(tables)} tables{files})"
    markdown = f"### sqltransport-schema validate: valid\n\n`{path}`: {len(tables)} tables{files}."
    if args.format == github.FORMAT:
        github.report([], [line], markdown)
    elif args.format == "markdown":
        sys.stdout.write(markdown + "\n")
    else:
        emit(args, payload, [line])
    return EXIT_OK


def cmd_compile(args: argparse.Namespace) -> int:
    """write a revision for the changes in topology.yaml

    Compare topology.yaml with the topology the migrations' head records and write one Alembic
    revision holding the transport's DDL for the difference (tables created, changed, dropped with a
    guard against losing messages), listing each change and the tables it locks. With --check, write
    nothing and exit 1 when there are changes not compiled yet (for CI).
    """
    from .. import topology as topology_module
    from ..defaults import DEFAULT_TIMEOUT
    from ..migrate.compile import ALLOW_DOWNGRADE, CompileError, changed_files, compile_topology, downgrade_losses, pending
    from ..migrate.locks import lock_lines, lock_report
    from ..revisions import SnapshotError

    started = time.perf_counter()
    config = load_config(args.config)
    path = topology_path(args, config)
    try:
        topo = topology_module.load(path)
        source = os.path.relpath(path.resolve(), Path(config.config_file_name).resolve().parent)
        plan, written = compile_topology(
            config,
            topo,
            args.message,  # None: read from the change (migrate/message.py)
            check=args.check,
            topology_file=Path(source).as_posix(),
            switch=args.topology_switch,
            allow_downgrade=args.allow_downgrade,
        )
    except topology_module.TopologyError as exc:
        return emit_invalid(args, exc)
    except (CompileError, SnapshotError) as exc:
        return emit_error(args, str(exc), json_stream=sys.stderr, details=getattr(exc, "details", None))
    if args.check and not plan.empty:  # the warning every command gives for it, on stderr
        pending(config, topo, plan).warn()
    changes = plan.summary(limit=10**9)
    payload = {
        "status": "up-to-date" if plan.empty else ("pending" if args.check else "compiled"),
        "topology": str(path),
        "changes": changes,
        "revision": str(written) if written else None,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if plan.empty:
        _emit(args, payload, [f"{path}: nothing to compile; the migrations head matches the topology."], plan, topo)
        return EXIT_OK
    if args.check and plan.merges:
        payload["heads"] = list(plan.merges)
        heads = ", ".join(plan.merges)
        lines = [f"the migrations have {len(plan.merges)} heads ({heads}), branches merged in git; a merge revision joins them:"]
        lines += [f"  {c}" for c in changes[1 : SHOWN_CHANGES + 1]] or ["  (no table changes)"]
        lines.append('Run: sqltransport-schema compile -m "merge branches"')
        _emit(args, payload, lines, plan, topo)
        return EXIT_CHANGES
    if args.check:
        lines = [f"{path} holds {len(changes)} change(s) not compiled yet:"] + [f"  {c}" for c in changes[:SHOWN_CHANGES]]
        if len(changes) > SHOWN_CHANGES:
            lines.append(f"  ... and {len(changes) - SHOWN_CHANGES} more")
        payload["changed_files"] = changed_files(config, topo)
        if set(payload["changed_files"]) - {topo.files[0].relative}:  # more than the one file
            lines.append("Files changed since the last compile: " + ", ".join(payload["changed_files"]))
        if downgrade_losses(plan):
            lines.append(f"It lowers transport_version: compile refuses it without {ALLOW_DOWNGRADE} and lists what it loses.")
        lines.append('Run: sqltransport-schema compile -m "describe the change"')
        _emit(args, payload, lines, plan, topo)
        return EXIT_CHANGES
    queues = plan.new.queue_names()
    locks = [entry for name in dict.fromkeys(topo.engines) for entry in lock_report(plan.upgrade, engines.get(name), queues=queues)]
    payload["locks"] = locks
    lines = [f"wrote {written}"] + [f"  {c}" for c in plan.summary(limit=SHOWN_CHANGES)]
    if locks:
        lines.append(
            f"Tables it changes in place (each statement waits at most -x lock_timeout, {DEFAULT_TIMEOUT} by default, for its lock):"
        )
        lines += [f"  {entry['engine']}: {line}" for entry, line in zip(locks[:SHOWN_CHANGES], lock_lines(locks[:SHOWN_CHANGES]))]
        if len(locks) > SHOWN_CHANGES:
            lines.append(f"  ... and {len(locks) - SHOWN_CHANGES} more")
    _emit(args, payload, lines, plan, topo)
    return EXIT_OK


def _emit(args: argparse.Namespace, payload: dict, lines: list[str], plan: Plan, topo: Topology) -> None:
    """compile's result in --format: under markdown a pull-request comment, the lines and then the
    change drawn (tables added, removed and changed styled apart); under github the lines, each
    change not compiled yet (--check) as an annotation on the topology line that makes its table,
    and the pull-request comment in the job summary."""
    if args.format == "markdown":
        sys.stdout.write(_markdown(payload, lines, plan, topo))
    elif args.format == github.FORMAT:
        pending = payload["status"] == "pending"
        github.report(_uncompiled(plan, topo) if pending else [], lines, _markdown(payload, lines, plan, topo))
    else:  # --check's report is its product; compile's is the revision, its lines status
        (emit if args.check else emit_status)(args, payload, lines)


def _markdown(payload: dict, lines: list[str], plan: Plan, topo: Topology) -> str:
    from ..pictures import mermaid_block
    from ..pictures.sources import MARKDOWN_TABLES, from_plan

    out = [f"### sqltransport-schema compile: {payload['status']}"]
    for i, line in enumerate(lines):
        item = line.startswith("  ")
        if not (item and i and lines[i - 1].startswith("  ")):
            out.append("")  # a paragraph, or the first item of a list
        out.append(f"- `` {line.strip()} ``" if item else line)
    return "\n".join(out) + "\n\n" + mermaid_block(from_plan(plan, topo, MARKDOWN_TABLES))


def _uncompiled(plan: Plan, topo: Topology) -> list[github.Annotation]:
    """An annotation per change not compiled yet, where the topology makes its table (a table it no
    longer makes, or a merge of heads: on the root file)."""
    marks = topo.marks_by_table()
    title = "sqltransport-schema compile --check"
    advice = 'not compiled yet: run sqltransport-schema compile -m "describe the change"'
    merge = f"the migrations have {len(plan.merges)} heads; a merge revision joins them"
    found = [github.Annotation(merge, file=topo.path, title=title)] if plan.merges else []
    for op in plan.upgrade:
        mark = marks.get(op.table_name)
        message = f"{op.describe()}: {advice}"
        found.append(github.Annotation.at(mark, message, title=title) if mark else github.Annotation(message, file=topo.path, title=title))
    return found


def cmd_json_schema(args: argparse.Namespace) -> int:
    """print the JSON Schema of topology.yaml

    Print the JSON Schema topology.yaml follows (every key, its type, default and description), for
    an editor's completion and checks: point the YAML language server at the file it writes.
    """
    from .. import topology as topology_module

    return emit_product(args.output, json.dumps(topology_module.json_schema(), indent=2, ensure_ascii=False) + "\n")


def add_compile(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "compile", cmd_compile, 'sqltransport-schema compile -m "add the Billing endpoint"')
    add_options(p, "topology", "format", "config", format=formats("report"))
    p.add_argument("-m", "--message", help='revision message (default: one read from the change, e.g. "add Inventory")')
    add_options(
        p,
        "check",
        check={"note": "topology.yaml holds uncompiled changes, or the migrations several heads (no revision is written)"},
    )
    p.add_argument(
        "--topology-switch",
        action="store_true",
        help="compile another topology file than the one the migrations come from (it becomes theirs)",
    )
    p.add_argument(
        "--allow-downgrade",
        action="store_true",
        help="compile a lowered transport_version (refused without it: it changes tables and loses data, listed)",
    )


def add_validate(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "validate", cmd_validate, "sqltransport-schema validate --topology topology.yaml")
    add_options(p, "topology", "format", format=formats("report"))


def add_json_schema(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "json-schema", cmd_json_schema, "sqltransport-schema json-schema -o topology.schema.json")
    add_options(p, "output")


PARSERS = {"compile": add_compile, "validate": add_validate, "json-schema": add_json_schema}
