"""`--format github`: each problem as a GitHub Actions workflow command, and the job summary.

A workflow command (`::error file=topology.yaml,line=12,col=5,title=...::message`) printed by a
step becomes an annotation on that file and line of the pull request. Values are escaped as the
runner reads them: in the message `%`, CR and LF; in a property also `:` and `,`. The file is
given relative to the workspace (GITHUB_WORKSPACE, else the current folder), as annotations need.
When GITHUB_STEP_SUMMARY names a file, the command's markdown report is appended to it.

Commands build `Annotation`s from their own located results (topology problems' marks, the
topology's mark of each table) and hand them to `report`; a command added later (`fleet status
--check`) does the same with its findings.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ..topology.problems import Mark

FORMAT = "github"
SUMMARY_VARIABLE = "GITHUB_STEP_SUMMARY"
LEVELS = ("error", "warning", "notice")


def escape_data(text: str) -> str:
    """A workflow command's message, escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (file, title), escaped."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workspace_path(path: str) -> str:
    """`path` as an annotation names it: relative to GITHUB_WORKSPACE (else the current folder) when
    inside it, with forward slashes."""
    target = Path(path).absolute()
    for base in (os.environ.get("GITHUB_WORKSPACE"), os.getcwd()):
        if base and target.is_relative_to(Path(base).absolute()):
            return target.relative_to(Path(base).absolute()).as_posix()
    return Path(path).as_posix()


@dataclass(frozen=True)
class Annotation:
    """One problem, where it is (a file, a line and column in it, or nowhere in particular)."""

    message: str
    level: str = "error"
    file: str | None = None
    line: int | None = None
    col: int | None = None
    title: str | None = None

    @classmethod
    def at(cls, mark: Mark | None, message: str, **fields: str) -> Annotation:
        """An annotation at a topology mark (None: at no file)."""
        if mark is None:
            return cls(message, **fields)
        return cls(message, file=mark.path, line=mark.line, col=mark.column, **fields)

    def command(self) -> str:
        properties = []
        if self.file is not None:
            properties.append(f"file={escape_property(workspace_path(self.file))}")
        for name, value in (("line", self.line), ("col", self.col)):
            if value is not None:
                properties.append(f"{name}={value}")
        if self.title:
            properties.append(f"title={escape_property(self.title)}")
        head = f"{self.level} {','.join(properties)}" if properties else self.level
        return f"::{head}::{escape_data(self.message)}"


def append_summary(markdown: str) -> bool:
    """Append the markdown report to the job summary, when GITHUB_STEP_SUMMARY names its file."""
    path = os.environ.get(SUMMARY_VARIABLE)
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as summary:
        summary.write(markdown.rstrip("\n") + "\n\n")
    return True


def report(annotations: list[Annotation], lines: list[str], markdown: str | None = None, stream: TextIO | None = None) -> None:
    """The workflow commands, then the text lines (the log reads as under --format text), and the
    markdown report into the job summary."""
    out = stream or sys.stdout
    out.write("".join(a.command() + "\n" for a in annotations) + "".join(line + "\n" for line in lines))
    if markdown is not None:
        append_summary(markdown)
