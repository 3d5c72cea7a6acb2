"""The console's jobs and its action log. A job is an action over many messages run in a thread of
its own, a batch a transaction, so no request waits for it: retries of chosen messages (one, a
selection, a group, everything a filter matches) back to each message's NServiceBus.FailedQ or to a
chosen queue, and the archive's moves (archive, restore, purge): each the error queue model's
(errorqueue/, `ErrorQueue`), run here as a job. Every job shows its progress, may be slowed to a number of batches a second and
cancelled between batches, and is written to the action log when it ends (done, cancelled or
failed, with the count it moved): the table the topology's `action_log:` declares and the
migrations create (who, when, what, how many). Running jobs stay in memory; of the finished ones
the last `keep_jobs` do (`console --keep-jobs`), so a console running for months holds a bounded
number: the action log is where every action stays."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from .. import errors
from ..defaults import DEFAULT_ERROR_QUEUE, DEFAULT_KEEP_JOBS, DEFAULT_RETRY_BATCH
from ..errorqueue import ErrorQueue, Selection
from ..errorqueue.log import logged_ids
from ..schema import TableName

if TYPE_CHECKING:
    from ..runtime.transport import Transport


class Cancelled(errors.SqltransportError):
    """Raised from a job's progress callback: the batch in hand is committed, no other is read."""


class Report(Protocol):
    """A job's progress: what the work moved so far, in how many batches (the runtime's RetryReport,
    the archive's Moved)."""

    moved: int
    batches: int

    def to_json(self) -> dict: ...


# the work of a job: called with the callback it must call after each batch's commit; returns its report
Work = Callable[[Callable[[Any], None]], Any]


@dataclass(frozen=True)
class Pace:
    """How a job runs, as its request asked (the pages' and the API's `rate` and `wait`, passed on
    together): at most `rate` batches a second (None: as fast as it goes); `wait`: the request
    returns once the job has ended."""

    rate: float | None = None
    wait: bool = False


@dataclass
class Job:
    """An action under way or done: which (retry, archive, restore, purge), what it was asked, its
    progress, how it ended."""

    id: int
    kind: str
    who: str
    what: str
    chosen: int | None  # messages chosen when the job started (None: purge's, known as it goes)
    report: Report | None = None
    state: str = "running"  # running, done, cancelled, failed
    error: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def moved(self) -> int:
        return self.report.moved if self.report is not None else 0

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "who": self.who,
            "what": self.what,
            "chosen": self.chosen,
            "moved": self.moved,
            "state": self.state,
            "error": self.error,
            "started": self.started.isoformat(),
            "report": None if self.report is None else self.report.to_json(),
        }


