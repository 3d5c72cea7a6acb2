"""Interoperability in the SQL Server shape: seed 003's own send and receive statements, run on
SQLite tables the project's migrations made with the SQL Server columns (Id, CorrelationId,
ReplyToAddress, Recoverable, Expires, Headers, Body, RowVersion).

No SQL Server runs here, so the seed's text is executed on SQLite with the fewest rewrites that
make it SQLite, each one asserted to apply exactly where expected (a changed seed fails here):
- the NOCOUNT save/set/restore lines around each statement are dropped (session options);
- `{0}` becomes `[Sales]` (SQLite reads bracketed names; `@Name` parameters stay as they are);
- `GETUTCDATE()` and `DATEADD(ms, @X, GETUTCDATE())` become SQLite's UTC time text, in the
  format the SQLite layout stores Expires in;
- receive: the seed's row choice (`TOP(1) * ... ORDER BY RowVersion`, deleted through a CTE
  with OUTPUT) runs as a SELECT of the seed's OUTPUT list (verbatim but for the `deleted.`
  prefix) from that row, then a DELETE of it, in one transaction. Not `DELETE ... RETURNING`:
  SQLite 3.40 evaluates `Expires IS NULL` as false in a RETURNING list when the partial
  Expires index exists (the runtime's own statements use coalesce for that reason).
Everything else (column lists, the Recoverable literal, the CASE expressions, the OUTPUT order)
is the seed's text.
"""

from __future__ import annotations

import re
import sqlite3
import time
import uuid

import pytest

from sqltransport_schema import wire
from sqltransport_schema.engines.sqlite import SQLite

from .support.runtime import deployed as deployed_transport
from .support.runtime import plain_driver_connection
from .support.seeds import raw_seed_statement, runtime_text

TABLE = "[Sales]"
NOCOUNT_LINES = (
    "DECLARE @NOCOUNT VARCHAR(3) = 'OFF';",
    "IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'",
    "IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';",
    "SET NOCOUNT ON;",
    "IF (@NOCOUNT = 'ON') SET NOCOUNT ON;",
    "IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;",
)


def seed_text() -> str:
    return runtime_text()


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"seed 003 changed: expected {old!r} exactly once in\n{text}"
    return text.replace(old, new)


def without_nocount(statement: str) -> str:
    lines = statement.splitlines()
    kept = [line for line in lines if line.strip() not in NOCOUNT_LINES]
    assert len(lines) - len(kept) == 5, f"seed 003 changed: expected the five NOCOUNT lines in\n{statement}"
    return "\n".join(kept)


def seed_send_on_sqlite(text: str) -> str:
    sql = without_nocount(raw_seed_statement(text, "send"))
    sql = replace_once(sql, "{0}", TABLE)
    return replace_once(sql, "DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE())", SQLite.now_plus_ms("@TimeToBeReceivedMs"))


def seed_receive_on_sqlite(text: str) -> str:
    sql = without_nocount(raw_seed_statement(text, "receive"))
    found = re.fullmatch(
        r"WITH message AS \(\s*SELECT TOP\(1\) \*\s*FROM \{0\} WITH \(UPDLOCK, READPAST, ROWLOCK\)\s*ORDER BY (\w+)\)\s*"
        r"DELETE FROM message\s*OUTPUT\s*(.*);",
        sql.strip(),
        re.S,
    )
    assert found, f"seed 003 changed: the receive is no longer a TOP(1) CTE delete with OUTPUT:\n{sql}"
    order, output = found.groups()
    output = replace_once(output.replace("deleted.", ""), "GETUTCDATE()", SQLite.NOW)
    return (f"SELECT {output}, {order} FROM {TABLE} ORDER BY {order} LIMIT 1", f"DELETE FROM {TABLE} WHERE {order} = ?")


def receive_with_the_seeds_sql(raw: sqlite3.Connection, receive: tuple[str, str]):
    """One receive in one transaction: the seed's OUTPUT row, its row deleted."""
    select, delete = receive
    row = raw.execute(select).fetchone()
    if row is not None:
        assert raw.execute(delete, (row[-1],)).rowcount == 1
    raw.commit()
    return row and row[:-1]


