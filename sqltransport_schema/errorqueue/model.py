"""`ErrorQueue`: the error queue as one model. Its groups, pages, totals and messages (reading.py),
retries back to each message's queue (retry.py), the moves into its archive, back and out of it
(moves.py), and edit and retry; each chosen by a `Selection` (selection.py). The console's routes
and the command line (`retry`, `archive`, `restore`, `purge`) call these methods; neither reads the
error queue's headers or runs its statements itself (tests/test_layers.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .. import errors, wire
from ..defaults import DEFAULT_ERROR_QUEUE, DEFAULT_RETRY_BATCH
from ..runtime.deployed import resolve
from ..runtime.transport import execute
from ..schema import Kind
from . import reading
from .log import ActionLog
from .moves import Archive, Archived, Move
from .reading import PAGE_SIZE, TOTAL_CAP, Group, Message, Page
from .retrying import RetryReport, retry_destination, retry_selected
from .selection import NO_FILTER, Selection, read_value

if TYPE_CHECKING:
    from ..runtime.transport import Transport
    from ..schema import TableName

EDIT_OF = "ServiceControl.EditOf"  # the header an edited copy names its original by (as ServicePulse's)


@dataclass(frozen=True)
class Edit:
    """An edit of a failed message, checked and ready to send (ErrorQueue.edit)."""

    original: Message
    address: str  # where the edited copy goes: the chosen queue, else its FailedQ
    headers: dict[str, str]
    body: bytes
    changed: list[str]  # the headers that differ from the original's
    body_changed: bool

    @property
    def what(self) -> str:
        """The edit in an action log's words."""
        headers = "headers " + (", ".join(self.changed) if self.changed else "unchanged")
        return headers + ("; body changed" if self.body_changed else "; body unchanged")


