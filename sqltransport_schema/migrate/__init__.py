"""Alembic integration: operations (declared in ops/saga_ops, statements in toimpl, run by
execution), compile, env helpers."""

from . import (
    execution,  # noqa: F401  (runs every transport operation on alembic.op)
    ops,  # noqa: F401  (registers the transport operations on alembic.op)
    saga_ops,  # noqa: F401  (registers the saga operations on alembic.op)
    toimpl,  # noqa: F401  (the statements of each operation kind)
)
