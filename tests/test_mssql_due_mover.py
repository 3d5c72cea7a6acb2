"""DueMover on SQL Server (issue 53, item 6, first point), through the recording pyodbc double
(support/pyodbc_double.py): the move of 3.1.0-6.2.0 runs under `SET NOCOUNT ON`, so pyodbc's rowcount
is -1 and a full batch read as 0 moved; the runtime now runs that move with its count returned
(`move_due_delayed_counted`), and DueMover moves again at once after a full batch. The release's
own move stays what `statements` prints as `move_due_delayed` (upstream's text, token for token)."""

from __future__ import annotations

import pytest

from sqltransport_schema.engines import get
from sqltransport_schema.runtime.pump import DueMover
from sqltransport_schema.runtime.transport import EndpointTables, Transport
from sqltransport_schema.schema import TableName
from sqltransport_schema.versions import profile

from .support.pyodbc_double import NOCOUNT_ON, ProgrammingError, Server
from .support.tsql import normalized, parse_problems

SILENT = ["3.1.0", "4.0.0", "4.3.2", "5.0.3", "6.2.0"]  # the releases whose move returns nothing
QUEUE = TableName("Sales", "dbo", "nsb")
DELAYED = TableName("Sales.Delayed", "dbo", "nsb")


def statements(version: str) -> dict:
    return get("mssql").runtime_statements(profile(version), QUEUE, delayed=DELAYED, peek_batch_size=100)


class DelayedTable:
    """The delayed table the double's server holds: `due` rows due; each move takes up to @BatchSize
    of them, and answers as SQL Server would: the DELETE's row count (dropped under NOCOUNT), then
    what the statement selects after it (the counted move's @@ROWCOUNT)."""

    def __init__(self, due: int):
        self.due = due
        self.moves: list[int] = []

    def move(self, sql: str, params: tuple) -> list:
        (batch_size,) = params
        moved = min(batch_size, self.due)
        self.due -= moved
        self.moves.append(moved)
        results: list = [moved]  # the DELETE ... OUTPUT INTO's row count
        if "@@ROWCOUNT AS Moved" in sql:
            results.append([(moved,)])
        return results


def endpoint(server: Server, version: str) -> tuple[Transport, EndpointTables]:
    transport = Transport(server.engine(), version)
    return transport, EndpointTables(transport, QUEUE, "Delayed")


@pytest.mark.parametrize("version", SILENT)
def test_the_silent_releases_move_returns_its_count(version):
    found = statements(version)
    upstream, counted = found["move_due_delayed"], found["move_due_delayed_counted"]
    assert NOCOUNT_ON.search(upstream.sql) and "@@rowcount" not in upstream.sql.lower()
    # the release's move, token for token, with the count selected before NOCOUNT is restored
    move = normalized(upstream.sql)
    restore = "if ( @nocount = 'on' ) set nocount on"
    assert normalized(counted.sql) == move.replace(restore, "select @@rowcount as moved ; " + restore)
    assert counted.columns == ("Moved",) and counted.params == upstream.params == ("BatchSize",)
    assert parse_problems(counted.sql) == []


@pytest.mark.parametrize("version", ["6.3.1", "7.0.13", "9.1"])
def test_the_later_releases_have_no_counted_move(version):
    found = statements(version)
    assert "move_due_delayed_counted" not in found and "move_due_delayed" in found


@pytest.mark.parametrize("version", SILENT)
def test_move_due_counts_what_the_silent_move_moved(version):
    server, table = Server(), DelayedTable(due=7)
    server.on("WITH message AS", table.move)
    transport, tables = endpoint(server, version)
    driver = server.driver_connection()
    assert tables.move_due(driver, 5) == 5
    assert tables.move_due(driver, 5) == 2
    assert tables.move_due(driver, 5) == 0
    (call, *_) = server.executed("WITH message AS")
    assert call.sql.endswith("IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;") and "SELECT @@ROWCOUNT AS Moved;" in call.sql
    assert (call.method, call.params, call.types) == ("execute", (5,), ("SQL_INTEGER",))
    transport.engine.dispose()


def test_the_releases_own_move_on_the_double_reads_as_nothing_moved():
    """Why: pyodbc's rowcount under the move's NOCOUNT, as the runtime read it before (-1, so 0)."""
    server, table = Server(), DelayedTable(due=7)
    server.on("WITH message AS", table.move)
    driver = server.driver_connection()
    statement = statements("6.2.0")["move_due_delayed"]
    cursor = driver.cursor.execute(statement.native("qmark")[0], (5,))
    assert cursor.rowcount == -1 and table.moves == [5]
    with pytest.raises(ProgrammingError):
        cursor.fetchone()


@pytest.mark.parametrize("version", SILENT)
def test_due_mover_moves_again_at_once_after_a_full_batch(version):
    server, table = Server(), DelayedTable(due=23)
    server.on("WITH message AS", table.move)
    transport, tables = endpoint(server, version)
    mover = DueMover(transport, tables, interval=0.01, batch_size=10)
    moves: list = []

    def once() -> int:
        if len(moves) > 5:  # a test that fails ends all the same
            mover.stop()
        moves.append(None)  # a failed round stays recorded as None
        moves[-1] = moved = DueMover.move_once(mover)
        if moved < mover.batch_size or len(moves) > 5:
            mover.stop()  # the loop would wait its interval now: the test ends there
        return moved

    mover.move_once = once  # type: ignore[method-assign]
    mover.run()
    assert moves == [10, 10, 3] and mover.moved == 23 and table.due == 0
    assert server.commits == 3  # a transaction per batch, as upstream's processor
    transport.engine.dispose()


def test_a_later_releases_move_counts_by_its_row_count_where_the_session_counts():
    server, table = Server(), DelayedTable(due=3)
    server.on("WITH message AS", lambda sql, params: [*table.move(sql, params), [(None, None)]])
    transport, tables = endpoint(server, "6.3.8")
    assert tables.move_due(server.driver_connection(), 10) == 3
    transport.engine.dispose()
