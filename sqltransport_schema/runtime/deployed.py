"""The deployed blueprint's tables as the database holds them: which table an address names, the
blueprint's tables, those the database has. What `status` (runtime/status.py) and the error
queue's model (errorqueue/) both start from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import errors, wire
from ..schema import TableName, TableSpec
from .transport import execute

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from .transport import Transport

FIRST_KEY = -(2**63)  # below every FIFO key (serial, bigserial, IDENTITY, AUTOINCREMENT)


def blueprint_specs(transport: Transport) -> list[TableSpec]:
    """The deployed blueprint's tables; UsageError for a transport made without it."""
    if transport.blueprint is None:
        raise errors.UsageError("status and retry need the deployed blueprint: make the transport with Transport.from_database")
    return list(transport.blueprint.tables)


def existing(transport: Transport, conn: Connection, specs: list[TableSpec], estimate: bool = False) -> dict[tuple, Any]:
    """table_key -> the engine's row estimate (None: it has none, or not asked) of every table the database holds."""
    dialect = transport.dialect
    out: dict[tuple, Any] = {}
    for statement in dialect.live_bus.tables({spec.name.catalog for spec in specs}, estimate):
        for catalog, schema, table, estimate in execute(conn, statement).fetchall():
            out[dialect.table_key(TableName(table, schema, catalog))] = estimate
    return out


def resolve(transport: Transport, address: str) -> TableName:
    """The table an address names: a bare table name is found where the deployed blueprint puts it."""
    parsed = wire.parse_address(address)
    return transport.name(parsed.table, parsed.schema, parsed.catalog)