class Actions:
    """Runs the jobs and keeps the action log; one per console."""

    def __init__(
        self,
        transport: Transport,
        error_queue: str = DEFAULT_ERROR_QUEUE,
        batch_size: int = DEFAULT_RETRY_BATCH,
        keep_jobs: int = DEFAULT_KEEP_JOBS,
    ) -> None:
        """`keep_jobs`: how many finished jobs stay in memory (running ones always do)."""
        self.transport, self.error_queue, self.batch_size, self.keep_jobs = transport, error_queue, batch_size, keep_jobs
        self.queue = ErrorQueue(transport, error_queue, batch_size)
        self.jobs: dict[int, Job] = {}
        self._ended: deque[int] = deque()  # the ids of the finished jobs kept, in the order they ended
        self._last_id = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    # -- the action log (the model's: errorqueue/log.py) ------------------------------------------
    @property
    def log_table(self) -> TableName | None:
        return self.queue.log.table

    def require_log(self) -> None:
        """Actions are logged: without the table the topology declares, none is taken."""
        self.queue.log.require()

    def log(self, who: str, action: str, target: str, messages: int) -> None:
        self.queue.log.write(who, action, target, messages)

    def about(self, message_id: str, limit: int = 100) -> list[dict]:
        """The actions that named this message, oldest first: a message's history."""
        return self.queue.log.about(message_id, limit)

    def history(self, limit: int = 100) -> list[dict]:
        """The latest actions, newest first (none where the topology declares no action log)."""
        return self.queue.log.history(limit)

    # -- jobs --------------------------------------------------------------------------------
    def start(self, kind: str, who: str, what: str, chosen: int | None, work: Work, pace: Pace = Pace(), ids: Sequence[str] = ()) -> Job:
        """Run `work` as a job of this kind in a thread of its own (the action log checked first: no
        unlogged action), at its `pace`; `ids`: the messages it acts on, named in the action log's
        target (the first LOGGED_IDS of them: what a message's history reads)."""
        rate, wait = pace.rate, pace.wait
        self.require_log()
        what = what + logged_ids(ids)
        if rate is not None and not rate > 0:
            raise errors.UsageError(f"rate must be above 0 batches a second, not {rate}")
        with self._lock:
            job = Job(next(self._ids), kind, who, what, chosen)
            self.jobs[job.id] = job
            self._last_id = job.id
        thread = threading.Thread(target=self._run, args=(job, work, rate), name=f"console-{kind}-{job.id}", daemon=True)
        thread.start()
        if wait:
            thread.join()
        return job

    def _run(self, job: Job, work: Work, rate: float | None) -> None:
        last = time.monotonic()

        def progress(report: Report) -> None:
            """After each batch's commit: the job's report, then its cancellation or its pause."""
            nonlocal last
            job.report = report
            if job.cancel.is_set():
                raise Cancelled
            if rate is not None:
                pause = 1.0 / rate - (time.monotonic() - last)
                if pause > 0 and job.cancel.wait(pause):
                    raise Cancelled
                last = time.monotonic()

        try:
            job.report = work(progress)
            state = "done"
        except Cancelled:
            state = "cancelled"
        except Exception as exc:  # shown on the job's page and in /api/jobs; the console keeps serving
            state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        try:
            self.log(job.who, f"{job.kind} ({state})", job.what, job.moved)
        except Exception as exc:
            job.error = (job.error or "") + f" (the action log could not be written: {exc})"
        job.state = state  # only once its action log row is there: a caller that sees it ended finds the row
        self._ended_now(job)

    def _ended_now(self, job: Job) -> None:
        """Count the job among the finished ones kept; drop those that ended first beyond keep_jobs."""
        with self._lock:
            self._ended.append(job.id)
            while len(self._ended) > self.keep_jobs:
                del self.jobs[self._ended.popleft()]

    def listed(self) -> list[Job]:
        """The jobs in memory, newest first (a copy: jobs end and are dropped in their own threads)."""
        with self._lock:
            return sorted(self.jobs.values(), key=lambda job: job.id, reverse=True)

    def retry(
        self, ids: Sequence[str], who: str, what: str, rate: float | None = None, wait: bool = False, to_queue: str | None = None
    ) -> Job:
        """Retry the messages with these row Ids (or NServiceBus.MessageIds), as a job; `to_queue`: send
        them all there instead of each one's FailedQ (checked before the job starts: UsageError for no
        queue of the deployed topology)."""
        if not ids:
            raise errors.UsageError("no message chosen: nothing to retry")
        self.require_log()
        if to_queue is not None:
            self.queue.retry_destination(to_queue)
            what += f" to {to_queue}"
        chosen = list(ids)

        def work(progress: Callable[[Any], None]) -> Report:
            return self.queue.retry(Selection(ids=tuple(chosen)), to_queue=to_queue, progress=progress)

        return self.start("retry", who, what, len(chosen), work, Pace(rate, wait), chosen)

    def job(self, job_id: int) -> Job:
        """The job of this id, else NotFound: for one this console ran and has dropped, saying where its
        action is (the action log)."""
        with self._lock:
            found = self.jobs.get(job_id)
            if found is not None:
                return found
            if 0 < job_id <= self._last_id:
                raise errors.NotFound(
                    f"job {job_id} has ended and is no longer kept: this console keeps its last {self.keep_jobs} finished "
                    "jobs (--keep-jobs); the action log has every action (/log, GET /api/log)"
                )
        raise errors.NotFound(f"no job {job_id}")
