"""The lifecycle of a saga table's correlation properties, as operations between two blueprints.

- a new transitional property: its column and unique index are added (NULL in existing rows);
- promotion (the transitional property becomes the correlation property): the old correlation
  column and index are dropped, a drop the database refuses while any row still has the new
  column NULL (the backfill is not done);
- a transitional property removed without promotion: its column and index are dropped.

Changing a property's type, or switching the correlation property to one the table does not
have yet, is refused: existing sagas would lose the way they are found. A saga that had no
correlation property gets one added plainly (it was never looked up by one).
"""

from __future__ import annotations

from .. import errors
from ..schema import TableSpec
from .saga_ops import AddSagaCorrelationOp, DropSagaCorrelationOp

TYPE_CHANGE = (
    "saga table {table}: {role} property {name!r} changes type from {old} to {new}. A correlation column is not "
    "converted in place: existing values may not convert, the unique index and every saga's data hold the old type, and "
    "in-flight messages carry it. Introduce a new property instead (e.g. {name}{suffix}, type {new}) as the transitional "
    "property, backfill it, then promote it to the correlation property"
)
DIRECT_SWITCH = (
    "saga table {table}: the correlation property changes from {old!r} to {new!r}, a column the table does not have, "
    "so no existing saga could be found. Add {new!r} as the transitional property first (compile and deploy), backfill "
    "it, then make it the correlation property"
)


def saga_alterations(before: TableSpec, after: TableSpec) -> list:
    """Operations from one saga table spec to the next; UsageError (a ValueError) explains a refused change."""
    old = {c.name: c for c in before.correlations}
    new = {c.name: c for c in after.correlations}
    table = str(after.name)
    for name in old.keys() & new.keys():
        if old[name].type != new[name].type:
            role = "correlation" if after.correlation and after.correlation.name == name else "transitional"
            raise errors.UsageError(
                TYPE_CHANGE.format(
                    table=table, role=role, name=name, old=old[name].type, new=new[name].type, suffix=new[name].type.capitalize()
                )
            )
    promoted = after.correlation
    # A saga that had no correlation property was never looked up by one: adding it is a plain
    # add (as SQL persistence's installer does; a transitional property alone is not allowed).
    if promoted is not None and before.correlation is not None and before.correlation != promoted and promoted.name not in old:
        raise errors.UsageError(DIRECT_SWITCH.format(table=table, old=before.correlation.name, new=promoted.name))
    steps: list = [AddSagaCorrelationOp(after, c) for c in after.correlations if c.name not in old]
    for c in before.correlations:
        if c.name not in new:
            require = promoted if c == before.correlation else None
            steps.append(DropSagaCorrelationOp(after, c, require))
    return steps
