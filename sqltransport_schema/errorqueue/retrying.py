"""Retry: failed messages moved from the error queue back to the queue each failed in (its
NServiceBus.FailedQ), or to a chosen queue, with the headers ServiceControl's retry leaves
(wire.retry_headers). `ErrorQueue.retry` and the public `retry` (the function a service calls; in 0.1.0
`runtime.operations.retry`) run it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from .. import errors, wire
from ..defaults import DEFAULT_ERROR_QUEUE, DEFAULT_RETRY_BATCH
from ..runtime.deployed import FIRST_KEY, blueprint_specs, resolve
from ..runtime.deployed import existing as existing_tables
from ..runtime.transport import execute, execute_many
from ..schema import Kind, TableName
from .selection import Selection

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.12; SQLAlchemy depends on typing_extensions

    from ..runtime.transport import Transport

LEFT_NO_FAILED_Q = "no NServiceBus.FailedQ header"
LEFT_UNREADABLE = "headers cannot be read"
LEFT_NOT_AN_ADDRESS = "FailedQ is not a queue address"
LEFT_UNKNOWN = "FailedQ names no queue of the deployed blueprint"
LEFT_MISSING = "FailedQ's table is missing from the database"
LEFT_ERROR_QUEUE = "FailedQ names the error queue itself"


@dataclass
class RetryReport:
    """What `retry` did (or, dry run, would do): messages moved per queue, and those left in the error queue and why."""

    error_queue: str
    dry_run: bool
    moved: int = 0  # moved (or, dry run, that would move)
    batches: int = 0
    scanned: int = 0  # messages of the error queue read
    by_queue: dict[str, int] = field(default_factory=dict)  # destination address -> messages
    left: dict[tuple[str | None, str], int] = field(default_factory=dict)  # (FailedQ, why) -> messages left in place
    not_found: list[str] = field(default_factory=list)  # --message-id values no message of the error queue has

    @property
    def left_count(self) -> int:
        return sum(self.left.values())

    def to_json(self) -> dict:
        return {
            "error_queue": self.error_queue,
            "dry_run": self.dry_run,
            "moved": self.moved,
            "batches": self.batches,
            "scanned": self.scanned,
            "by_queue": [{"address": a, "messages": n} for a, n in sorted(self.by_queue.items())],
            "left": [{"failed_queue": q, "reason": why, "messages": n} for (q, why), n in sorted(self.left.items(), key=str)],
            "not_found": self.not_found,
        }


class _Destinations:
    """FailedQ text -> the queue table it names, or why none (one of the LEFT_ reasons), found once per distinct value."""

    def __init__(self, transport: Transport, queues: dict[tuple, TableName], existing: dict[tuple, Any], error_key: tuple) -> None:
        self.transport, self.queues, self.existing, self.error_key = transport, queues, existing, error_key
        self.found: dict[str, TableName | str] = {}

    def __call__(self, failed_q: str) -> TableName | str:
        found = self.found.get(failed_q)
        if found is None:
            found = self.found[failed_q] = self._resolve(failed_q)
        return found

    def _resolve(self, failed_q: str) -> TableName | str:
        try:
            key = self.transport.dialect.table_key(resolve(self.transport, failed_q))
        except (ValueError, TypeError):
            return LEFT_NOT_AN_ADDRESS
        name = self.queues.get(key)
        if name is None:
            return LEFT_UNKNOWN
        if key == self.error_key:
            return LEFT_ERROR_QUEUE
        if key not in self.existing:
            return LEFT_MISSING
        return name


# why a queue chosen as a retry's destination cannot be one (the LEFT_ reason -> the refusal's words)
_NOT_A_DESTINATION = {
    LEFT_NOT_AN_ADDRESS: "is not a queue address",
    LEFT_UNKNOWN: "is no queue of the deployed topology",
    LEFT_ERROR_QUEUE: "is the error queue itself",
    LEFT_MISSING: "is a queue of the topology whose table is missing from the database",
}


def _chosen(destination: _Destinations, address: str) -> TableName:
    found = destination(address)
    if isinstance(found, TableName):
        return found
    raise errors.UsageError(f"retry to {address!r}: that {_NOT_A_DESTINATION[found]}; choose a queue of the deployed topology")


def retry_destination(transport: Transport, address: str, *, error_queue: str = DEFAULT_ERROR_QUEUE) -> TableName:
    """The queue table a retry `to_queue=address` would send to; UsageError saying why not (no queue
    of the deployed topology, the error queue itself, its table missing): what a caller checks before
    starting a retry in the background."""
    dialect = transport.dialect
    specs = blueprint_specs(transport)
    queues = {dialect.table_key(s.name): s.name for s in specs if s.kind is Kind.QUEUE}
    with transport.engine.connect() as conn, conn.begin():
        existing = existing_tables(transport, conn, specs)
    return _chosen(_Destinations(transport, queues, existing, dialect.table_key(resolve(transport, error_queue))), address)


class RetryOptions(TypedDict, total=False):
    """How a retry runs, whatever it chooses: retry's and retry_selected's keyword arguments after
    the choice, declared once. error_queue (default "error"), dry_run (default False), batch_size
    (default DEFAULT_RETRY_BATCH), progress, to_queue: as retry's docstring says."""

    error_queue: str
    dry_run: bool
    batch_size: int
    progress: Callable[[RetryReport], None] | None
    to_queue: str | None


