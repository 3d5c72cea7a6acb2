"""load and loads: read, build, check the meaning; every problem of every file in one TopologyError."""

from __future__ import annotations

from pathlib import Path

from ..util import gc_paused
from .build import build
from .format import FORMAT
from .model import Topology
from .problems import Mark, Problem, TopologyError
from .reader import Includes, Reader, compose, decode
from .rules import semantic_problems


def load(path: str | Path) -> Topology:
    """The topology of the file at path, with every file it includes."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TopologyError([Problem(Mark(str(path)), "file not found; create it or pass --topology PATH")]) from None
    problems: list[Problem] = []
    text = decode(data, str(path), problems)
    if text is None:
        raise TopologyError(problems)
    return loads(text, str(path))


def loads(text: str, path: str = "topology.yaml") -> Topology:
    """The topology of text, read as the file at path (the files it includes are relative to that path)."""
    with gc_paused():
        return _loads(text, path)


def _loads(text: str, path: str) -> Topology:
    problems: list[Problem] = []
    node = compose(text, path, problems)
    if problems:
        raise TopologyError(problems)
    if node is None:
        raise TopologyError([Problem(Mark(path, 1, 1), "the file is empty; it needs at least transport_version")])
    reader = Reader(path, problems)
    root = reader.read(node, FORMAT, "topology")
    if root is None:
        raise TopologyError(problems or [Problem(reader.mark(node), "not a topology")])
    files = Includes(path, text, problems)
    files.merge(root)
    order = [source.path for source in files.sources]
    if root.get("transport_version") is not None:
        # Check the meaning of what was read even when other parts were not, so that
        # one run reports every problem; entries that could not be read are left out.
        topology = build(root, path, tuple(files.sources))
        problems += semantic_problems(topology)
    if problems:
        raise TopologyError(problems, order)
    return topology
