"""Commands on topology.yaml alone: validate, compile (a revision from its changes), json-schema."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .. import engines
from .. import topology as topology_module
from .options import add_options, load_config, topology_path
from .output import EXIT_CHANGES, EXIT_OK, emit, emit_error, emit_invalid

SHOWN_CHANGES = 50  # changes `compile` lists; JSON holds them all


def cmd_validate(args: argparse.Namespace) -> int:
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
    emit(args, payload, [f"{path}: valid ({len(tables)} tables{files})"])
    return EXIT_OK


def cmd_compile(args: argparse.Namespace) -> int:
    from ..migrate.compile import CompileError, changed_files, compile_topology
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
            args.message or "topology change",
            check=args.check,
            topology_file=Path(source).as_posix(),
            switch=args.topology_switch,
        )
    except topology_module.TopologyError as exc:
        return emit_invalid(args, exc)
    except (CompileError, SnapshotError) as exc:
        return emit_error(args, str(exc), json_stream=sys.stderr)
    changes = plan.summary(limit=10**9)
    payload = {
        "status": "up-to-date" if plan.empty else ("pending" if args.check else "compiled"),
        "topology": str(path),
        "changes": changes,
        "revision": str(written) if written else None,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if plan.empty:
        emit(args, payload, [f"{path}: nothing to compile; the migrations head matches the topology."])
        return EXIT_OK
    if args.check and plan.merges:
        payload["heads"] = list(plan.merges)
        heads = ", ".join(plan.merges)
        lines = [f"the migrations have {len(plan.merges)} heads ({heads}), branches merged in git; a merge revision joins them:"]
        lines += [f"  {c}" for c in changes[1 : SHOWN_CHANGES + 1]] or ["  (no table changes)"]
        lines.append('Run: sqltransport-schema compile -m "merge branches"')
        emit(args, payload, lines)
        return EXIT_CHANGES
    if args.check:
        lines = [f"{path} holds {len(changes)} change(s) not compiled yet:"] + [f"  {c}" for c in changes[:SHOWN_CHANGES]]
        if len(changes) > SHOWN_CHANGES:
            lines.append(f"  ... and {len(changes) - SHOWN_CHANGES} more")
        payload["changed_files"] = changed_files(config, topo)
        if set(payload["changed_files"]) - {topo.files[0].relative}:  # more than the one file
            lines.append("Files changed since the last compile: " + ", ".join(payload["changed_files"]))
        lines.append('Run: sqltransport-schema compile -m "describe the change"')
        emit(args, payload, lines)
        return EXIT_CHANGES
    locks = [entry for name in dict.fromkeys(topo.engines) for entry in lock_report(plan.upgrade, engines.get(name))]
    payload["locks"] = locks
    lines = [f"wrote {written}"] + [f"  {c}" for c in plan.summary(limit=SHOWN_CHANGES)]
    if locks:
        lines.append("Tables it changes in place (each statement waits at most -x lock_timeout, 2s by default, for its lock):")
        lines += [f"  {entry['engine']}: {line}" for entry, line in zip(locks[:SHOWN_CHANGES], lock_lines(locks[:SHOWN_CHANGES]))]
        if len(locks) > SHOWN_CHANGES:
            lines.append(f"  ... and {len(locks) - SHOWN_CHANGES} more")
    emit(args, payload, lines)
    return EXIT_OK


def cmd_json_schema(args: argparse.Namespace) -> int:
    text = json.dumps(topology_module.json_schema(), indent=2, ensure_ascii=False) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def add_compile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="write a revision for the changes in topology.yaml")
    add_options(p, "topology", "format", "config")
    p.add_argument("-m", "--message", help="revision message")
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when topology.yaml holds uncompiled changes or the migrations have several heads",
    )
    p.add_argument(
        "--topology-switch",
        action="store_true",
        help="compile another topology file than the one the migrations come from (it becomes theirs)",
    )
    p.set_defaults(func=cmd_compile)


def add_validate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="validate topology.yaml and report every problem")
    add_options(p, "topology", "format")
    p.set_defaults(func=cmd_validate)


def add_json_schema(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("json-schema", help="print the JSON Schema of topology.yaml")
    add_options(p, "output")
    p.set_defaults(func=cmd_json_schema)


PARSERS = {"compile": add_compile, "validate": add_validate, "json-schema": add_json_schema}
