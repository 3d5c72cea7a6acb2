"""The console's actions: retries of chosen messages (one, a selection, a group, everything a filter
matches) back to each message's NServiceBus.FailedQ or to a chosen queue, through the runtime's `retry` (batches, each
one transaction), run as a job that shows progress, may be slowed to a number of batches a second
and cancelled between batches; and the action log, the table the topology's `action_log:` declares and
the migrations create (who, when, what, how many)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .. import errors
from ..runtime.operations import DEFAULT_ERROR_QUEUE, DEFAULT_RETRY_BATCH, RetryReport, resolve, retry, retry_destination
from ..runtime.transport import execute
from ..schema import Kind, TableName

if TYPE_CHECKING:
    from ..runtime.transport import Transport


def deployed_table(transport: Transport, kind: Kind) -> TableName | None:
    """The first table of this kind the deployed blueprint records, None where it has none."""
    specs = transport.blueprint.tables if transport.blueprint is not None else ()
    return next((spec.name for spec in specs if spec.kind is kind), None)


class NoActionLog(errors.Refused):
    """An action asked of a console whose deployed topology declares no action log."""


class Cancelled(errors.SqltransportError):
    """Raised from retry's progress callback: the batch in hand is committed, no other is read."""


@dataclass
class Job:
    """A retry under way or done: what it was asked, its progress, how it ended."""

    id: int
    who: str
    what: str
    chosen: int  # messages chosen when the job started
    report: RetryReport | None = None
    state: str = "running"  # running, done, cancelled, failed
    error: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "who": self.who,
            "what": self.what,
            "chosen": self.chosen,
            "state": self.state,
            "error": self.error,
            "started": self.started.isoformat(),
            "report": None if self.report is None else self.report.to_json(),
        }


class Actions:
    """Runs retries and keeps the action log; one per console."""

    def __init__(self, transport: Transport, error_queue: str = DEFAULT_ERROR_QUEUE, batch_size: int = DEFAULT_RETRY_BATCH) -> None:
        self.transport, self.error_queue, self.batch_size = transport, error_queue, batch_size
        self.jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.error = resolve(transport, error_queue)
        self.log_table = deployed_table(transport, Kind.ACTION_LOG)

    # -- the action log ------------------------------------------------------------------------
    def _statement(self, which: str) -> Any:
        return self.transport.dialect.operations.action_log(self.log_table, self.transport.profile, which)

    def require_log(self) -> None:
        """Actions are logged: without the table the topology declares, none is taken."""
        if self.log_table is None:
            raise NoActionLog(
                "the deployed topology has no action log: add `action_log: {table: ConsoleActions}` to topology.yaml, "
                "compile and upgrade (docs/console.md), then restart the console"
            )

    def log(self, who: str, action: str, target: str, messages: int) -> None:
        self.require_log()
        row = {"Who": who, "Action": action, "Target": target, "Messages": messages}  # At: the server's clock
        with self.transport.engine.begin() as conn:
            execute(conn, self._statement("insert"), row)

    def history(self, limit: int = 100) -> list[dict]:
        """The latest actions, newest first (none where the topology declares no action log)."""
        if self.log_table is None:
            return []
        with self.transport.engine.connect() as conn:
            rows = execute(conn, self._statement("read"), {"Limit": limit}).fetchall()
        return [{"at": str(at), "who": who, "action": action, "target": target, "messages": n} for at, who, action, target, n in rows]

    # -- retries -------------------------------------------------------------------------------
    def retry(
        self, ids: Sequence[str], who: str, what: str, rate: float | None = None, wait: bool = False, to_queue: str | None = None
    ) -> Job:
        """Retry the messages with these row Ids (or NServiceBus.MessageIds), as a job; `rate`: at most
        that many batches a second; `wait`: return once it has ended; `to_queue`: send them all there
        instead of each one's FailedQ (checked before the job starts: UsageError for no queue of the
        deployed topology)."""
        if not ids:
            raise errors.UsageError("no message chosen: nothing to retry")
        self.require_log()
        if rate is not None and rate <= 0:
            raise errors.UsageError(f"rate must be above 0 batches a second, not {rate}")
        if to_queue is not None:
            retry_destination(self.transport, to_queue, error_queue=self.error_queue)
            what += f" to {to_queue}"
        with self._lock:
            job = Job(next(self._ids), who, what, len(ids))
            self.jobs[job.id] = job
        thread = threading.Thread(target=self._run, args=(job, list(ids), rate, to_queue), name=f"console-retry-{job.id}", daemon=True)
        thread.start()
        if wait:
            thread.join()
        return job

    def _run(self, job: Job, ids: list[str], rate: float | None, to_queue: str | None = None) -> None:
        last = time.monotonic()

        def progress(report: RetryReport) -> None:
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
            job.report = retry(
                self.transport,
                error_queue=self.error_queue,
                message_ids=ids,
                batch_size=self.batch_size,
                progress=progress,
                to_queue=to_queue,
            )
            job.state = "done"
        except Cancelled:
            job.state = "cancelled"
        except Exception as exc:  # shown on the job's page and in /api/jobs; the console keeps serving
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        moved = job.report.moved if job.report is not None else 0
        try:
            self.log(job.who, f"retry ({job.state})", job.what, moved)
        except Exception as exc:
            job.error = (job.error or "") + f" (the action log could not be written: {exc})"

    def job(self, job_id: int) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise errors.NotFound(f"no job {job_id}") from None
