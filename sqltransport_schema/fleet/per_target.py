"""Per-database operations over a fleet (issue 42): `outbox cleanup --fleet` and `status --fleet`,
target after target with the one-database functions (runtime.outbox.cleanup, runtime.status.status).
A target's failure is its row of the report, never another target's."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .file import Target, scrub
from .work import describe

# the tables status --fleet reports per target: what SQL persistence keeps in a tenant database
PERSISTENCE_KINDS = ("saga", "outbox")


@dataclass
class TargetRow:
    """One target's outcome: its figures (a JSON payload) or the error that stopped it."""

    target: Target
    payload: dict = field(default_factory=dict)
    error: str | None = None
    skipped: str | None = None  # why nothing was done (e.g. the database holds no outbox table)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"name": self.target.name, "role": self.target.role, "url": self.target.shown_url}
        if self.error is not None:
            out["error"] = self.error
        if self.skipped is not None:
            out["skipped"] = self.skipped
        return {**out, **self.payload}


def _engine(target: Target, writers: bool, read_timeout: float | None = None):  # noqa: ANN202 - a SQLAlchemy Engine
    """The target's engine; a SQLite file that is not there is refused (db.NoDatabase), never created;
    a reader's connection, statements and lock waits bounded by read_timeout."""
    from sqlalchemy import pool

    from ..db import make_engine
    from .work import TARGET_FIX

    return make_engine(
        target.url, poolclass=pool.NullPool, sqlite_writers=writers, must_exist=True, fix=TARGET_FIX, read_timeout=read_timeout
    )


def cleanup(
    targets: Iterable[Target],
    older_than: timedelta,
    *,
    batch_size: int,
    config_file: str,
    progress: Callable[[Target, str, int, int], None] | None = None,
    parallel: int = 1,
    read_timeout: float | None = None,
) -> list[TargetRow]:
    """runtime.outbox.cleanup on each target, `parallel` at once (threads: the work is the databases'),
    the rows in the targets' order; progress(target, table, deleted so far, batches); a target whose
    connection, statement or lock wait outlasts read_timeout is its row's error, saying how long was waited."""
    from concurrent.futures import ThreadPoolExecutor

    def one(target: Target) -> TargetRow:
        return _clean(target, older_than, batch_size, config_file, progress, read_timeout)

    with ThreadPoolExecutor(max_workers=max(parallel, 1), thread_name_prefix="sqlts-cleanup") as pool:
        return list(pool.map(one, targets))


def _clean(
    target: Target,
    older_than: timedelta,
    batch_size: int,
    config_file: str,
    progress: Callable[[Target, str, int, int], None] | None,
    read_timeout: float | None,
) -> TargetRow:
    """One target's cleanup; its failure is its row."""
    from .. import errors
    from ..db import NoDatabase, answered_within
    from ..runtime.outbox import cleanup as clean_one

    row = TargetRow(target)
    engine = None
    try:
        engine = _engine(target, writers=True, read_timeout=read_timeout)

        def step(table: str, deleted: int, batches: int, target: Target = target) -> None:
            if progress is not None:
                progress(target, table, deleted, batches)

        with answered_within(read_timeout, "--read-timeout or read_timeout:"):
            report = clean_one(engine, older_than, batch_size=batch_size, config_file=config_file, progress=step)
        row.payload = {key: value for key, value in report.to_json().items() if key != "status"}
    except NoDatabase as error:  # no database is a failure, not "nothing to clean"
        row.error = describe(error, target)
    except errors.NotFound as error:
        row.skipped = scrub(str(error), target.url)
    except Exception as error:  # noqa: BLE001 - one target's failure is its row
        row.error = describe(error, target)
    finally:
        if engine is not None:
            engine.dispose()
    return row


def status(
    targets: Iterable[Target],
    *,
    config_file: str,
    done: Callable[[TargetRow], None] | None = None,
    read_timeout: float | None = None,
) -> list[TargetRow]:
    """Each target's saga and outbox tables as runtime.status.status reads them: rows, and for
    an outbox its undispatched rows and oldest dispatched row. A target that gives no answer within
    read_timeout is its row's error, saying how long was waited; the others are read."""
    from ..db import answered_within
    from ..runtime.status import status as status_of
    from ..runtime.transport import Transport

    rows = []
    for target in targets:
        row = TargetRow(target)
        engine = None
        try:
            engine = _engine(target, writers=False, read_timeout=read_timeout)
            with answered_within(read_timeout, "--read-timeout or read_timeout:"):
                report = status_of(Transport.from_database(engine, config_file, verify=False))
            tables = [table.to_json() for table in report.tables if table.kind in PERSISTENCE_KINDS]
            row.payload = {"tables": tables}
        except Exception as error:  # noqa: BLE001 - an unreachable target is a row of the report
            row.error = describe(error, target)
        finally:
            if engine is not None:
                engine.dispose()
        rows.append(row)
        if done is not None:
            done(row)
    return rows


def cleanup_lines(rows: list[TargetRow]) -> list[str]:
    lines = []
    for row in rows:
        name = row.target.name
        if row.error is not None:
            lines.append(f"{name}: failed: {row.error}")
        elif row.skipped is not None:
            lines.append(f"{name}: nothing to clean: {row.skipped}")
        else:
            tables = ", ".join(f"{t['deleted']} from {t['table']}" for t in row.payload["tables"])
            lines.append(f"{name}: deleted {row.payload['deleted']} outbox row(s) dispatched before {row.payload['cutoff']} ({tables})")
    failed = sum(1 for row in rows if row.error is not None)
    total = sum(row.payload.get("deleted", 0) for row in rows)
    lines.append(f"{len(rows)} target(s): {total} outbox row(s) deleted" + (f"; {failed} failed" if failed else ""))
    return lines


def status_lines(rows: list[TargetRow]) -> list[str]:
    lines = []
    for row in rows:
        head = f"{row.target.name} ({row.target.role or 'shared'})"
        if row.error is not None:
            lines.append(f"{head}: failed: {row.error}")
            continue
        tables = row.payload["tables"]
        if not tables:
            lines.append(f"{head}: no saga or outbox table")
        for table in tables:
            lines.append(f"{head}: {table['kind']} {table['name']}: {_figures(table)}")
    failed = sum(1 for row in rows if row.error is not None)
    lines.append(f"{len(rows)} target(s)" + (f"; {failed} failed" if failed else ""))
    return lines


def _figures(table: dict) -> str:
    if table["missing"]:
        return "missing"
    if not table["readable"]:
        return "not readable by this login"
    parts = [f"{table['depth']} row(s)"]
    if table["kind"] == "outbox":
        parts.append(f"{table['undispatched']} not dispatched")
        oldest = table.get("oldest_dispatched_at")
        parts.append(f"oldest dispatched {oldest}" if oldest else "none dispatched awaiting cleanup")
    return ", ".join(parts)


def to_json(rows: list[TargetRow], kind: str) -> dict:
    failed = sum(1 for row in rows if row.error is not None)
    return {"status": "ok" if not failed else "attention", "command": kind, "failed": failed, "targets": [row.to_json() for row in rows]}
