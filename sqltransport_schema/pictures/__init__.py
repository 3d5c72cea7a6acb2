"""Pictures of a topology: which endpoint owns which tables, who subscribes to what, where messages
wait, what a change or a drift touches (docs/pictures.md).

model.py    the Diagram (groups, nodes, edges, states) and `draw`, the one builder
formats.py  the Diagram as Mermaid or Graphviz DOT text (pure), or SVG through Graphviz
"""

from __future__ import annotations

from .formats import FORMATS, dot, mermaid, mermaid_block, render, svg
from .model import (
    ADDED,
    CHANGED,
    MISSING,
    REMOVED,
    STATES,
    UNMANAGED,
    Diagram,
    Subscription,
    draw,
    guess_owners,
    topology_owners,
)

__all__ = [
    "ADDED",
    "CHANGED",
    "FORMATS",
    "MISSING",
    "REMOVED",
    "STATES",
    "UNMANAGED",
    "Diagram",
    "Subscription",
    "dot",
    "draw",
    "guess_owners",
    "mermaid",
    "mermaid_block",
    "render",
    "svg",
    "topology_owners",
]
