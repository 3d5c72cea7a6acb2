"""Alembic integration: operations, compile, env helpers."""

from . import operations  # noqa: F401  (registers the transport operations on alembic.op)
