"""The journal: one row per target and attempt (start, end, from and to revision, outcome, error
line) in a SQLite file beside the fleet file. The databases' own alembic_version is the truth of
where each target is; the journal is the record of what each run did, and what a killed run left
(its rows still `running` become `interrupted` when the next run starts). Written by the runner
alone (the local one, or Spark's driver); never holds a URL or a password.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..util import process_alive
from .work import Result

RUNNING, INTERRUPTED = "running", "interrupted"
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run INTEGER PRIMARY KEY, started TEXT NOT NULL, ended TEXT, host TEXT NOT NULL, pid INTEGER NOT NULL,
    command TEXT NOT NULL, revision TEXT, outcome TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    run INTEGER NOT NULL, target TEXT NOT NULL, stage TEXT NOT NULL, attempt INTEGER NOT NULL,
    started TEXT NOT NULL, ended TEXT, from_revision TEXT, to_revision TEXT, outcome TEXT NOT NULL,
    error TEXT, seconds REAL, worker INTEGER,
    PRIMARY KEY (target, attempt)
);
CREATE INDEX IF NOT EXISTS attempts_by_run ON attempts (run);
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def default_path(fleet_file: Path) -> Path:
    """fleet.yaml -> fleet.journal.sqlite beside it."""
    return fleet_file.with_name(fleet_file.stem + ".journal.sqlite")


@dataclass(frozen=True)
class Interrupted:
    """A run that died (its process gone) as the next run found it in the journal."""

    run: int
    started: str
    command: str
    outcomes: dict[str, int]  # the attempts it finished, by outcome (upgraded, failed, ...)
    cut: list[str]  # targets it was running when it died

    def line(self) -> str:
        done = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.outcomes.items())) or "no target finished"
        cut = f"; cut off mid-run: {', '.join(self.cut)}" if self.cut else ""
        return f"run {self.run} (started {self.started}: {self.command}) was interrupted: {done}{cut}; this run takes up what it left"


class Journal:
    def __init__(self, path: Path):
        self.path = path
        self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self.run: int | None = None
        self.attempts: dict[str, int] = {}
        self.interrupted: list[Interrupted] = []  # what begin() found of runs that died

    def begin(self, command: str, revision: str | None) -> int:
        """A new run; the rows of runs that died on this host (their process is gone) become interrupted,
        and `self.interrupted` says what each had done and left."""
        host = socket.gethostname()
        self.interrupted = []
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            for run, pid in self.db.execute("SELECT run, pid FROM runs WHERE outcome = ? AND host = ?", (RUNNING, host)).fetchall():
                if not process_alive(pid):
                    self.db.execute("UPDATE runs SET outcome = ? WHERE run = ?", (INTERRUPTED, run))
                    self.interrupted.append(self._left_by(run))
                    self.db.execute(
                        "UPDATE attempts SET outcome = ?, ended = NULL WHERE run = ? AND outcome = ?", (INTERRUPTED, run, RUNNING)
                    )
            cursor = self.db.execute(
                "INSERT INTO runs (started, host, pid, command, revision, outcome) VALUES (?, ?, ?, ?, ?, ?)",
                (_now(), host, os.getpid(), command, revision, RUNNING),
            )
        self.run = cursor.lastrowid
        return self.run

    def _left_by(self, run: int) -> Interrupted:
        """What a run that died had done (its attempts by outcome) and left (the targets it was running)."""
        started, command = self.db.execute("SELECT started, command FROM runs WHERE run = ?", (run,)).fetchone()
        outcomes: dict[str, int] = {}
        cut: list[str] = []
        for target, outcome in self.db.execute("SELECT target, outcome FROM attempts WHERE run = ? ORDER BY target", (run,)):
            if outcome == RUNNING:
                cut.append(target)
            else:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
        return Interrupted(run, started, command, outcomes, cut)

    def started(self, target: str, stage: str, worker: int | None = None) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            (last,) = self.db.execute("SELECT COALESCE(MAX(attempt), 0) FROM attempts WHERE target = ?", (target,)).fetchone()
            self.attempts[target] = last + 1
            self.db.execute(
                "INSERT INTO attempts (run, target, stage, attempt, started, outcome, worker) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (self.run, target, stage, last + 1, _now(), RUNNING, worker),
            )

    def ended(self, result: Result) -> None:
        self.db.execute(
            "UPDATE attempts SET ended = ?, from_revision = ?, to_revision = ?, outcome = ?, error = ?, seconds = ?,"
            " worker = COALESCE(worker, ?) WHERE target = ? AND attempt = ?",
            (
                _now(),
                result.from_revision,
                result.to_revision,
                result.outcome,
                result.error,
                round(result.seconds, 4),
                result.pid or None,
                result.target,
                self.attempts[result.target],
            ),
        )

    def finish(self, outcome: str) -> None:
        self.db.execute("UPDATE runs SET ended = ?, outcome = ? WHERE run = ?", (_now(), outcome, self.run))

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True)
class Removed:
    """A target the journal knows that the fleet file no longer names: its last attempt."""

    target: str
    outcome: str
    to_revision: str | None
    ended: str | None

    def line(self) -> str:
        at = f" to {self.to_revision}" if self.to_revision else ""
        return f"{self.target}: removed from the fleet file (last attempt {self.outcome}{at}, {self.ended or 'not ended'})"

    def to_json(self) -> dict:
        return {"name": self.target, "last_outcome": self.outcome, "last_revision": self.to_revision, "ended": self.ended}


def removed(path: Path, names: set[str]) -> list[Removed]:
    """Targets with attempts in the journal at `path` (read only; none when it is not there) that
    are not among `names`, each with its last attempt, by name."""
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT target, outcome, to_revision, ended FROM attempts a"
            " WHERE attempt = (SELECT MAX(attempt) FROM attempts b WHERE b.target = a.target) ORDER BY target"
        ).fetchall()
    except sqlite3.DatabaseError:
        return []  # not a journal (yet): nothing to say
    finally:
        db.close()
    return [Removed(*row) for row in rows if row[0] not in names]