def retry(
    transport: Transport,
    *,
    all_messages: bool = False,
    failed_queue: str | None = None,
    message_ids: Sequence[str] = (),
    **options: Unpack[RetryOptions],
) -> RetryReport:
    """Move failed messages from the error queue back to the queue their NServiceBus.FailedQ names:
    all of them, those of one failed queue, or those with the given message ids (the
    NServiceBus.MessageId header, or the row's Id). Batches of `batch_size` in FIFO order, each in
    one transaction of its own (the sends into the destinations and the deletes from the error
    queue commit together: a run cut at any point and run again loses and doubles nothing). Headers
    as ServiceControl's retry leaves them (wire.retry_headers). A message whose FailedQ names no
    deployed queue (or none at all) is left in place and counted in `left`. `progress` is called
    after every batch. `to_queue`: send every chosen message to that queue instead of its FailedQ
    (a queue of the deployed topology, else UsageError before any message moves)."""
    try:
        selection = Selection.chosen(all_messages, failed_queue, tuple(message_ids))
    except errors.UsageError:
        raise errors.UsageError("choose the messages to retry: all of them, one failed queue, or message ids (exactly one)") from None
    return retry_selected(transport, selection, **options)


def retry_selected(
    transport: Transport,
    selection: Selection,
    *,
    error_queue: str = DEFAULT_ERROR_QUEUE,
    dry_run: bool = False,
    batch_size: int = DEFAULT_RETRY_BATCH,
    progress: Callable[[RetryReport], None] | None = None,
    to_queue: str | None = None,
) -> RetryReport:
    """retry() of a selection read off the error queue in its order (Selection.scan: every message,
    one failed queue's, ids): what `ErrorQueue.retry` runs, a filter first turned into its ids."""
    if not selection.scan or not selection.chooses:
        raise errors.UsageError("retry: choose every message, one failed queue, or message ids")
    failed_queue, message_ids = selection.failed_queue, selection.ids
    if batch_size < 1:
        raise errors.UsageError(f"batch size must be at least 1, not {batch_size}")
    dialect, profile = transport.dialect, transport.profile
    specs = blueprint_specs(transport)
    queues = {dialect.table_key(s.name): s.name for s in specs if s.kind is Kind.QUEUE}
    error_name = resolve(transport, error_queue)
    error_key = dialect.table_key(error_name)
    if error_key not in queues:
        raise errors.UsageError(f"error queue {error_queue}: no queue of the deployed blueprint has that address")
    error_name = queues[error_key]
    wanted_key = dialect.table_key(resolve(transport, failed_queue)) if failed_queue is not None else None
    wanted = _Wanted(wanted_key, {i.lower(): i for i in message_ids})
    report = RetryReport(transport.address_of(error_name, as_engine_knows=True), dry_run)
    read = dialect.live_bus.error_batch(error_name, profile, lock=not dry_run)
    delete = dialect.live_bus.delete_retried(error_name, profile)
    after: Any = FIRST_KEY
    with transport.engine.connect() as conn:
        with conn.begin():
            existing = existing_tables(transport, conn, specs)
        if error_key not in existing:
            raise errors.UsageError(f"error queue {report.error_queue} is missing from the database")
        destination = _Destinations(transport, queues, existing, error_key)
        chosen = _chosen(destination, to_queue) if to_queue is not None else None
        while True:
            with conn.begin():
                rows = execute(conn, read, {"After": after, "BatchSize": batch_size}).fetchall()
                if not rows:
                    break
                after = rows[-1][0]
                sends: dict[TableName, list[tuple[bytes | None, str]]] = {}
                keys = []
                for key, row_id, raw, body in rows:
                    picked = _pick(raw, str(row_id), wanted, destination, report, chosen)
                    if picked is None:
                        continue
                    target, headers = picked
                    sends.setdefault(target, []).append((None if body is None else bytes(body), headers))
                    keys.append({"Key": key})
                if not dry_run:
                    for target, messages in sends.items():
                        transport.queue(target).send_many(conn, messages)
                    execute_many(conn, delete, keys)
            report.batches += 1
            report.scanned += len(rows)
            for target, messages in sends.items():
                address = transport.address_of(target, as_engine_knows=True)
                report.by_queue[address] = report.by_queue.get(address, 0) + len(messages)
                report.moved += len(messages)
            if progress is not None:
                progress(report)
    report.not_found = [original for lowered, original in wanted.ids.items() if lowered not in wanted.seen]
    return report