@pytest.fixture
def deployed(project, sqlite_url, monkeypatch):
    transport = deployed_transport(project, sqlite_url, monkeypatch)
    raw = plain_driver_connection(transport)
    yield transport, raw
    raw.close()
    transport.engine.dispose()


def test_the_seed_statements_run_on_the_sqlserver_columns():
    """The rewrites apply to the seed's text; what is left is the seed's own column lists."""
    text = seed_text()
    send = seed_send_on_sqlite(text)
    assert "Id,\nCorrelationId,\nReplyToAddress,\nRecoverable,\nExpires,\nHeaders,\nBody)" in send
    assert "NOCOUNT" not in send and "GETUTCDATE" not in send
    select, _ = seed_receive_on_sqlite(text)
    assert "Id,\nCorrelationId,\nReplyToAddress,\nCASE WHEN Expires IS NULL" in select and "deleted." not in select


def test_messages_sent_with_the_seeds_sql_are_received_by_the_runtime(deployed):
    transport, raw = deployed
    sales = transport.queue("Sales")
    send = seed_send_on_sqlite(seed_text())
    # written as NServiceBus writes them: `/` as `\/`, legacy columns NULL (seed 003's note)
    nsb = [
        ('{"NServiceBus.MessageId":"%s","NServiceBus.ReplyToAddress":"Shop@[dbo]","Path":"a\\/b","n":"%d"}' % (uuid.uuid4(), n), None)
        for n in range(3)
    ]
    nsb.insert(1, ('{"NServiceBus.MessageId":"%s","n":"expired"}' % uuid.uuid4(), 1))  # time to be received: 1 ms
    for headers, ttbr in nsb:
        raw.execute(
            send,
            {
                "Id": str(uuid.uuid4()),
                "CorrelationId": None,
                "ReplyToAddress": None,
                "TimeToBeReceivedMs": ttbr,
                "Headers": headers,
                "Body": headers.encode()[-12:],
            },
        )
    raw.commit()
    time.sleep(0.01)

    with transport.engine.begin() as conn:
        received = [sales.receive(conn) for _ in range(4)]
    assert received[3] is None  # the expired one was dropped, never returned
    assert [m.headers["n"] for m in received[:3]] == ["0", "1", "2"]  # FIFO by RowVersion
    for message, (headers, _) in zip(received, [nsb[0], nsb[2], nsb[3]]):
        assert message.headers == wire.decode_headers(headers) and message.headers["Path"] == "a/b"
        assert message.raw_headers == headers and message.body == headers.encode()[-12:]


def test_messages_the_runtime_sends_are_received_by_the_seeds_sql(deployed):
    transport, raw = deployed
    sales = transport.queue("Sales")
    ours = [
        {
            **wire.standard_headers(message_id=str(uuid.uuid4()), enclosed_types=["Shop.OrderPlaced"], reply_to="Sales@[dbo]"),
            "path": "x/y",
            "text": "Fäktura ☃",
            "n": str(n),
        }
        for n in range(2)
    ]
    with transport.engine.begin() as conn:
        sent = [sales.send(conn, f"body {n}".encode(), h) for n, h in enumerate(ours)]
        sent.append(sales.send(conn, b"soon gone", {**ours[0], "n": "expired"}, time_to_be_received=0.001))
    time.sleep(0.01)

    receive = seed_receive_on_sqlite(seed_text())
    rows = [receive_with_the_seeds_sql(raw, receive) for _ in range(4)]
    assert rows[3] is None
    # seed 003's OUTPUT: Id, CorrelationId, ReplyToAddress, expired flag, Headers, Body
    assert [(r[0], r[1], r[2], r[3]) for r in rows[:3]] == [(sent[0], None, None, 0), (sent[1], None, None, 0), (sent[2], None, None, 1)]
    assert [wire.decode_headers(r[4]) for r in rows[:2]] == ours
    assert '"x\\/y"' in rows[0][4]  # the wire form NServiceBus reads
    assert [r[5] for r in rows[:2]] == [b"body 0", b"body 1"]
