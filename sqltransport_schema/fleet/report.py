"""What fleet upgrade and fleet status print: a live progress line on a terminal (plain lines
in CI), a summary per stage, and the same as JSON (per target) or markdown (a CI job summary)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO

from .runner import NOT_STARTED, StageReport
from .work import AT_REVISION, BUSY, DONE, FAILED, LOST, PAST, UPGRADED, WOULD_UPGRADE, Result

PLAIN_EVERY = 10.0  # seconds between two progress lines in CI
TTY_EVERY = 0.2


class Progress:
    """done, failed, running, left, rate and ETA: redrawn in place on a terminal; in CI one line per
    target that changed or failed, and a progress line every PLAIN_EVERY seconds."""

    def __init__(self, total: int, stream: TextIO | None = None, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.total, self.quiet = total, quiet
        self.done = self.failed = 0
        self.started = self.last = time.monotonic()

    def line(self, running: int = 0) -> str:
        finished = self.done + self.failed
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = finished / elapsed
        left = self.total - finished
        eta = f", ETA {left / rate:.0f} s" if rate and left else ""
        return f"[fleet] {self.done} done, {self.failed} failed, {running} running, {max(left - running, 0)} left, {rate:.1f}/s{eta}"

    def say(self, line: str) -> None:
        """A line a person must see whatever the format (an interrupted run found): never quiet."""
        self.stream.write(("\r\033[K" if self.tty else "") + line + "\n")
        self.stream.flush()

    def update(self, stage: StageReport, result: Result, running: int = 0) -> None:
        if result.outcome in DONE:
            self.done += 1
        elif result.outcome != LOST:
            self.failed += 1
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            if now - self.last >= TTY_EVERY or self.done + self.failed == self.total:
                self.stream.write("\r\033[K" + self.line(running))
                self.stream.flush()
                self.last = now
            if result.outcome not in DONE:
                self.stream.write("\r\033[K" + target_line(stage.stage.name, result) + "\n")
            return
        if result.outcome not in DONE:  # what needs a person: the rest is counted in the progress lines
            self.stream.write(target_line(stage.stage.name, result) + "\n")
        if now - self.last >= PLAIN_EVERY:
            self.stream.write(self.line(running) + "\n")
            self.last = now

    def close(self) -> None:
        if self.quiet:
            return
        if self.tty:
            self.stream.write("\r\033[K")
        elif self.done + self.failed:
            self.stream.write(self.line() + "\n")
        self.stream.flush()


def target_line(stage: str, result: Result) -> str:
    moved = f"{result.revision_shown} -> {result.to_revision or '?'}"
    if result.outcome == UPGRADED:
        created = " (its database created)" if result.extra.get("created") else ""
        return f"upgraded {result.target} ({stage}): {moved} in {result.seconds:.1f} s{created}"
    if result.outcome == WOULD_UPGRADE:
        return f"would upgrade {result.target} ({stage}): {moved}, {result.pending if result.pending is not None else '?'} revision(s)"
    if result.outcome == PAST:
        return f"past {result.target} ({stage}): at {result.from_revision}, past the revision asked for; left there, not downgraded"
    if result.outcome == AT_REVISION:
        return f"at revision {result.target} ({stage}): {result.from_revision}"
    if result.outcome == BUSY:
        return f"skipped {result.target} ({stage}): {result.error}"
    if result.outcome == LOST:
        return f"lost {result.target} ({stage}): {result.error}; a new worker runs it again"
    return f"failed {result.target} ({stage}, at {result.revision_shown}): {result.error}"


def summary_lines(reports: list[StageReport], resume: str | None) -> list[str]:
    lines = []
    for report in reports:
        counts = Counter(r.outcome for r in report.results.values())
        outcomes = (UPGRADED, WOULD_UPGRADE, AT_REVISION, PAST, FAILED, BUSY, LOST)
        parts = [f"{counts[o]} {o.replace('_', ' ')}" for o in outcomes if counts[o]]
        if report.not_attempted:
            parts.append(f"{len(report.not_attempted)} not attempted")
        status = "not started" if report.status == NOT_STARTED else report.status
        what = ", ".join(parts) or "nothing to do"
        took = "" if report.status == NOT_STARTED else f" ({report.seconds:.1f} s)"
        lines.append(f"stage {report.stage.name}: {status}, {len(report.targets)} target(s): {what}{took}")
        if report.reason:
            lines.append(f"  stopped: {report.reason}")
        for result in report.failed:
            lines.append("  " + target_line(report.stage.name, result))
        for result in (r for r in report.results.values() if r.outcome == PAST):
            lines.append("  " + target_line(report.stage.name, result))
        if report.not_attempted and report.status != NOT_STARTED:
            lines.append("  not attempted: " + _names(t.name for t in report.not_attempted))
    if resume:
        lines.append(f"resume: {resume}")
    return lines


def _names(names: object, limit: int = 20) -> str:
    names = list(names)  # type: ignore[call-overload]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def upgrade_json(reports: list[StageReport], revision: str | None, resume: str | None, dry_run: bool) -> dict:
    targets = []
    for report in reports:
        for target in report.targets:
            result = report.results.get(target.name)
            targets.append(
                {
                    "name": target.name,
                    "stage": report.stage.name,
                    "role": target.role,
                    "from": result.from_revision if result else None,
                    "to": result.to_revision if result else None,
                    "outcome": result.outcome if result else "not_attempted",
                    "seconds": round(result.seconds, 4) if result else None,
                    "error": result.error if result else None,
                }
            )
    ok = not resume
    return {
        "status": ("dry_run" if dry_run else "complete") if ok else "incomplete",
        "revision": revision,
        "stages": [r.to_json() for r in reports],
        "targets": targets,
        **({"resume": resume} if resume else {}),
    }


def upgrade_markdown(reports: list[StageReport], revision: str | None, resume: str | None) -> str:
    out = [f"### sqltransport-schema fleet upgrade to {revision or '<base>'}: {'incomplete' if resume else 'complete'}", ""]
    out += [
        "| stage | status | targets | upgraded | at revision | failed | not attempted | seconds |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        out.append(
            f"| {r.stage.name} | {r.status} | {len(r.targets)} | {r.count(UPGRADED, WOULD_UPGRADE)} | {r.count(AT_REVISION)} | "
            f"{len(r.failed)} | {len(r.not_attempted)} | {r.seconds:.1f} |"
        )
    failed = [(r.stage.name, f) for r in reports for f in r.failed]
    if failed:
        out += ["", "| failed target | stage | at | error |", "|---|---|---|---|"]
        out += [f"| {f.target} | {stage} | {f.revision_shown} | {_cell(f.error or '')} |" for stage, f in failed]
    if resume:
        out += ["", f"Resume: `{resume}`"]
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
