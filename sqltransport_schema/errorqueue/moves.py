"""The error queue's archive: failed messages moved into the archive table the topology declares
(`archive:` on the queue, created by the migrations) instead of being deleted, restored from it back
into the error queue, and purged from it by age. Each of the three checks what it was asked at
once and returns the work, which the console runs as a job (console/actions.py) and the command
line at once (`archive`, `restore`, `purge`): a batch of messages a transaction (the delete from one
table and the insert into the other commit together), the progress callback called after each
commit. The SQL is the engine's (`dialect.live_bus.archive`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import errors
from ..defaults import DEFAULT_ERROR_QUEUE, DEFAULT_RETRY_BATCH
from ..runtime.deployed import resolve
from ..runtime.transport import execute
from ..schema import Kind, TableName

if TYPE_CHECKING:
    from ..runtime.transport import Transport

PAGE_SIZE = 50


class NoArchive(errors.Refused):
    """The error queue has no archive table in the deployed topology."""


@dataclass
class Moved:
    """What an archive, restore or purge did so far: messages moved (or purged), batches, asked but not found."""

    action: str
    moved: int = 0
    batches: int = 0
    not_found: int = 0

    def to_json(self) -> dict:
        return {"action": self.action, "moved": self.moved, "batches": self.batches, "not_found": self.not_found}


Progress = Callable[[Moved], None]
# a move checked and ready: run it with the callback to call after each batch's commit (None: none)
Move = Callable[[Progress | None], Moved]


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

    def require(self) -> None:
        """NoArchive where the topology declares no archive of the error queue."""
        self._statements("count")

    def _statements(self, which: str) -> list[Any]:
        if self.table is None:
            raise NoArchive(
                f"the error queue {self.queue.table} has no archive table: add `archive: {self.queue.table}_archive` to its entry "
                "under queues: in topology.yaml, compile and upgrade (docs/console.md; a console running restarts to see it)"
            )
        return self.transport.dialect.live_bus.archive(which, self.queue, self.table, self.transport.profile)

    def _move(self, action: str, statements: list[Any], chosen: Callable[[], tuple[list[dict], int]]) -> Move:
        """Each batch of rows in one transaction: every statement for each row; the first one's row
        count is what moved. `chosen`, called as the move starts: the rows, and how many of the
        messages asked were not found before any moved. The report counts a batch once it has
        committed (a job shows it meanwhile)."""

        def run(progress: Progress | None = None) -> Moved:
            rows, absent = chosen()
            done = Moved(action, not_found=absent)
            for batch in _batches(rows, self.batch_size):
                moved_here = not_found_here = 0
                with self.transport.engine.begin() as conn:
                    for row in batch:
                        moved = execute(conn, statements[0], row).rowcount
                        for statement in statements[1:]:
                            execute(conn, statement, row)
                        moved_here += max(moved, 0)
                        not_found_here += moved == 0
                done.moved += moved_here
                done.not_found += not_found_here
                done.batches += 1
                if progress is not None:
                    progress(done)
            return done

        return run

    def archive(self, ids: Sequence[str], why: str, by: str) -> tuple[int, Move]:
        """The messages of the error queue with these row Ids (GUIDs, as every transport writes them),
        to move into the archive: how many (each once), and the move (which first reads their keys)."""
        for i in ids:
            try:
                uuid.UUID(i)
            except (TypeError, ValueError):
                raise errors.UsageError(f"ids: {i!r} is not a message's row Id (a GUID)") from None
        [read] = self._statements("keys")
        statements = self._statements("archive")
        wanted = list(dict.fromkeys(ids))

        def chosen() -> tuple[list[dict], int]:
            keys, absent = self._keys(read, wanted)
            return [{"Key": k, "Why": why, "By": by} for k in keys], absent

        return len(wanted), self._move("archive", statements, chosen)

    def _keys(self, read: Any, ids: list[str]) -> tuple[list[int], int]:
        """The error queue's keys of the messages with these Ids, in its order, read at once (each
        move is then a lookup of its key: the queue has no index on Id on SQLite and SQL Server);
        and how many of the Ids no message has."""
        with self.transport.engine.connect() as conn:
            found = execute(conn, read, {"Ids": self.transport.dialect.list_parameter(ids)}).fetchall()
        seen = {uuid.UUID(str(i)) for _, i in found}
        return sorted(int(k) for k, _ in found), sum(uuid.UUID(i) not in seen for i in ids)

    def restore(self, keys: Sequence[int]) -> tuple[int, Move]:
        """The archived messages with these archive keys, to move back into the error queue: how many, and the move."""
        statements = self._statements("restore")
        rows = [{"Key": k} for k in dict.fromkeys(keys)]
        return len(rows), self._move("restore", statements, lambda: (rows, 0))

    def ids_of(self, keys: Sequence[int]) -> list[str]:
        """The row Ids of the archived messages with these archive keys (a restore's action log)."""
        [read] = self._statements("id")
        with self.transport.engine.connect() as conn:
            found = [execute(conn, read, {"Key": k}).fetchone() for k in dict.fromkeys(keys)]
        return [str(row[0]) for row in found if row is not None]

    def purge(self, older_than_seconds: float) -> Move:
        """The deletion of the messages archived more than `older_than_seconds` ago, a batch a transaction."""
        if older_than_seconds < 0:
            raise errors.UsageError(f"older_than: give an age of 0 seconds or more, not {older_than_seconds}")
        [statement] = self._statements("purge")

        def run(progress: Progress | None = None) -> Moved:
            done = Moved("purge")
            while True:
                with self.transport.engine.begin() as conn:
                    gone = execute(conn, statement, {"Seconds": older_than_seconds, "BatchSize": self.batch_size}).rowcount
                done.batches += 1
                done.moved += gone
                if progress is not None:
                    progress(done)
                if gone < self.batch_size:
                    return done

        return run

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

    def keys(self, ids: Sequence[str] = ()) -> tuple[list[int], list[str]]:
        """The archive keys of the archived messages with these row Ids (every one, where none is
        given), oldest archived first, and the Ids asked that no archived message has."""
        wanted = {i.lower(): i for i in ids}
        found, seen = [], set()
        after = None
        while True:
            rows, after = self.page(after, 1000)
            for row in rows:
                if not wanted or row.id.lower() in wanted:
                    found.append(row.key)
                    seen.add(row.id.lower())
            if after is None:
                return found, [original for lowered, original in wanted.items() if lowered not in seen]

    def count(self) -> int:
        [statement] = self._statements("count")
        with self.transport.engine.connect() as conn:
            return int(execute(conn, statement).fetchone()[0])
