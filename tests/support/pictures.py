"""Pictures read back the way their renderers read them: Mermaid text by Mermaid's own parser (Node,
tools/mermaid), DOT by Graphviz's dot. Without either, their tests are skipped locally and fail
under CI (CI=true), as the database servers' are."""

from __future__ import annotations

import functools
import html
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from .databases import under_ci
from .projects import REPO

MERMAID = REPO / "tools" / "mermaid"
SVG = "{http://www.w3.org/2000/svg}"
BLOCK = re.compile(r"^```mermaid\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def _required(what: str, install: str) -> None:
    if under_ci():
        pytest.fail(f"{what} is required under CI: {install}")
    pytest.skip(f"{what} is not installed: {install}")


def parse_mermaid(text: str) -> dict:
    """What Mermaid's parser reads from text: {"vertices": {id: {"text", "classes", "type"}},
    "edges": [{"start", "end", "text"}], "subgraphs": [{"id", "title", "nodes"}]}; a syntax error fails."""
    if shutil.which("node") is None or not (MERMAID / "node_modules" / "mermaid").is_dir():
        _required("Mermaid's parser (Node and tools/mermaid/node_modules)", "npm ci --prefix tools/mermaid")
    parsed = _mermaid_parser().parse(text)
    assert "error" not in parsed, f"Mermaid refused the text: {parsed['error']}\n{text}"
    return parsed


class _MermaidParser:
    """One `node parse.mjs --lines` for this process's texts: starting Node and loading Mermaid cost
    about a second of CPU a text, the parse itself milliseconds."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            ["node", str(MERMAID / "parse.mjs"), "--lines"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
        )

    def parse(self, text: str) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(text) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, f"Mermaid's parser exited ({self.process.poll()})"
        return json.loads(answer)


@functools.cache
def _mermaid_parser() -> _MermaidParser:
    return _MermaidParser()


def mermaid_lines(label: str) -> list[str]:
    """A label as Mermaid shows it, a line per <br>: the parser keeps an entity code (#quot;, #35;)
    as a placeholder that drawing turns into an HTML entity (`&quot;`, `&#35;`), which the browser decodes."""
    placeholders = (("\ufb02\u00b0\u00b0", "&#"), ("\ufb02\u00b0", "&"), ("\u00b6\u00df", ";"))  # mermaid's encodeEntities
    lines = []
    for line in label.split("<br>"):
        for placeholder, entity in placeholders:
            line = line.replace(placeholder, entity)
        lines.append(html.unescape(line))
    return lines


def mermaid_blocks(markdown: str) -> list[str]:
    return BLOCK.findall(markdown)


def _dot(text: str, form: str) -> str:
    if shutil.which("dot") is None:
        _required("Graphviz's dot", "apt-get install graphviz")
    done = subprocess.run(["dot", f"-T{form}"], input=text, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and not done.stderr, f"dot refused the text: {done.stderr}\n{text}"
    return done.stdout


def dot_layout(text: str) -> dict:
    """dot's layout of text (-Tjson): its objects (clusters, then nodes) and edges."""
    return json.loads(_dot(text, "json"))


def dot_drawn_labels(text: str) -> dict[str, list[str]]:
    """Each node's label as dot draws it (-Tsvg): node id -> its lines of text."""
    root = ET.fromstring(_dot(text, "svg"))
    labels = {}
    for group in root.iter(f"{SVG}g"):
        if group.get("class") == "node":
            labels[group.find(f"{SVG}title").text] = [t.text or "" for t in group.iter(f"{SVG}text")]
    return labels
