"""Problems in a topology: each names file:line:column (the file alone when no line applies, as for a
file that is not there); TopologyError carries them all. The command line prints each as
`error: FILE:LINE:COLUMN: message`, the one form of every error it prints (cli/output.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import errors


@dataclass(frozen=True)
class Mark:
    path: str
    line: int | None = None  # None: the file as a whole (it is missing, or cannot be read)
    column: int | None = None

    def __str__(self) -> str:
        return self.path if self.line is None else f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Problem:
    mark: Mark
    message: str

    def __str__(self) -> str:
        return f"{self.mark}: {self.message}"

    def to_json(self) -> dict:
        return {"file": self.mark.path, "line": self.mark.line, "column": self.mark.column, "message": self.message}


class TopologyError(errors.UsageError):
    """One or more problems in a topology file; each names file:line:column."""

    def __init__(self, problems: list[Problem], files: Iterable[str] = ()):
        """files: the topology's files in load order (the root first), the order problems are listed in."""
        rank = {path: i for i, path in enumerate(files)}
        self.problems = sorted(
            problems, key=lambda p: (rank.get(p.mark.path, len(rank)), p.mark.path, p.mark.line or 0, p.mark.column or 0, p.message)
        )
        super().__init__("\n".join(str(p) for p in self.problems))
