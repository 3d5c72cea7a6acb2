"""Messages put on queues by hand, as an endpoint would send them."""

from __future__ import annotations

import uuid

from sqltransport_schema import wire

from . import catalog
from .catalog import is_sqlite


def id_for(*parts: str) -> str:
    """A message id made from names, the same on every run (a uuid: PostgreSQL's Id column is one)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)))


def insert_message(url: str, table: str, schema: str | None = None, body: bytes = b"payload") -> str:
    message_id = str(uuid.uuid4())
    if is_sqlite(url):
        quoted = '"' + table.replace('"', '""') + '"'
        catalog.execute(
            url,
            f"INSERT INTO {quoted} (Id, Recoverable, Headers, Body) VALUES (?, 1, ?, ?)",
            params=(message_id, '{"NServiceBus.MessageId":"%s"}' % message_id, body),
        )
    else:
        quoted = '"' + (schema or "public").replace('"', '""') + '"."' + table.replace('"', '""') + '"'
        catalog.execute(
            url,
            f"INSERT INTO {quoted} (Id, Expires, Headers, Body) VALUES (%s, NULL, %s, %s)",
            params=(message_id, '{"NServiceBus.MessageId":"%s"}' % message_id, body),
        )
    return message_id


def headers(n: int | str = 0, **extra) -> dict[str, str]:
    return {
        **wire.standard_headers(message_id=str(uuid.uuid4()), enclosed_types=["Shop.OrderPlaced"], reply_to="Sales@[dbo]"),
        "n": str(n),
        **extra,
    }
