"""The steps a migration refuses, collected over one run and reported as one line.

After the first refused drop the run goes on only to find the others (nothing more is changed,
and all of it is rolled back), so that one refusal names every table and one rerun lets them all
through. Refusals are Alembic CommandErrors too: `alembic` prints them as one `FAILED: ...` line.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from alembic.util import CommandError

from .. import errors
from ..schema import Kind

if TYPE_CHECKING:
    from alembic.runtime.migration import MigrationContext

    from .. import engines
    from .ops import TransportOp

RERUN_OPTION = "sqltransport_rerun"  # the Alembic command line that was run, with more -x options
PROTECTED_OPTION = "sqltransport_drop_protected"  # names of protected queues a downgrade may drop
DISCARD_TABLES_OPTION = "sqltransport_discard"  # names of tables whose compiled drop may take their rows along


class StructureMismatch(errors.Conflict, CommandError):
    """A table of that name exists but is not the transport table the revision would create."""


class ProtectedQueue(errors.Refused, CommandError):
    """A migration step would drop a protected queue without its per-queue override."""


class DropRefused(errors.DatabaseRefused, CommandError):
    """The database refused to drop a table that still holds rows."""


class GuardRefused(errors.DatabaseRefused, CommandError):
    """Another guard of the engine's DDL refused a step (e.g. a saga promotion before its backfill);
    the message is the guard's first line."""


# What each kind of table holds, as a refused drop names it.
CONTENTS = {
    Kind.QUEUE: "messages",
    Kind.DELAYED: "delayed messages",
    Kind.SUBSCRIPTIONS: "subscription rows",
    Kind.SAGA: "saga instances",
    Kind.OUTBOX: "undispatched outbox messages",
    Kind.ARCHIVE: "archived messages",
    Kind.ACTION_LOG: "logged actions",
}


def rerun(context: MigrationContext, *options: str) -> str:
    """The command to run again with more `-x` options (env.py knows the command line)."""
    build = context.opts.get(RERUN_OPTION)
    return build(list(options), context.opts) if build else "alembic " + "".join(f"-x {o} " for o in options) + "upgrade head"


@dataclass
class _Refusals:
    """The drops one run refused."""

    protected: dict[str, str] = field(default_factory=dict)  # table name -> as displayed
    holding: dict[str, tuple[str, str]] = field(default_factory=dict)  # table name -> (noun and where, contents)


_refusals: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass
class _Uncommitted:
    """The revision steps a run has logged since its transaction last committed: what a failure rolls back."""

    steps: list[str] = field(default_factory=list)
    after_commit: bool = False  # the run committed part-way before them


_uncommitted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def step_logged(context: MigrationContext, step: str) -> None:
    """A step ran (its tables' lines are logged) in the run's open transaction."""
    _uncommitted.setdefault(context, _Uncommitted()).steps.append(step)


def committed(context: MigrationContext) -> None:
    """The run committed part-way (a large revision's checkpoint, an online rewrite): its steps so far stay."""
    _uncommitted[context] = _Uncommitted(after_commit=True)


def rolled_back(context: MigrationContext) -> str:
    """What the failed run's rollback undid, as its log line says it (the lines above read as done)."""
    run = _uncommitted.pop(context, _Uncommitted())
    since = "since its last commit" if run.after_commit else "above"
    steps = f": {', '.join(run.steps)} and the tables' lines with them" if run.steps else ""
    return f"rolled back, not applied: everything this run logged {since}{steps}"


def any_refused(context: MigrationContext) -> bool:
    """Whether this run refused a drop already (the rest of it only looks for other refusals)."""
    return context in _refusals


def refuse_protected(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp) -> None:
    _refusals.setdefault(context, _Refusals()).protected[operation.table.name.table] = operation.where(dialect)


def refuse_holding(context: MigrationContext, dialect: engines.Dialect, operation: TransportOp) -> None:
    where = f"{operation.noun} {dialect.display(operation.table_name)}"
    _refusals.setdefault(context, _Refusals()).holding[operation.table_name.table] = (where, CONTENTS[operation.table.kind])


def _merged(context: MigrationContext, option: str, names: list[str]) -> str:
    """`option=a,b`: the names the run was given already, then those it refused."""
    given = [name for name in context.opts.get(option, ()) if name not in names]
    return ",".join([*sorted(given), *names])


def _holding_sentence(found: _Refusals) -> str:
    names = list(found.holding)
    kinds = {contents for _, contents in found.holding.values()}
    if len(names) == 1:
        where, contents = next(iter(found.holding.values()))
        return f"refusing to drop {where}: it still holds {contents}"
    if len(kinds) == 1:
        tables = ", ".join(where for where, _ in found.holding.values())
        return f"refusing to drop {tables}: they still hold {kinds.pop()}"
    tables = ", ".join(f"{where} ({contents})" for where, contents in found.holding.values())
    return f"refusing to drop {tables}: they still hold rows"


def refusal(context: MigrationContext) -> CommandError | None:
    """Every drop this run refused, as one line with the one command that lets them all through."""
    found = _refusals.get(context)
    if found is None:
        return None
    fn = context.opts.get("fn")
    downgrade = fn is not None and fn.__name__ == "downgrade"
    sentences, options = [], []
    if found.protected:
        names = list(found.protected)
        tables = ", ".join(found.protected.values())
        sentences.append(
            f"refusing to drop protected queue{'s' if len(names) > 1 else ''} {tables}: error and audit queues, "
            "and queues marked protected: true, are never dropped by a migration without an override"
        )
        options.append(f"drop_protected={_merged(context, PROTECTED_OPTION, names)}")
    if found.holding:
        sentences.append(_holding_sentence(found))
        names = list(found.holding)
        options.append("discard_messages=true" if downgrade else f"discard={_merged(context, DISCARD_TABLES_OPTION, names)}")
    command = rerun(context, *options)
    it = "them" if len(found.protected) + len(found.holding) > 1 else "it"
    if not found.holding:
        return ProtectedQueue(f"{'; '.join(sentences)}. To drop {it}: {command}")
    if len(found.holding) > 1:
        rows = "their rows"
    else:
        rows = ("its " if it == "it" else "the ") + next(iter(found.holding.values()))[1]
    queues = any(where.startswith("queue ") for where, _ in found.holding.values())
    first = "Move or consume them first (sqltransport-schema pipeline plan/run), or d" if queues else "D"
    return DropRefused(f"{'; '.join(sentences)}. {first}rop {it} with {rows}: {command}")
