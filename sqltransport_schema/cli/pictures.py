"""graph: the topology, or a live database, as a diagram (Mermaid, Graphviz DOT or SVG). The
drawing is pictures/; what a live database holds is status's and check's own reading."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .live_bus import _transport, status_notes
from .options import add_command, add_options, formats, load_config, topology_path
from .output import emit_product

if TYPE_CHECKING:
    from alembic.config import Config

    from ..pictures import Diagram


def cmd_graph(args: argparse.Namespace) -> int:
    """draw the topology: each endpoint's tables, plain queues, the subscription table

    Draw topology.yaml as a diagram: each endpoint a group holding its input, instance, delayed,
    saga and outbox tables; the plain queues (error, audit); the shared subscription table. With
    --url, draw the live database as its migrations deployed it: each queue's depth and oldest
    message, an edge from each topic to each subscriber, the tables missing from the database and
    those no revision names marked. Mermaid and DOT are text; SVG needs Graphviz (docs/pictures.md).
    """
    from .. import pictures

    diagram = _live(args) if args.url else _planned(args)
    data = pictures.render(diagram, args.format)
    return emit_product(args.output, data)


def _config(args: argparse.Namespace) -> Config | None:
    return load_config(args.config) if Path(args.config).is_file() else None


def _planned(args: argparse.Namespace) -> Diagram:
    from .. import topology as topology_module
    from ..pictures.sources import from_topology

    return from_topology(topology_module.load(topology_path(args, _config(args))))


def _live(args: argparse.Namespace) -> Diagram:
    """status's report of the database and check's tables it does not name, drawn."""
    from .. import check
    from ..db import given_url
    from ..pictures import UNMANAGED
    from ..pictures.sources import EXTRA_CATEGORIES, from_status
    from ..runtime.status import status

    transport = _transport(args, readers=True)
    try:
        report = status(transport, error_queue=args.error_queue)
        drift = check.run(given_url(transport.engine), _config(args))
    finally:
        transport.engine.dispose()
    extra = [(f.table, UNMANAGED) for f in drift.findings if f.category in EXTRA_CATEGORIES]
    return from_status(report, status_notes(report), extra)


def add_graph(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "graph", cmd_graph, "sqltransport-schema graph --format dot -o topology.dot")
    add_options(
        p,
        "format",
        "url",
        "output",
        "topology",
        "error_queue",
        "config",
        format=formats("diagram"),
        url={
            "note": "draw this live database (depths, subscribers, missing and unmanaged tables)",
            "shown": "default: topology.yaml drawn",
        },
    )


PARSERS = {"graph": add_graph}
