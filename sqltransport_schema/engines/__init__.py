"""One class per engine; everything engine-specific lives in that class."""

from __future__ import annotations

from .. import errors
from .base import Dialect
from .mssql import MSSQL
from .mysql import MySQL
from .oracle import Oracle
from .postgresql import PostgreSQL
from .sqlite import SQLite

ENGINES: dict[str, Dialect] = {engine.name: engine for engine in (MSSQL(), PostgreSQL(), SQLite(), MySQL(), Oracle())}
# The engines with a transport layout (the default of `engines:`); the others hold saga tables only.
TRANSPORT_ENGINES: tuple[str, ...] = tuple(name for name, engine in ENGINES.items() if not engine.saga_only)
_BY_SQLALCHEMY = {engine.sqlalchemy_name: engine for engine in ENGINES.values()}
_BY_SQLALCHEMY["mariadb"] = ENGINES["mysql"]
_BY_DRIVER = {driver: engine for engine in ENGINES.values() for driver in engine.drivers}


class UnsupportedEngine(errors.UsageError):
    """An engine name (or a driver) no engine of the tool answers to."""


def get(name: str) -> Dialect:
    try:
        return ENGINES[name]
    except KeyError:
        raise UnsupportedEngine(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)}") from None


def for_sqlalchemy(dialect_name: str) -> Dialect:
    try:
        return _BY_SQLALCHEMY[dialect_name]
    except KeyError:
        raise UnsupportedEngine(
            f"sqltransport-schema has no DDL for the {dialect_name!r} dialect; use one of: {', '.join(ENGINES)}"
        ) from None


def for_driver(module: str) -> Dialect:
    """The engine a DBAPI module (its top-level name, as `sqlite3` or `psycopg`) connects to."""
    try:
        return _BY_DRIVER[module]
    except KeyError:
        known = ", ".join(sorted(_BY_DRIVER))
        raise UnsupportedEngine(f"sqltransport-schema does not know the DBAPI module {module!r}; known: {known}") from None


__all__ = ["ENGINES", "TRANSPORT_ENGINES", "Dialect", "UnsupportedEngine", "get", "for_sqlalchemy", "for_driver"]
