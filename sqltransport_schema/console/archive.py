"""The error queue's archive: failed messages moved into the archive table the topology declares
(`archive:` on the queue, created by the migrations) instead of being deleted, restored from it back
into the error queue, and purged from it by age. Every move is a batch of messages in one
transaction (the delete from one table and the insert into the other commit together); the SQL is
the engine's (`dialect.operations.archive`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import errors
from ..runtime.operations import DEFAULT_ERROR_QUEUE, DEFAULT_RETRY_BATCH, resolve
from ..runtime.transport import execute
from ..schema import Kind, TableName

if TYPE_CHECKING:
    from ..runtime.transport import Transport

PAGE_SIZE = 50


class NoArchive(errors.Refused):
    """The error queue has no archive table in the deployed topology."""


@dataclass
class Moved:
    """What an archive, restore or purge did: messages moved (or purged), batches, asked but not found."""

    action: str
    messages: int = 0
    batches: int = 0
    not_found: int = 0

    def to_json(self) -> dict:
        return {"action": self.action, "messages": self.messages, "batches": self.batches, "not_found": self.not_found}


@dataclass
class Archived:
    key: int
    id: str
    archived_at: str
    why: str
    by: str

    def to_json(self) -> dict:
        return {"key": self.key, "id": self.id, "archived_at": self.archived_at, "why": self.why, "by": self.by}


def _batches(values: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


class Archive:
    """The error queue and its archive table, as the deployed blueprint records them."""

    def __init__(self, transport: Transport, error_queue: str = DEFAULT_ERROR_QUEUE, batch_size: int = DEFAULT_RETRY_BATCH) -> None:
        if batch_size < 1:
            raise errors.UsageError(f"batch size must be at least 1, not {batch_size}")
        self.transport, self.batch_size = transport, batch_size
        self.queue = resolve(transport, error_queue)
        self.table = self._declared(transport, self.queue)

    @staticmethod
    def _declared(transport: Transport, queue: TableName) -> TableName | None:
        specs = transport.blueprint.tables if transport.blueprint is not None else ()
        key = transport.dialect.table_key
        return next(
            (
                s.name
                for s in specs
                if s.kind is Kind.ARCHIVE and key(TableName(s.queue or "", s.name.schema, s.name.catalog)) == key(queue)
            ),
            None,
        )

    def _statements(self, which: str) -> list[Any]:
        if self.table is None:
            raise NoArchive(
                f"the error queue {self.queue.table} has no archive table: add `archive: {self.queue.table}_archive` to its entry "
                "under queues: in topology.yaml, compile and upgrade (docs/console.md), then restart the console"
            )
        return self.transport.dialect.operations.archive(which, self.queue, self.table, self.transport.profile)

    def _move(self, action: str, statements: list[Any], rows: list[dict]) -> Moved:
        """Each batch of rows in one transaction: every statement for each row; the first one's row
        count is what moved."""
        done = Moved(action)
        for batch in _batches(rows, self.batch_size):
            with self.transport.engine.begin() as conn:
                for row in batch:
                    moved = execute(conn, statements[0], row).rowcount
                    for statement in statements[1:]:
                        execute(conn, statement, row)
                    done.messages += max(moved, 0)
                    done.not_found += moved == 0
            done.batches += 1
        return done

    def archive(self, ids: Sequence[str], why: str, by: str) -> Moved:
        """Move the error queue's messages with these row Ids (GUIDs, as every transport writes them) into the archive."""
        for i in ids:
            try:
                uuid.UUID(i)
            except (TypeError, ValueError):
                raise errors.UsageError(f"ids: {i!r} is not a message's row Id (a GUID)") from None
        statements = self._statements("archive")
        return self._move("archive", statements, [{"Id": i, "Why": why, "By": by} for i in dict.fromkeys(ids)])

    def restore(self, keys: Sequence[int]) -> Moved:
        """Move the archived messages with these archive keys back into the error queue."""
        statements = self._statements("restore")
        return self._move("restore", statements, [{"Key": k} for k in dict.fromkeys(keys)])

    def purge(self, older_than_seconds: float) -> Moved:
        """Delete archived messages archived more than `older_than_seconds` ago, a batch a transaction."""
        if older_than_seconds < 0:
            raise errors.UsageError(f"older_than: give an age of 0 seconds or more, not {older_than_seconds}")
        [statement] = self._statements("purge")
        done = Moved("purge")
        while True:
            with self.transport.engine.begin() as conn:
                gone = execute(conn, statement, {"Seconds": older_than_seconds, "BatchSize": self.batch_size}).rowcount
            done.batches += 1
            done.messages += gone
            if gone < self.batch_size:
                return done

    def page(self, after: int | None = None, limit: int = PAGE_SIZE) -> tuple[list[Archived], int | None]:
        """Up to `limit` archived messages after the key `after`, oldest archived first (keyset paging);
        and the key the next page starts after (None on the last page)."""
        if limit < 1:
            raise errors.UsageError(f"limit: give 1 or more, not {limit}")
        [statement] = self._statements("page")
        with self.transport.engine.connect() as conn:
            rows = execute(conn, statement, {"After": -1 if after is None else after, "Limit": limit + 1}).fetchall()
        shown = [Archived(int(k), str(i), str(at), why, by) for k, i, at, why, by in rows[:limit]]
        return shown, (shown[-1].key if len(rows) > limit else None)

    def count(self) -> int:
        [statement] = self._statements("count")
        with self.transport.engine.connect() as conn:
            return int(execute(conn, statement).fetchone()[0])