@dataclass(frozen=True)
class _Wanted:
    """What a retry's selection takes, read once before its batches and asked of each message: the
    failed queue's table key (or None), the ids (lowered -> as given), and those seen so far (the
    rest are the report's not_found)."""

    key: tuple | None
    ids: dict[str, str]
    seen: set[str] = field(default_factory=set)


def _pick(
    raw: str, row_id: str, wanted: _Wanted, destination: _Destinations, report: RetryReport, chosen: TableName | None = None
) -> tuple[TableName, str] | None:
    """(destination, headers to send) for a message of the error queue the selection takes and that
    can go back (to `chosen`, where given, else to its FailedQ); None for one it does not take, or
    that stays (counted in report.left)."""
    try:
        headers = wire.decode_headers(raw)
    except wire.PoisonHeaders:
        headers = None
    if wanted.ids:
        ids = {row_id.lower()}
        if headers is not None and wire.MESSAGE_ID in headers:
            ids.add(headers[wire.MESSAGE_ID].lower())
        matched = ids & wanted.ids.keys()
        if not matched:
            return None
        wanted.seen.update(matched)
    failed_q = headers.get(wire.FAILED_Q) if headers is not None else wire.failed_q_of_unreadable(raw)
    if wanted.key is not None:
        if failed_q is None:
            return None
        try:
            if destination.transport.dialect.table_key(resolve(destination.transport, failed_q)) != wanted.key:
                return None
        except (ValueError, TypeError):
            return None
    if headers is None:  # never sent back: its failure headers cannot be taken off (status counts it, retry says why it stays)
        why = LEFT_UNREADABLE
    elif chosen is not None:
        return chosen, wire.encode_headers(wire.retry_headers(headers))
    elif failed_q is None:
        why = LEFT_NO_FAILED_Q
    else:
        target = destination(failed_q)
        if isinstance(target, TableName):
            return target, wire.encode_headers(wire.retry_headers(headers))
        why = target
    report.left[(failed_q, why)] = report.left.get((failed_q, why), 0) + 1
    return None
