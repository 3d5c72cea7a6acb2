"""Alembic integration: operations, compile, env helpers."""

from . import (
    operations,  # noqa: F401  (registers the transport operations on alembic.op)
    saga_operations,  # noqa: F401,E402  (registers the saga operations on alembic.op)
)
