"""`alembic check` (and `alembic revision --autogenerate`) with the topology as the target.

Alembic's own comparison of reflected tables misreads these tables (filtered indexes, INCLUDE
columns, clustered flags, varchar/nvarchar; transport-facts §9 item 12) and would offer to drop
every table it has no model for. So the environment keeps transport tables and tables without a
model out of Alembic's reflection (`include_name`) and this registered comparator compares them
instead, with the same bulk catalog reads and rules as `sqltransport-schema check`: a missing
transport table becomes its create operation, an index under another name its rename (where the
engine renames in place); any other difference becomes a `TransportDriftOp`,
which `alembic check` reports and a generated revision carries as a comment to fix by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from alembic.autogenerate import comparators, renderers
from alembic.operations import MigrateOperation

from .. import check, engines
from ..schema import Blueprint
from . import ops
from .compile import create_op

if TYPE_CHECKING:
    from alembic.autogenerate.api import AutogenContext
    from alembic.operations.ops import UpgradeOps
    from alembic.util import PriorityDispatchResult
    from sqlalchemy import MetaData

TARGET_OPTION = "sqltransport_target"  # () -> the head blueprint, set by migrations/env.py
VERSION_TABLE_OPTION = "version_table"

try:  # Alembic 1.18+: comparators say whether the ones after them still run
    from alembic.util import PriorityDispatchResult

    _CONTINUE = PriorityDispatchResult.CONTINUE
except ImportError:  # pragma: no cover - older Alembic ignores the result
    _CONTINUE = None


class TransportDriftOp(MigrateOperation):
    """A difference between a transport table and the topology that no generated step repairs."""

    def __init__(self, finding: check.Finding):
        self.finding = finding

    def reverse(self) -> TransportDriftOp:
        return self

    def to_diff_tuple(self) -> tuple:
        f = self.finding
        return ("transport_drift", f.category, f.table, f.detail)

    def __repr__(self) -> str:
        f = self.finding
        return f"TransportDriftOp({f.category}: {f.table}: {f.detail})"


@renderers.dispatch_for(TransportDriftOp)
def _render_drift(autogen_context: AutogenContext, operation: TransportDriftOp) -> str:
    f = operation.finding
    return "pass  # transport drift, fix by hand: " + ops.one_line(f"{f.category}: {f.table}: {f.detail}")


def drift_operations(expected: Blueprint, live: dict, engine: engines.Dialect) -> list[MigrateOperation]:
    """The operations that stand for every difference `check` finds (pure)."""
    report = check.diff(expected, None, None, live, engine=engine)
    by_display = {check.display(engine, spec.name): spec for spec in expected.tables}
    out: list[MigrateOperation] = []
    for finding in report.drift:
        spec = by_display.get(finding.table)
        if finding.category == "missing_table" and spec is not None:
            out.append(create_op(spec, expected.transport_version))
        elif finding.category == "index_name" and spec is not None and engine.rename_index(spec.name, *finding.renamed) is not None:
            out.append(ops.RenameIndexOp(spec.name, *finding.renamed))  # e.g. a saga index an earlier release named otherwise
        else:
            out.append(TransportDriftOp(finding))
    return out


@comparators.dispatch_for("schema")
def compare_transport_tables(
    autogen_context: AutogenContext, upgrade_ops: UpgradeOps, schemas: set[str | None]
) -> PriorityDispatchResult | None:
    target = autogen_context.opts.get(TARGET_OPTION)
    if target is None or autogen_context.connection is None:
        return _CONTINUE  # an environment that did not opt in
    expected = target()
    if expected is None:
        return _CONTINUE  # no compiled revision yet: no transport tables to expect
    engine = engines.for_sqlalchemy(autogen_context.dialect.name)
    version_table = (autogen_context.opts.get(VERSION_TABLE_OPTION) or "alembic_version").casefold()
    catalogs = sorted({spec.name.catalog for spec in expected.tables if spec.name.catalog is not None})
    live = {
        k: v for k, v in engine.catalog.read_shapes(autogen_context.connection, catalogs).items() if v[0].table.casefold() != version_table
    }
    upgrade_ops.ops.extend(drift_operations(expected, live, engine))
    return _CONTINUE


def model_tables_only(metadata: MetaData | None) -> Callable[[str | None, str, dict[str, str | None]], bool]:
    """include_name for the environment: reflect only tables some model declares, so that
    transport tables (compared above) and unmanaged tables are never proposed for dropping."""
    declared = {(table.schema, table.name) for table in metadata.tables.values()} if metadata is not None else set()

    def include_name(name: str | None, type_: str, parent_names: dict[str, str | None]) -> bool:
        if type_ != "table":
            return True
        return (parent_names.get("schema_name"), name) in declared

    return include_name
