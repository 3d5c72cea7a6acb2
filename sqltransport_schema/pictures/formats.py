"""A Diagram as text: Mermaid (repository hosts render it in markdown) and Graphviz DOT; SVG is
DOT laid out by Graphviz, when it is installed.

Node ids are generated (n1, t1, ...), so only labels and titles carry names, each escaped by its
format's rules: a name may hold quotes, brackets, dots, spaces, `#`, `<`, backslashes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NamedTuple

from .. import errors
from .model import ADDED, CHANGED, EXTRA, MISSING, REMOVED, TOPIC, UNMANAGED, Diagram, Edge, Node

FORMATS = ("mermaid", "dot", "svg")
INSTALL_GRAPHVIZ = (
    "install Graphviz for --format svg: pip install 'sqltransport-schema[graph]' (the graphviz package) "
    "and the dot program (Debian: apt-get install graphviz); --format dot or mermaid need neither"
)

# One look per state in both formats: (fill, stroke, dashed).
LOOKS = {
    ADDED: ("#d9f2d9", "#2e7d32", False),
    REMOVED: ("#f8d7da", "#b71c1c", True),
    CHANGED: ("#fff3cd", "#b26a00", False),
    MISSING: ("#f8d7da", "#b71c1c", True),
    UNMANAGED: ("#e2e3e5", "#555555", True),
}


class Syntax(NamedTuple):
    """How a format writes each part of a Diagram (`_body` walks it the same way for each)."""

    group: Callable[[int, str], str]  # the line that opens group i with its title
    end: str  # the line that closes a group
    node: Callable[[Node], str]
    column: str  # an invisible link from {} to {}: a group's tables one below the other
    edge: Callable[[Edge], str]


def _body(diagram: Diagram, syntax: Syntax) -> list[str]:
    """The groups with their nodes, the other nodes, the edges: indented lines in syntax."""
    lines = []
    for i, group in enumerate(diagram.groups, 1):
        lines.append(f"  {syntax.group(i, group.title)}")
        lines += [f"    {syntax.node(node)}" for node in group.nodes]
        lines += [f"    {syntax.column.format(a.key, b.key)}" for a, b in zip(group.nodes, group.nodes[1:])]
        lines.append(f"  {syntax.end}")
    lines += [f"  {syntax.node(node)}" for node in diagram.nodes]
    return lines + [f"  {syntax.edge(edge)}" for edge in diagram.edges]


# ------------------------------------------------------------------------------------------- mermaid
MERMAID_SHAPES = {  # kind -> (open, close) around the quoted label
    "queue": ('["', '"]'),
    "delayed": ('[["', '"]]'),
    "subscriptions": ('[("', '")]'),
    "saga": ('("', '")'),
    "outbox": ('("', '")'),
    "archive": ('[/"', '"/]'),
    "action_log": ('>"', '"]'),
    TOPIC: ('{{"', '"}}'),
    EXTRA: ('["', '"]'),
}
# Mermaid's entity codes: a label is a quoted string rendered as HTML, so a quote would end it, `#`
# starts an entity code, `<`, `>` and `&` are markup; `|` ends an edge's label, a backtick starts a
# markdown string. `#` goes first: the others' codes start with it.
MERMAID_ENTITIES = (("#", "#35;"), ('"', "#quot;"), ("&", "#amp;"), ("<", "#lt;"), (">", "#gt;"), ("|", "#124;"), ("`", "#96;"))


def mermaid_text(text: str) -> str:
    """text as it goes between a Mermaid label's quotes (a line break, where a name has one, a space)."""
    text = " ".join(text.splitlines())
    for plain, code in MERMAID_ENTITIES:
        text = text.replace(plain, code)
    return text


def _mermaid_node(node: Node) -> str:
    opening, closing = MERMAID_SHAPES[node.kind]
    return f"{node.key}{opening}{'<br/>'.join(mermaid_text(line) for line in node.lines)}{closing}"


def _mermaid_edge(edge: Edge) -> str:
    label = f'|"{mermaid_text(edge.label)}"|' if edge.label else ""
    return f"{edge.source} -->{label} {edge.target}"


MERMAID = Syntax(
    group=lambda i, title: f'subgraph g{i} ["{mermaid_text(title)}"]',
    end="end",
    node=_mermaid_node,
    column="{} ~~~ {}",
    edge=_mermaid_edge,
)


