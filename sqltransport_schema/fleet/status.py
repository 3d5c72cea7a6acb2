"""fleet status: one row per target (reachable, revision, at the head or how many revisions
behind, and with --check check's drift summary), read in worker processes, printed as text, JSON
or markdown (a table and a picture of the fleet's revisions, for a CI job summary)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .file import Target
from .work import FAILED, Result

# A row's state
AT_HEAD, BEHIND, DRIFTED, UNREACHABLE, ERROR, UNKNOWN = "at_head", "behind", "drifted", "unreachable", "error", "unknown_revision"
TIMED_OUT = "timed_out"  # no answer within the read timeout (a held lock, a server that does not answer)


@dataclass
class Row:
    target: Target
    result: Result

    @property
    def state(self) -> str:
        r = self.result
        if r.outcome == FAILED:
            return TIMED_OUT if "timed_out" in r.extra else UNREACHABLE if not r.reachable else ERROR
        if r.pending is None:
            return UNKNOWN  # stamped with a revision the history does not lead from (ahead, or another history)
        if r.pending:
            return BEHIND
        if r.drift is not None and not r.drift.get("in_sync", True):
            return DRIFTED
        return AT_HEAD

    @property
    def ok(self) -> bool:
        return self.state == AT_HEAD

    def drift_text(self) -> str:
        drift = self.result.drift
        if drift is None:
            return ""
        if drift.get("error"):
            return f"check failed: {drift['error']}"
        counts = drift.get("counts", {})
        return "in sync" if drift.get("in_sync") else ", ".join(f"{n} {c.replace('_', ' ')}" for c, n in sorted(counts.items()))

    def to_json(self) -> dict:
        r = self.result
        return {
            "name": self.target.name,
            "role": self.target.role,
            "url": self.target.shown_url,
            "state": self.state,
            "reachable": r.reachable,
            "revision": r.from_revision,
            "behind": r.pending,
            **({"drift": r.drift} if r.drift is not None else {}),
            **({"error": r.error} if r.error else {}),
            **({"waited": r.extra["timed_out"]} if "timed_out" in r.extra else {}),
        }


def describe(row: Row, head: str | None) -> str:
    state = row.state
    revision = row.result.from_revision or "<base>"
    if state in (UNREACHABLE, ERROR, TIMED_OUT):
        return f"{row.target.name}: {state.replace('_', ' ')}: {row.result.error}"
    if state == UNKNOWN:
        return f"{row.target.name}: at {revision}, which is not below the head {head}"
    text = f"{row.target.name}: at {revision}" + (f", {row.result.pending} behind" if state == BEHIND else " (head)")
    drift = row.drift_text()
    return text + (f"; {drift}" if drift else "")


def text_lines(rows: list[Row], head: str | None) -> list[str]:
    lines = [describe(row, head) for row in rows]
    lines.append(summary(rows, head))
    return lines


def summary(rows: list[Row], head: str | None) -> str:
    states = Counter(row.state for row in rows)
    parts = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(states.items()))
    verdict = "every target at the head" if all(row.ok for row in rows) else "not every target at the head"
    return f"{len(rows)} target(s), head {head or '<base>'}: {parts}; {verdict}"


def to_json(rows: list[Row], head: str | None) -> dict:
    return {
        "status": "ok" if all(row.ok for row in rows) else "attention",
        "head": head,
        "counts": dict(Counter(row.state for row in rows)),
        "revisions": dict(Counter(row.result.from_revision or "<base>" for row in rows if row.result.outcome != FAILED)),
        "targets": [row.to_json() for row in rows],
    }


def markdown(rows: list[Row], head: str | None, check: bool) -> str:
    ok = all(row.ok for row in rows)
    out = [f"### sqltransport-schema fleet status: {'ok' if ok else 'attention'}", "", summary(rows, head), ""]
    out += ["| target | state | revision | behind |" + (" drift |" if check else ""), "|---|---|---|---:|" + ("---|" if check else "")]
    for row in sorted(rows, key=lambda r: (r.ok, r.target.name)):
        r = row.result
        cells = [
            row.target.name,
            row.state.replace("_", " "),
            r.from_revision or ("—" if r.outcome == FAILED else "<base>"),
            "" if r.pending is None else str(r.pending),
        ]
        if check:
            cells.append(row.drift_text() or (r.error or ""))
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    revisions = Counter(row.result.from_revision or "<base>" for row in rows if row.result.outcome != FAILED)
    unreachable = sum(1 for row in rows if row.result.outcome == FAILED)
    out += ["", "```mermaid", "pie showData title Revisions of the fleet"]
    for revision, n in revisions.most_common():
        label = f"{revision} (head)" if revision == head else revision
        out.append(f'    "{label}" : {n}')
    if unreachable:
        out.append(f'    "unreachable" : {unreachable}')
    out.append("```")
    return "\n".join(out) + "\n"
