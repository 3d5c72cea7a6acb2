"""fleet upgrade: the stages in order, each target's work in a worker process, on_error and
max_failures deciding whether a stage goes on and whether the next one starts.

A stage starts only when the one before it succeeded (its failures within what it tolerates).
A target whose worker died is run once more by a new worker (its database tells that worker where
it is); a second loss is a failure. Every attempt is journalled by this process alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from .file import Fleet, Stage, Target
from .journal import Journal
from .pool import Pool
from .work import DONE, FAILED, LOST, PAST, UPGRADED, Migrations, Result  # noqa: F401 - PAST: the command line reads it here

# What a stage ended as
COMPLETE, STOPPED, NOT_STARTED, PAUSED = "complete", "stopped", "not_started", "paused"


@dataclass
class StageReport:
    stage: Stage
    targets: list[Target]
    results: dict[str, Result] = field(default_factory=dict)
    status: str = NOT_STARTED
    seconds: float = 0.0
    reason: str | None = None  # why it stopped
    failures: int = 0  # what max_failures counts (failed and lost targets), kept as results come: stop() costs nothing

    def count(self, *outcomes: str) -> int:
        return sum(1 for r in self.results.values() if r.outcome in outcomes)

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results.values() if r.outcome not in DONE]

    @property
    def not_attempted(self) -> list[Target]:
        return [t for t in self.targets if t.name not in self.results]

    def to_json(self) -> dict:
        return {
            "name": self.stage.name,
            "status": self.status,
            "targets": len(self.targets),
            "outcomes": {o: self.count(o) for o in sorted({r.outcome for r in self.results.values()})},
            "not_attempted": [t.name for t in self.not_attempted],
            "seconds": round(self.seconds, 3),
            **({"reason": self.reason} if self.reason else {}),
        }


Batch = Callable[[list[Target], int, Callable[[], bool]], Iterable[Result]]


def run_stages(
    staged: list[tuple[Stage, list[Target]]],
    batch: Batch,
    journal: Journal | None,
    parallel: int | None = None,
    on_result: Callable[[StageReport, Result], None] = lambda stage, result: None,
    say: Callable[[str], None] = lambda line: None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[StageReport]:
    """Run each stage's targets through batch (the pool's run, or Spark's), stage after stage; after a
    stage that upgraded something, its gate: its bake, then its pause for approval."""
    reports = [StageReport(stage, targets) for stage, targets in staged]
    for index, report in enumerate(reports):
        if index and reports[index - 1].status == PAUSED:
            break
        if not report.targets:
            report.status = COMPLETE
            continue
        tolerated = report.stage.tolerated(len(report.targets))
        started = time.perf_counter()
        retried: set[str] = set()
        by_name = {t.name: t for t in report.targets}
        todo = list(report.targets)
        while todo:
            again = []

            def stop(report: StageReport = report, tolerated: int | None = tolerated) -> bool:
                return tolerated is not None and report.failures > tolerated

            for result in batch(todo, parallel or report.stage.parallel, stop):
                if journal is not None:
                    journal.ended(result)
                if result.outcome == LOST and result.target not in retried:
                    retried.add(result.target)
                    again.append(by_name[result.target])
                    on_result(report, result)
                    continue
                report.results[result.target] = result
                report.failures += result.outcome in (FAILED, LOST)
                on_result(report, result)
            todo = again if not stop() else []
        report.seconds = time.perf_counter() - started
        failures = _counted(report)
        if tolerated is not None and len(failures) > tolerated:
            report.status = STOPPED
            first = failures[0]
            report.reason = f"{len(failures)} target(s) failed (the stage tolerates {tolerated}); first: {first.target}"
            break
        report.status = COMPLETE
        later = index < len(reports) - 1
        if later and report.count(UPGRADED) and not _gate(report, say, sleep):
            report.status = PAUSED
    return reports


def _gate(report: StageReport, say: Callable[[str], None], sleep: Callable[[float], None]) -> bool:
    """After a stage that upgraded something: its bake (a wait), then whether the run goes on (not when
    the stage pauses for approval: the same command again goes on, the stage having nothing left)."""
    stage = report.stage
    if stage.bake:
        say(f"stage {stage.name}: baking {stage.bake:g} s before the next stage")
        sleep(stage.bake)
    if stage.pause_after:
        report.reason = f"paused after stage {stage.name} for approval: run the same command again to go on"
        return False
    return True


def _counted(report: StageReport) -> list[Result]:
    """The failures max_failures counts: failed and lost targets (a busy one is another run's, not a failure)."""
    return [r for r in report.results.values() if r.outcome in (FAILED, LOST)]


def incomplete(reports: list[StageReport]) -> Iterator[str]:
    """Names of targets that did not reach the revision: failed, busy, or never attempted."""
    for report in reports:
        for result in report.results.values():
            if result.outcome not in DONE:
                yield result.target
        for target in report.not_attempted:
            yield target.name


def upgrade(
    fleet: Fleet,
    migrations: Migrations,
    staged: list[tuple[Stage, list[Target]]],
    journal: Journal | None,
    command: str,
    parallel: int | None = None,
    on_result: Callable[..., None] = lambda stage, result, running=0: None,
    batch: Callable[[str], Batch] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> list[StageReport]:
    """The whole run: journalled, in worker processes (or batch(stage name): Spark's). `say` gets a
    line for each earlier run that died, before anything else."""
    if journal is not None:
        journal.begin(command, ",".join(migrations.destination) or None)
        for interrupted in journal.interrupted:
            say(interrupted.line())
    outcome = "failed"
    try:
        if batch is not None:
            reports = run_stages(staged, _per_stage(staged, batch), journal, parallel, on_result, say)
        else:
            with Pool(migrations, "upgrade") as pool:
                current = {"stage": ""}
                if journal is not None:
                    pool.on_start = lambda target, pid: journal.started(target.name, current["stage"], pid)

                def batch_of(targets: list[Target], size: int, stop: Callable[[], bool]) -> Iterable[Result]:
                    current["stage"] = next(s.name for s, ts in staged if targets[0] in ts)
                    return pool.run(targets, size, stop)

                def with_running(stage: StageReport, result: Result) -> None:
                    on_result(stage, result, sum(w.target is not None for w in pool.workers))

                reports = run_stages(staged, batch_of, journal, parallel, with_running, say)
        outcome = "complete" if not any(incomplete(reports)) else "incomplete"
        return reports
    finally:
        if journal is not None:
            journal.finish(outcome)


def _per_stage(staged: list[tuple[Stage, list[Target]]], batch: Callable[[str], Batch]) -> Batch:
    def run(targets: list[Target], size: int, stop: Callable[[], bool]) -> Iterable[Result]:
        stage = next(s.name for s, ts in staged if targets[0] in ts)
        return batch(stage)(targets, size, stop)

    return run
