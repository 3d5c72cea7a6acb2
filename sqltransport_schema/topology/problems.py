"""Problems in a topology: each names file:line:column; TopologyError carries them all."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import errors


@dataclass(frozen=True)
class Mark:
    path: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Problem:
    mark: Mark
    message: str

    def __str__(self) -> str:
        return f"{self.mark}: error: {self.message}"

    def to_json(self) -> dict:
        return {"file": self.mark.path, "line": self.mark.line, "column": self.mark.column, "message": self.message}


class TopologyError(errors.UsageError):
    """One or more problems in a topology file; each names file:line:column."""

    def __init__(self, problems: list[Problem], files: Iterable[str] = ()):
        """files: the topology's files in load order (the root first), the order problems are listed in."""
        rank = {path: i for i, path in enumerate(files)}
        self.problems = sorted(
            problems, key=lambda p: (rank.get(p.mark.path, len(rank)), p.mark.path, p.mark.line, p.mark.column, p.message)
        )
        super().__init__("\n".join(str(p) for p in self.problems))