def mermaid(diagram: Diagram) -> str:
    """A Mermaid flowchart, top down: a subgraph per group (its tables a column: invisible links),
    topics above the queues they feed, a class per state."""
    lines = ["flowchart TB", *_body(diagram, MERMAID)]
    if diagram.title:
        lines.insert(0, f"---\ntitle: {json.dumps(' '.join(diagram.title.splitlines()))}\n---")  # YAML front matter
    by_state: dict[str, list[str]] = {}
    for node in diagram.all_nodes():
        if node.state:
            by_state.setdefault(node.state, []).append(node.key)
    for state, keys in by_state.items():
        fill, stroke, dashed = LOOKS[state]
        lines.append(f"  classDef {state} fill:{fill},stroke:{stroke}" + (",stroke-dasharray:5 3" if dashed else ""))
        lines.append(f"  class {','.join(keys)} {state}")
    return "\n".join(lines) + "\n"


def mermaid_block(diagram: Diagram) -> str:
    """The diagram as a fenced ```mermaid block of markdown."""
    return f"```mermaid\n{mermaid(diagram)}```\n"


# ----------------------------------------------------------------------------------------------- dot
DOT_SHAPES = {
    "queue": "box",
    "delayed": "box3d",
    "subscriptions": "cylinder",
    "saga": "note",
    "outbox": "note",
    "archive": "folder",
    "action_log": "tab",
    TOPIC: "hexagon",
    EXTRA: "box",
}


def dot_text(text: str) -> str:
    """text as it goes between a DOT string's quotes: a backslash doubled (else `\\n`, `\\N`, `\\G` ...
    are DOT's escapes), a quote escaped, `&` as `&amp;` (Graphviz decodes entities such as `&lt;` in
    labels); a line break, where a name has one, a space."""
    return " ".join(text.splitlines()).replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")


def _dot_node(node: Node) -> str:
    label = "\\n".join(dot_text(line) for line in node.lines)
    attributes = [f'label="{label}"', f"shape={DOT_SHAPES[node.kind]}"]
    if node.state:
        fill, stroke, dashed = LOOKS[node.state]
        attributes += [f'style="{"filled,dashed" if dashed else "filled"}"', f'fillcolor="{fill}"', f'color="{stroke}"']
    return f"{node.key} [{', '.join(attributes)}];"


def _dot_edge(edge: Edge) -> str:
    label = f' [label="{dot_text(edge.label)}"]' if edge.label else ""
    return f"{edge.source} -> {edge.target}{label};"


DOT = Syntax(
    group=lambda i, title: f'subgraph cluster_{i} {{ label="{dot_text(title)}";',
    end="}",
    node=_dot_node,
    column="{} -> {} [style=invis];",
    edge=_dot_edge,
)


def dot(diagram: Diagram) -> str:
    """A Graphviz digraph, top down: a cluster per group (its tables a column: invisible edges),
    topics above the queues they feed."""
    lines = ["digraph topology {", '  graph [rankdir=TB, ranksep=0.3, fontname="Helvetica", labelloc=t];']
    lines += ['  node [fontname="Helvetica"];', '  edge [fontname="Helvetica"];']
    if diagram.title:
        lines.append(f'  label="{dot_text(diagram.title)}";')
    lines += [*_body(diagram, DOT), "}"]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- svg
def svg(diagram: Diagram) -> bytes:
    """The diagram laid out by Graphviz's dot, as SVG; errors.Unavailable naming what to install
    when the graphviz package or the dot program is not there."""
    try:
        import graphviz
    except ImportError:
        raise errors.Unavailable(f"the graphviz package is not installed: {INSTALL_GRAPHVIZ}") from None
    try:
        return graphviz.Source(dot(diagram)).pipe(format="svg")
    except graphviz.ExecutableNotFound:
        raise errors.Unavailable(f"Graphviz's dot program is not on PATH: {INSTALL_GRAPHVIZ}") from None


def render(diagram: Diagram, form: str) -> bytes:
    """The diagram in one of FORMATS, as the bytes a file gets."""
    if form == "svg":
        return svg(diagram)
    return (mermaid(diagram) if form == "mermaid" else dot(diagram)).encode("utf-8")