class ErrorQueue:
    """The deployed topology's error queue (and its archive table, where it declares one)."""

    def __init__(self, transport: Transport, error_queue: str = DEFAULT_ERROR_QUEUE, batch_size: int = DEFAULT_RETRY_BATCH) -> None:
        if batch_size < 1:
            raise errors.UsageError(f"batch size must be at least 1, not {batch_size}")
        self.transport, self.address, self.batch_size = transport, error_queue, batch_size
        self.table = resolve(transport, error_queue)
        self.archived = Archive(transport, error_queue, batch_size)
        self.log = ActionLog(transport)

    # -- what it is ----------------------------------------------------------------------------
    @cached_property
    def body_string(self) -> bool:
        """Whether the error queue has BodyString (what the body filter reads)."""
        return reading.has_body_string(self.transport, self.address)

    @cached_property
    def queues(self) -> list[str]:
        """The addresses a retry may be sent to instead of the FailedQ: the deployed topology's
        queues but the error queue (a retry checks its choice itself)."""
        dialect = self.transport.dialect
        error = dialect.table_key(self.table)
        specs = self.transport.blueprint.tables if self.transport.blueprint is not None else ()
        return sorted(
            self.transport.address_of(s.name, as_engine_knows=True)
            for s in specs
            if s.kind is Kind.QUEUE and dialect.table_key(s.name) != error
        )

    def may_delete(self) -> bool:
        """Whether the database login may delete from the error queue (not a `grants --monitor`
        login): a DELETE of no row, rolled back; False where the engine refuses it as permission denied."""
        statement = self.transport.dialect.live_bus.write_probe(self.table, self.transport.profile)
        with self.transport.engine.connect() as conn:
            try:
                with conn.begin() as tx:
                    execute(conn, statement)
                    tx.rollback()
            except Exception as exc:
                if self.transport.dialect.permission_denied(exc):
                    return False
                raise
        return True

    # -- reading -------------------------------------------------------------------------------
    def groups(self, by: str = "exception", selection: Selection = NO_FILTER, sort: str = "count") -> list[Group]:
        """The messages `selection` matches, grouped `by` one of GROUPINGS, in the order `sort` (GROUP_SORTS)."""
        return reading.groups(self.transport, by, selection, self.address, sort)

    def resolved(self, selection: Selection) -> Selection:
        """`selection` with its group id (if any) as the group's fields; NotFound for no such group now."""
        return reading.resolved(self.transport, selection, self.address)

    def page(self, selection: Selection = NO_FILTER, after: int | None = None, limit: int = PAGE_SIZE, sort: str = "time_asc") -> Page:
        """Up to `limit` messages `selection` matches after the key `after` (keyset paging), in `sort` (PAGE_SORTS)."""
        return reading.page(self.transport, selection, after, limit, self.address, sort)

    def count(self, selection: Selection = NO_FILTER, cap: int = TOTAL_CAP) -> int:
        """How many messages `selection` matches, counted up to `cap` (a list's total)."""
        return reading.count(self.transport, selection, self.address, cap)

    def message(self, key: int) -> Message:
        """One message by its key, its headers read by `wire`; NotFound if it is gone."""
        return reading.message(self.transport, key, self.address)

    def groups_of(self, key: int) -> dict[str, Group]:
        """The groups (one of each grouping) the message with this key is in."""
        return reading.groups_of(self.transport, key, self.address)

    def ids(self, selection: Selection) -> list[str]:
        """The ids `selection` names: its own, else the row Ids of every message it matches now (every
        one with `all_messages`), read page by page."""
        if selection.ids:
            return list(dict.fromkeys(selection.ids))
        if not selection.chooses:
            raise errors.UsageError("no message chosen: choose every message, a filter or message ids")
        selection = replace(selection, all_messages=False)
        if not selection.by_address or selection.failed_queue is None:
            return reading.ids_of(self.transport, selection, self.address)
        ids: list[str] = []
        for written in self._failed_queues_named(selection.failed_queue):
            ids += reading.ids_of(self.transport, replace(selection, failed_queue=written, by_address=False), self.address)
        return ids

    def _failed_queues_named(self, address: str) -> list[str]:
        """The FailedQ values, as the messages write them, that name the queue of this address (as
        retry resolves them: `Sales` and `Sales@[public]` alike), read from the groups by failed queue."""
        dialect = self.transport.dialect
        wanted = dialect.table_key(resolve(self.transport, address))
        found = []
        for group in self.groups("failed_queue"):
            [written] = group.values
            try:
                if written is not None and dialect.table_key(resolve(self.transport, read_value(written))) == wanted:
                    found.append(written)
            except (ValueError, TypeError):  # no address: no queue's
                continue
        return found

    # -- actions -------------------------------------------------------------------------------
    def retry_destination(self, address: str) -> TableName:
        """The queue a retry to `address` would send to; UsageError saying why not."""
        return retry_destination(self.transport, address, error_queue=self.address)

    def retry(
        self,
        selection: Selection,
        *,
        dry_run: bool = False,
        to_queue: str | None = None,
        progress: Callable[[RetryReport], None] | None = None,
    ) -> RetryReport:
        """Move the messages `selection` chooses back to the queue each failed in (or `to_queue`), a
        batch a transaction; a filter is first read into its messages' ids."""
        if not selection.scan:
            selection = Selection(ids=tuple(self.ids(selection)))
            if not selection.ids:  # the filter matches nothing now
                return RetryReport(self.transport.address_of(self.table, as_engine_knows=True), dry_run)
        return retry_selected(
            self.transport,
            selection,
            error_queue=self.address,
            dry_run=dry_run,
            batch_size=self.batch_size,
            progress=progress,
            to_queue=to_queue,
        )

    def archive(self, selection: Selection, why: str, by: str) -> tuple[list[str], Move]:
        """The row Ids of the messages `selection` chooses, and their move into the archive (run it
        with a progress callback, or None); NoArchive where the topology declares none."""
        if "\x00" in why:
            raise errors.UsageError("why: the text holds a NUL character")
        ids = self.ids(selection)
        return ids, self.archived.archive(ids, why, by)[1]

    def restore(self, keys: Sequence[int] = (), ids: Sequence[str] = (), all_messages: bool = False) -> tuple[list[str], Move, list[str]]:
        """The archived messages with these archive keys, these row Ids, or every one: their row Ids,
        their move back into the error queue, and the Ids asked that no archived message has."""
        if sum((bool(keys), bool(ids), all_messages)) != 1:
            raise errors.UsageError("choose the archived messages to restore: archive keys, message ids, or all of them (exactly one)")
        absent: list[str] = []
        if not keys:
            keys, absent = self.archived.keys(ids)
        chosen = self.archived.ids_of(keys)
        return chosen, self.archived.restore(keys)[1], absent

    def purge(self, older_than_seconds: float) -> Move:
        """The deletion of the messages archived more than `older_than_seconds` ago, a batch a transaction."""
        return self.archived.purge(older_than_seconds)

    def archived_page(self, after: int | None = None, limit: int = PAGE_SIZE) -> tuple[list[Archived], int | None]:
        return self.archived.page(after, limit)

    def archived_count(self) -> int:
        return self.archived.count()

    def edit(self, key: int, headers: Any, body: Any, to_queue: str | None = None) -> Edit:
        """ServicePulse's edit and retry, checked: the message with this key, these headers (a JSON
        object's text, or the object) and this body (text, sent as UTF-8) for a copy sent to `to_queue`
        (else the edited headers' FailedQ). UsageError, before anything moves, for headers that are no
        JSON object of texts, no queue to send to, or a body not shown whole as text."""
        if isinstance(headers, str):  # as the transport reads them: what it could not read is no copy to send
            try:
                headers = wire.decode_headers(headers)
            except wire.PoisonHeaders as exc:
                raise errors.UsageError(f"headers: {exc.reason} (give a JSON object of names and texts)") from None
        if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise errors.UsageError("headers: give a JSON object of names and texts")
        if not isinstance(body, str):
            raise errors.UsageError("body: give the body as text")
        original = self.message(key)
        address = to_queue or headers.get(wire.FAILED_Q, "")
        if not address:
            raise errors.UsageError(f"no queue to send the edited copy to: give to_queue, or a {wire.FAILED_Q} header")
        self.retry_destination(address)
        if original.body_kind == "binary" or original.body_note is not None and original.body_note.startswith("cut"):
            raise errors.UsageError("this message's body is not shown whole as text (binary, or cut): it cannot be edited here")
        before = original.headers or {}
        changed = sorted(n for n in set(before) | set(headers) if before.get(n) != headers.get(n))
        return Edit(original, address, headers, body.encode("utf-8"), changed, body != original.body)

    def send_edit(self, edit: Edit) -> str:
        """The edited copy sent as a retry sends it, under a new id naming the original (EDIT_OF): its id.
        The caller has archived the original first (ServicePulse keeps it)."""
        sent = dict(wire.retry_headers(edit.headers))
        sent[EDIT_OF] = edit.original.id
        with self.transport.engine.begin() as conn:
            return str(self.transport.address_queue(edit.address).send(conn, edit.body, sent))
