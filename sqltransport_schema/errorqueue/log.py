"""The action log: the table the topology's `action_log:` declares and the migrations create, where
every action on the error queue is written (who, when, what, how many), by the console's jobs and
the command line alike; what a message's history reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import errors
from ..runtime.transport import execute
from ..schema import Kind, TableName
from .selection import like_pattern

if TYPE_CHECKING:
    from ..runtime.transport import Transport

LOGGED_IDS = 1000  # message ids an action's target names (beyond them it says how many more)


def deployed_table(transport: Transport, kind: Kind) -> TableName | None:
    """The first table of this kind the deployed blueprint records, None where it has none."""
    specs = transport.blueprint.tables if transport.blueprint is not None else ()
    return next((spec.name for spec in specs if spec.kind is kind), None)


def logged_ids(ids: Sequence[str]) -> str:
    """The part of an action's target naming its messages: ` · ids: ID ID ...`, `and N more`."""
    if not ids:
        return ""
    more = len(ids) - LOGGED_IDS
    return " · ids: " + " ".join(ids[:LOGGED_IDS]) + (f" and {more} more" if more > 0 else "")


class NoActionLog(errors.Refused):
    """An action asked of a console whose deployed topology declares no action log."""


class ActionLog:
    """The deployed topology's action log (`table` None where it declares none)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.table = deployed_table(transport, Kind.ACTION_LOG)

    def _statement(self, which: str) -> Any:
        self.require()
        assert self.table is not None
        return self.transport.dialect.live_bus.action_log(self.table, self.transport.profile, which)

    def require(self) -> None:
        """Actions are logged: without the table the topology declares, none is taken."""
        if self.table is None:
            raise NoActionLog(
                "the deployed topology has no action log: add `action_log: {table: ConsoleActions}` to topology.yaml, "
                "compile and upgrade (docs/console.md), then restart the console"
            )

    def write(self, who: str, action: str, target: str, messages: int, ids: Sequence[str] = ()) -> None:
        """One action: `ids`, the messages it acted on, named in its target (what a message's history reads)."""
        self.require()
        row = {"Who": who, "Action": action, "Target": target + logged_ids(ids), "Messages": messages}  # At: the server's clock
        with self.transport.engine.begin() as conn:
            execute(conn, self._statement("insert"), row)

    def about(self, message_id: str, limit: int = 100) -> list[dict]:
        """The actions that named this message (its row Id in their target), oldest first: a message's history."""
        if self.table is None or not message_id or "\x00" in message_id:
            return []
        with self.transport.engine.connect() as conn:
            rows = execute(conn, self._statement("about"), {"Pattern": like_pattern(message_id), "Limit": limit}).fetchall()
        return [{"at": str(at), "who": who, "action": action, "target": target, "messages": n} for at, who, action, target, n in rows]

    def history(self, limit: int = 100) -> list[dict]:
        """The latest actions, newest first (none where the topology declares no action log)."""
        if self.table is None:
            return []
        with self.transport.engine.connect() as conn:
            rows = execute(conn, self._statement("read"), {"Limit": limit}).fetchall()
        return [{"at": str(at), "who": who, "action": action, "target": target, "messages": n} for at, who, action, target, n in rows]
