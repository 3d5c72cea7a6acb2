"""A revision's message when `compile` is given no `-m`: the change as a reviewer would title it
("add Inventory", "Sales: body_string", "transport 9.0 -> 9.1"), read from the plan alone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import ops, saga_ops

if TYPE_CHECKING:
    from .compile import Plan

SHOWN_PARTS = 3  # then "and N more"
FALLBACK = "topology change"  # a plan with no change a title names (a schema created, an index renamed)


def revision_message(plan: Plan) -> str:
    """What the plan does, in a few words: tables added and removed (an endpoint's instance queues
    and delayed table under its name), queues changed, the transport version, a merge."""
    parts: list[str] = []
    if plan.merges:
        parts.append(f"merge {len(plan.merges)} branches")
    if plan.old is not None and plan.old.transport_version != plan.new.transport_version:
        parts.append(f"transport {plan.old.transport_version} -> {plan.new.transport_version}")
    added = _outermost(op.table_name.table for op in plan.upgrade if isinstance(op, ops._CreateTable))
    removed = _outermost(op.table_name.table for op in plan.upgrade if isinstance(op, ops._DropTable))
    if added:
        parts.append("add " + ", ".join(added))
    if removed:
        parts.append("remove " + ", ".join(removed))
    for op_type, what in _CHANGES:
        tables = _outermost(op.table_name.table for op in plan.upgrade if isinstance(op, op_type))
        parts += [f"{table}: {what(op_type)}" for table in tables]
    persistence = [op for op in plan.upgrade if isinstance(op, (saga_ops.CreateSagaTableOp, saga_ops.CreateOutboxTableOp))]
    if persistence:
        parts.append("add " + ", ".join(op.table_name.table for op in persistence))
    gone = [op for op in plan.upgrade if isinstance(op, (saga_ops.DropSagaTableOp, saga_ops.DropOutboxTableOp))]
    if gone:
        parts.append("remove " + ", ".join(op.table_name.table for op in gone))
    correlations = _outermost(op.table_name.table for op in plan.upgrade if isinstance(op, saga_ops._CorrelationOp))
    parts += [f"{table}: correlation" for table in correlations]
    if not parts:
        return FALLBACK
    shown = parts[:SHOWN_PARTS]
    if len(parts) > SHOWN_PARTS:
        shown.append(f"and {len(parts) - SHOWN_PARTS} more")
    return ", ".join(shown)


_CHANGES = (
    (ops.AddBodyStringOp, lambda _: "body_string"),
    (ops.DropBodyStringOp, lambda _: "no body_string"),
    (ops.ChangeQueueSeqTypeOp, lambda _: "Seq type"),
)


def _outermost(names: Iterable[str]) -> list[str]:
    """The names in order, once each, without those under another one listed (`Sales.host-a` and
    `Sales.Delayed` under `Sales`): an endpoint's tables go by its name."""
    listed = list(dict.fromkeys(names))
    return [name for name in listed if not any(name.startswith(other + ".") for other in listed if other != name)]
