"""Compile a messaging topology into Alembic migrations with the SQL transport's exact DDL.

The public Python API (docs/reference/): `Transport` here, the modules of `runtime` (transport, pump,
sagas, operations), `wire`, `errors` and `db.make_engine`. Every other module serves the command line
and may change without notice."""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["Transport", "__version__", "wire", "runtime", "errors", "db"]

if TYPE_CHECKING:  # what __getattr__ returns, as type checkers should see it
    from . import db, errors, runtime, wire
    from .runtime.transport import Transport

    __version__: str


def __getattr__(name: str) -> object:
    """`from sqltransport_schema import Transport`, without importing SQLAlchemy for the CLI's sake;
    `__version__` from the installed package's metadata (util.package_version)."""
    if name == "__version__":
        from .util import package_version

        return package_version()
    if name == "Transport":
        from .runtime.transport import Transport

        return Transport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
