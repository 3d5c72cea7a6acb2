"""fleet upgrade: the stages in order (or as the graph their depends_on make, in waves of the stages
whose dependencies completed), each target's work in a worker process, on_error and max_failures
deciding whether a stage goes on and whether the next one starts, a stage's gate (bake, pause,
check) between it and the stages after it.

A stage starts only when the one before it (each of its depends_on) succeeded (its failures within what it tolerates).
A target whose worker died is run once more by a new worker (its database tells that worker where
it is); a second loss is a failure. Every attempt is journalled by this process alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

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
# Several stages' targets at once: (targets, workers, stop) per stage -> (the stage's index, a result)
Lanes = Callable[[list[tuple[list[Target], int, Callable[[], bool]]]], Iterable[tuple[int, Result]]]
# A stage's targets read as `fleet status --check` reads them: a line for each that is not clean
Verify = Callable[[list[Target], int], list[str]]


def one_at_a_time(batch: Batch) -> Lanes:
    """Lanes of a batch that runs one list of targets at a time (Spark's): each stage after the other."""

    def run(lanes: list[tuple[list[Target], int, Callable[[], bool]]]) -> Iterator[tuple[int, Result]]:
        for index, (targets, size, stop) in enumerate(lanes):
            for result in batch(targets, size, stop):
                yield index, result

    return run


@dataclass(frozen=True)
class RunSettings:
    """How a run of stages goes, as the command line asked, in one object (the runner passes it on
    whole): `parallel` targets at once (None: each stage's own), `on_result` after each target (the
    progress line; upgrade's also gets the workers running), `say` a line for the user, `check_all`
    every stage checked before the stages after it (as a stage's check: true is), `sleep` a bake's wait."""

    parallel: int | None = None
    on_result: Callable[..., None] = lambda stage, result, running=0: None
    say: Callable[[str], None] = lambda line: None
    check_all: bool = False
    sleep: Callable[[float], None] = time.sleep


def run_stages(
    staged: list[tuple[Stage, list[Target]]],
    lanes: Lanes,
    journal: Journal | None,
    settings: RunSettings = RunSettings(),
    dependencies: dict[str, tuple[str, ...]] | None = None,
    verify: Verify | None = None,
) -> list[StageReport]:
    """Run the stages through lanes (the pool's, or Spark's one at a time) in waves: each wave the
    stages whose dependencies (default: the stage before) completed, at once. After a stage, while
    stages remain, its gate: its bake and pause (when it upgraded something), its check (verify).
    The run stops after a wave in which a stage stopped or paused."""
    parallel, on_result, say, sleep, check_all = settings.parallel, settings.on_result, settings.say, settings.sleep, settings.check_all
    reports = [StageReport(stage, targets) for stage, targets in staged]
    by_name = {r.stage.name: r for r in reports}
    if dependencies is None:
        dependencies = {r.stage.name: (reports[i - 1].stage.name,) if i else () for i, r in enumerate(reports)}
    pending = list(reports)
    while pending:
        wave = [r for r in pending if all(d not in by_name or by_name[d].status == COMPLETE for d in dependencies.get(r.stage.name, ()))]
        if not wave:
            break
        pending = [r for r in pending if r not in wave]
        _run_wave(wave, lanes, journal, parallel, on_result)
        for report in wave:
            if report.status == COMPLETE and report.targets and pending:
                _gate(report, say, sleep, verify if (report.stage.check or check_all) else None)
        if any(r.status in (STOPPED, PAUSED) for r in wave):
            break
    return reports


def _run_wave(
    wave: list[StageReport],
    lanes: Lanes,
    journal: Journal | None,
    parallel: int | None,
    on_result: Callable[[StageReport, Result], None],
) -> None:
    """The wave's stages at once, each with its own workers, on_error and max_failures; a target whose
    worker died is run once more. Each stage ends COMPLETE or STOPPED."""
    active = [r for r in wave if r.targets]
    for report in wave:
        if not report.targets:
            report.status = COMPLETE
    tolerated = {id(r): r.stage.tolerated(len(r.targets)) for r in active}

    def stopper(report: StageReport) -> Callable[[], bool]:
        return lambda: tolerated[id(report)] is not None and report.failures > tolerated[id(report)]  # type: ignore[operator]

    stops = {id(r): stopper(r) for r in active}
    todo = {id(r): list(r.targets) for r in active}
    retried: set[str] = set()
    by_target = {t.name: t for r in active for t in r.targets}
    started = time.perf_counter()
    while any(todo.values()):
        running = [r for r in active if todo[id(r)]]
        again: dict[int, list[Target]] = {id(r): [] for r in running}
        work = [(todo[id(r)], parallel or r.stage.parallel, stops[id(r)]) for r in running]
        for lane, result in lanes(work):
            report = running[lane]
            if journal is not None:
                journal.ended(result)
            if result.outcome == LOST and result.target not in retried:
                retried.add(result.target)
                again[id(report)].append(by_target[result.target])
                on_result(report, result)
                continue
            report.results[result.target] = result
            report.failures += result.outcome in (FAILED, LOST)
            report.seconds = time.perf_counter() - started
            on_result(report, result)
        todo = {id(r): (again.get(id(r), []) if not stops[id(r)]() else []) for r in active}
    for report in active:
        failures = _counted(report)
        limit = tolerated[id(report)]
        if limit is not None and len(failures) > limit:
            report.status = STOPPED
            report.reason = f"{len(failures)} target(s) failed (the stage tolerates {limit}); first: {failures[0].target}"
        else:
            report.status = COMPLETE


def _gate(report: StageReport, say: Callable[[str], None], sleep: Callable[[float], None], verify: Verify | None) -> None:
    """After a stage, before the stages after it: when it upgraded something, its bake (a wait), then
    its pause for approval (the same command again goes on, the stage having nothing left); with a
    check, every target of it clean as `fleet status --check` reads it, else the run stops here."""
    stage = report.stage
    upgraded = report.count(UPGRADED)
    if upgraded and stage.bake:
        say(f"stage {stage.name}: baking {stage.bake:g} s before the next stage")
        sleep(stage.bake)
    if verify is not None:
        say(f"stage {stage.name}: checking its {len(report.targets)} target(s) before the next stage")
        unclean = verify(report.targets, stage.parallel)
        if unclean:
            report.status = STOPPED
            report.reason = (
                f"the check after stage {stage.name} found {len(unclean)} target(s) not clean: {'; '.join(unclean[:5])}"
                + (f" and {len(unclean) - 5} more" if len(unclean) > 5 else "")
                + " (fleet status --check --stage "
                + f"{stage.name} shows them; fix them and run the same command again)"
            )
            return
    if upgraded and stage.pause_after:
        report.status = PAUSED
        report.reason = f"paused after stage {stage.name} for approval: run the same command again to go on"


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
    settings: RunSettings = RunSettings(),
    batch: Callable[[str], Batch] | None = None,
) -> list[StageReport]:
    """The whole run: journalled, in worker processes (or batch(stage name): Spark's, a stage at a
    time). `settings.say` gets a line for each earlier run that died, before anything else."""
    if journal is not None:
        journal.begin(command, ",".join(migrations.destination) or None)
        for interrupted in journal.interrupted:
            settings.say(interrupted.line())
    outcome = "failed"
    stage_of = {t.name: s.name for s, ts in staged for t in ts}
    with ExitStack() as stack:
        checker = None if migrations.settings.dry_run else Checker(migrations, stack)
        options = {"dependencies": fleet.dependencies(), "verify": checker}
        try:
            if batch is not None:
                lanes = one_at_a_time(_per_stage(staged, batch))
                reports = run_stages(staged, lanes, journal, settings, **options)
            else:
                pool = stack.enter_context(Pool(migrations, "upgrade"))
                if journal is not None:
                    pool.on_start = lambda target, pid: journal.started(target.name, stage_of[target.name], pid)

                def with_running(stage: StageReport, result: Result) -> None:
                    settings.on_result(stage, result, sum(w.target is not None for w in pool.workers))

                reports = run_stages(staged, pool.run_lanes, journal, replace(settings, on_result=with_running), **options)
            outcome = "complete" if not any(incomplete(reports)) and not any(r.status == STOPPED for r in reports) else "incomplete"
            return reports
        finally:
            if journal is not None:
                journal.finish(outcome)


class Checker:
    """A stage's targets read as `fleet status --check` reads them (the destination the upgrade's;
    worker processes of their own, started at the first check): the lines of those not clean."""

    def __init__(self, migrations: Migrations, stack: ExitStack):
        self.migrations, self.stack = migrations, stack
        self.pool: Pool | None = None

    def __call__(self, targets: list[Target], parallel: int) -> list[str]:
        from . import status

        if self.pool is None:
            checking = Migrations(replace(self.migrations.settings, check=True))
            self.pool = self.stack.enter_context(Pool(checking, "status"))
        results = {r.target: r for r in self.pool.run(targets, parallel, lambda: False)}
        head = ",".join(self.migrations.destination) or None
        rows = [status.Row(t, results[t.name]) for t in targets]
        return [status.describe(row, head) for row in rows if not row.ok]


def _per_stage(staged: list[tuple[Stage, list[Target]]], batch: Callable[[str], Batch]) -> Batch:
    def run(targets: list[Target], size: int, stop: Callable[[], bool]) -> Iterable[Result]:
        stage = next(s.name for s, ts in staged if targets[0] in ts)
        return batch(stage)(targets, size, stop)

    return run
