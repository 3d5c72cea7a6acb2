"""Queues filled and read back for the pipeline tests, through the engine's own DDL and drivers."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid

from sqltransport_schema.pipeline.layouts import canonical_id
from sqltransport_schema.schema import Kind, TableName, TableSpec
from sqltransport_schema.versions import profile

PROFILE = profile("9.1")


def pg_dbapi(url: str):
    import psycopg

    from sqltransport_schema.pipeline.connect import dbapi_connect

    conn = dbapi_connect(url)
    assert isinstance(conn, psycopg.Connection)
    return conn


def create_table(url: str, spec: TableSpec) -> None:
    """The engine's own DDL (what the migrations run)."""
    from sqltransport_schema.pipeline.connect import dbapi_connect, engine_of

    engine = engine_of(url)
    conn = dbapi_connect(url)
    try:
        for statement in engine.create_table(spec, PROFILE):
            conn.cursor().execute(statement)
        conn.commit()
    finally:
        conn.close()


def queue_spec(name: str, schema: str | None = None, seq_type: str = "bigserial") -> TableSpec:
    return TableSpec(Kind.QUEUE, TableName(name, schema), seq_type=seq_type)


def headers_for(i: int, message_id: str, extra: str = "") -> str:
    return (
        f'{{"NServiceBus.MessageId":"{message_id}","NServiceBus.EnclosedMessageTypes":"Shop.Order{i % 7}",'
        f'"NServiceBus.TimeSent":"2026-11-{1 + i % 3:02d} 10:00:00:{i % 1000000:06d} Z",'
        f'"NServiceBus.ContentType":"application/json","Text":"n\\u00e4me {i}"{extra}}}'
    )


def fill_queue(url: str, table: TableName, count: int, body_size: int = 64, seed: int = 1) -> None:
    """`count` messages with distinct ids, headers and bodies (some NULL bodies, some Expires)."""
    import random
    from datetime import datetime, timedelta

    from sqltransport_schema.pipeline.connect import dbapi_connect, engine_of

    rnd = random.Random(seed)
    engine = engine_of(url)
    rows = []
    for i in range(count):
        message_id = str(uuid.UUID(int=rnd.getrandbits(128)))
        body = None if i % 97 == 0 else rnd.randbytes(body_size)
        expires = datetime(2030, 1, 1) + timedelta(seconds=i) if i % 13 == 0 else None
        rows.append((message_id, headers_for(i, message_id), body, expires))
    conn = dbapi_connect(url)
    try:
        qualified = engine.qualified(table)
        if engine.name == "postgresql":
            with conn.cursor().copy(f"COPY {qualified} (id, headers, body, expires) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            conn.execute("BEGIN")
            conn.executemany(
                f"INSERT INTO {qualified} (Id, Recoverable, Headers, Body, Expires) VALUES (?, 1, ?, ?, ?)",
                [(m, h, b, e.strftime("%Y-%m-%d %H:%M:%S.000") if e else None) for m, h, b, e in rows],
            )
        conn.commit()
    finally:
        conn.close()


def queue_contents(url: str, table: TableName, layout: str | None = None) -> list[tuple[str, str, bytes | None]]:
    """(Id, Headers, Body) in FIFO order (Seq / RowVersion)."""
    from sqltransport_schema.pipeline.connect import dbapi_connect, engine_of

    engine = engine_of(url)
    layout = layout or ("postgresql" if engine.name == "postgresql" else "mssql")
    order = "Seq" if layout == "postgresql" else "RowVersion"
    conn = dbapi_connect(url)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT Id, Headers, Body FROM {engine.qualified(table)} ORDER BY {order}")
        return [(canonical_id(i), h, None if b is None else bytes(b)) for i, h, b in cur.fetchall()]
    finally:
        conn.close()


def checksum(rows) -> tuple[int, str]:
    h = hashlib.sha256()
    for id_, headers, body in rows:
        for part in (id_.encode(), headers.encode(), body):
            h.update(b"-" if part is None else len(part).to_bytes(4, "little") + part)
    return len(rows), h.hexdigest()


def sqlite_rows(url: str, sql: str) -> list[tuple]:
    conn = sqlite3.connect(url.split("///", 1)[1])
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()
