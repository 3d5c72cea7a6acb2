"""Commands on the error queue's archive: archive (failed messages moved into the archive table the
topology declares), restore (back into the error queue), purge (archived messages deleted by age).
The work is the error queue model's (errorqueue/, `ErrorQueue`), as the console's; this parses,
reports progress and prints. A topology with an action log records each (docs/operations.md)."""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import errors
from ..defaults import DEFAULT_RETRY_BATCH
from .live_bus import PROGRESS_INTERVAL, _transport
from .options import add_command, add_options, add_selection, read_timeout
from .output import EXIT_CHANGES, EXIT_OK, emit

if TYPE_CHECKING:
    from ..errorqueue import ErrorQueue

ARCHIVE_WHY = "archived from the command line"


def _who() -> str:
    """The action log's who of a command: the user and the machine."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in the environment, none in the password database
        user = "unknown"
    return f"{user}@{socket.gethostname()} (command line)"


def _progress(action: str) -> Any:
    """A callback writing `action: N moved in B batch(es)` to stderr at most every PROGRESS_INTERVAL."""
    last = [time.monotonic()]

    def progress(done: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_INTERVAL:
            last[0] = now
            sys.stderr.write(f"{action}: {done.moved} moved in {done.batches} batch(es)\n")
            sys.stderr.flush()

    return progress


def _run(args: argparse.Namespace, work: Any) -> int:
    """The error queue of --url (the deployed blueprint's), `work(queue)` run on it, the engine disposed."""
    from ..db import answered_within
    from ..errorqueue import ErrorQueue

    transport = _transport(args, readers=False, bounded=True)
    try:
        with answered_within(read_timeout(args)):
            queue = ErrorQueue(transport, args.error_queue, args.batch_size)
            queue.archived.require()
            return work(queue)
    finally:
        transport.engine.dispose()


def _log(queue: ErrorQueue, action: str, target: str, moved: int, ids: Sequence[str] = ()) -> None:
    """The action in the action log, where the deployed topology declares one."""
    if queue.log.table is not None:
        queue.log.write(_who(), action, target, moved, ids)


def cmd_archive(args: argparse.Namespace) -> int:
    """move failed messages from the error queue into its archive table

    Move failed messages (every one, those that failed in one queue, or those with the given row Ids)
    from the error queue into the archive table the topology declares for it (`archive:` on its
    entry), a batch a transaction, each with why and who archived it; `restore` moves them back. The
    console's archive, from the command line. --dry-run says how many would move. Exit 1 when an
    Id asked is not in the error queue.
    """
    from ..errorqueue import Selection

    chosen = Selection.chosen(args.all, args.failed_queue, args.message_id or ())

    def work(queue: ErrorQueue) -> int:
        ids, move = queue.archive(chosen, args.why, _who())
        if args.dry_run:
            emit(args, {"action": "archive", "dry_run": True, "chosen": len(ids)}, [f"would archive {len(ids)} message(s)"])
            return EXIT_OK
        done = move(_progress("archive"))
        _log(queue, "archive (done)", chosen.describe(), done.moved, ids)
        lines = [f"archived {done.moved} message(s) from {args.error_queue} in {done.batches} batch(es)"]
        lines += [f"not in {args.error_queue}: {done.not_found} of the message(s) asked"] if done.not_found else []
        emit(args, done.to_json() | {"dry_run": False, "chosen": len(ids)}, lines)
        return EXIT_CHANGES if done.not_found else EXIT_OK

    return _run(args, work)


def cmd_restore(args: argparse.Namespace) -> int:
    """move archived messages back from the archive table into the error queue

    Move archived messages (every one, or those with the given row Ids) back from the error queue's
    archive table into the error queue, a batch a transaction, where they can be retried again. A
    message whose Id is in the error queue again meanwhile stays archived and is counted as not
    found. --dry-run says how many would move. Exit 1 when an Id asked is not archived.
    """

    def work(queue: ErrorQueue) -> int:
        ids, move, absent = queue.restore(ids=args.message_id or (), all_messages=args.all)
        missing = [f"not archived: message {i}" for i in absent]
        if args.dry_run:
            emit(
                args,
                {"action": "restore", "dry_run": True, "chosen": len(ids), "absent": absent},
                [f"would restore {len(ids)} message(s)", *missing],
            )
            return EXIT_CHANGES if absent else EXIT_OK
        done = move(_progress("restore"))
        _log(queue, "restore (done)", "every archived message" if args.all else f"{len(ids)} archived message(s)", done.moved, ids)
        lines = [f"restored {done.moved} message(s) into {args.error_queue} in {done.batches} batch(es)"]
        if done.not_found:
            lines.append(f"still archived: {done.not_found} message(s) whose Id is in the error queue again")
        emit(args, done.to_json() | {"dry_run": False, "chosen": len(ids), "absent": absent}, lines + missing)
        return EXIT_CHANGES if absent or done.not_found else EXIT_OK

    return _run(args, work)


def cmd_purge(args: argparse.Namespace) -> int:
    """delete archived messages older than --older-than from the archive table, for good

    Delete the messages archived more than --older-than ago (90m, 12h, 30d) from the error queue's
    archive table, a batch a transaction until a batch comes back short: they cannot be restored
    afterwards, so --yes is required. The console's purge and its --archive-retention, by hand.
    """
    if not args.yes:
        raise errors.UsageError(f"purge deletes the messages archived more than {args.older_than} ago for good: add --yes to delete them")
    seconds = args.older_than.total_seconds()

    def work(queue: ErrorQueue) -> int:
        done = queue.purge(seconds)(_progress("purge"))
        if done.moved:
            _log(queue, "purge (done)", f"archived more than {seconds:g} s ago", done.moved)
        emit(args, done.to_json(), [f"purged {done.moved} archived message(s) in {done.batches} batch(es)"])
        return EXIT_OK

    return _run(args, work)


BATCH = {"default": DEFAULT_RETRY_BATCH, "note": "a message each"}


def add_archive(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "archive", cmd_archive, "sqltransport-schema archive --failed-queue Sales --why 'bad data, fixed upstream'")
    row_id = {"note": "the row's Id, a GUID: what .NET's transport writes as NServiceBus.MessageId"}
    add_selection(p, "all", "failed_queue", "message_id", message_id=row_id)
    p.add_argument("--why", default=ARCHIVE_WHY, metavar="TEXT", help="why they are archived, kept with each (default: %(default)s)")
    add_options(p, "dry_run")
    add_options(p, "batch_size", batch_size=BATCH)
    add_options(p, "format", "config", "read_timeout")


def add_restore(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "restore", cmd_restore, "sqltransport-schema restore --all")
    add_selection(p, "all", "message_id", all={"note": "those archived"}, message_id={"note": "archived ones, by the row's Id, a GUID"})
    add_options(p, "dry_run")
    add_options(p, "batch_size", batch_size=BATCH)
    add_options(p, "format", "config", "read_timeout")


def add_purge(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "purge", cmd_purge, "sqltransport-schema purge --older-than 30d --yes")
    add_options(p, "url", "error_queue", "older_than", older_than={"note": "archived messages"})
    p.add_argument("--yes", action="store_true", help="delete them: they cannot be restored afterwards (required)")
    add_options(p, "batch_size", batch_size=BATCH)
    add_options(p, "format", "config", "read_timeout")


PARSERS = {"archive": add_archive, "restore": add_restore, "purge": add_purge}
