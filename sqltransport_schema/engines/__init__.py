"""One class per engine; everything engine-specific lives in that class."""

from __future__ import annotations

from .base import Engine
from .mssql import MSSQL
from .postgresql import PostgreSQL
from .sqlite import SQLite

ENGINES: dict[str, Engine] = {engine.name: engine for engine in (MSSQL(), PostgreSQL(), SQLite())}
_BY_DIALECT = {engine.dialect: engine for engine in ENGINES.values()}


class UnsupportedEngine(ValueError):
    pass


def get(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise UnsupportedEngine(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)}") from None


def for_dialect(dialect_name: str) -> Engine:
    try:
        return _BY_DIALECT[dialect_name]
    except KeyError:
        raise UnsupportedEngine(
            f"sqltransport-schema has no DDL for the {dialect_name!r} dialect; use one of: {', '.join(ENGINES)}"
        ) from None


__all__ = ["ENGINES", "Engine", "UnsupportedEngine", "get", "for_dialect"]
