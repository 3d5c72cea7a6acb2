"""A recording double of pyodbc for the SQL Server paths, since no SQL Server runs here (issue 53).

It has pyodbc's interface as the runtime and SQLAlchemy's `mssql+pyodbc` dialect use it: a module
(`paramstyle` qmark, `connect`, `Cursor`, `Error`), connections (cursor, commit, rollback,
add_output_converter, getinfo) and cursors (execute, executemany, setinputsizes, fast_executemany,
rowcount, description, fetchone, fetchall, nextset). It runs no SQL: each statement is recorded with
its binds (and the SQL type pyodbc binds each value as, from its Python type) and answered by the
first responder whose pattern it matches (`Server.on`). An answer is a list of results in the order
the server sends them: an int is a row count (a DML statement's), a list of tuples a result set.

As SQL Server and msodbcsql behave: under `SET NOCOUNT ON` (in the statement's text, or the session's
`user options` 512) a DML statement sends no row count, so its count is no result at all and the
cursor's `rowcount` is -1; `rowcount` is -1 for a result set; `fetchone` where the current result is
no result set raises `ProgrammingError` ("No results. Previous SQL was not a query.", pyodbc's words);
`executemany` without `fast_executemany` runs the statement once per row (pyodbc's loop), its rowcount
-1. Grow it as the tests need (more responders, the driver's SQLDescribeParam for None).

    server = Server()
    server.on("WITH message AS", lambda sql, params: [len(moved)])
    engine = server.engine()              # an `mssql+pyodbc` SQLAlchemy engine over the double
    driver = server.driver_connection()   # the runtime's DriverConnection over one double connection
"""

from __future__ import annotations

import datetime
import decimal
import re
import types
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from sqltransport_schema.runtime.transport import DriverConnection

NOCOUNT_ON = re.compile(r"\bSET\s+NOCOUNT\s+ON\b", re.IGNORECASE)

Answer = Callable[[str, tuple], list]  # (sql, binds) -> results: an int (row count) or a list of row tuples


class Error(Exception):
    """pyodbc.Error."""


class ProgrammingError(Error):
    """pyodbc.ProgrammingError."""


def sql_type(value: Any) -> str:
    """The ODBC SQL type pyodbc binds a Python value as (its cnxninfo defaults for SQL Server)."""
    if value is None:
        return "SQL_UNKNOWN (None: SQLDescribeParam, else SQL_VARCHAR)"
    if isinstance(value, bool):
        return "SQL_BIT"
    if isinstance(value, int):
        return "SQL_INTEGER" if -(2**31) <= value < 2**31 else "SQL_BIGINT"
    if isinstance(value, float):
        return "SQL_DOUBLE"
    if isinstance(value, decimal.Decimal):
        return "SQL_NUMERIC"
    if isinstance(value, str):
        return "SQL_WVARCHAR" if len(value) <= 4000 else "SQL_WLONGVARCHAR"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "SQL_VARBINARY" if len(value) <= 8000 else "SQL_LONGVARBINARY"
    if isinstance(value, datetime.datetime):
        return "SQL_TYPE_TIMESTAMP"
    if isinstance(value, datetime.date):
        return "SQL_TYPE_DATE"
    if isinstance(value, uuid.UUID):
        return "SQL_GUID"
    raise TypeError(f"pyodbc cannot bind {type(value).__name__}")  # as pyodbc's "Invalid parameter type"


# pyodbc's SQL type constants (sql.h, sqlext.h, msodbcsql's): the number setinputsizes takes -> its name
SQL_TYPES = {-11: "SQL_GUID", -3: "SQL_VARBINARY", -4: "SQL_LONGVARBINARY", -9: "SQL_WVARCHAR", -10: "SQL_WLONGVARCHAR",
             12: "SQL_VARCHAR", 4: "SQL_INTEGER", -5: "SQL_BIGINT", -7: "SQL_BIT", 93: "SQL_TYPE_TIMESTAMP", 2: "SQL_NUMERIC"}  # fmt: skip


def bound_type(value: Any, size: Any) -> str:
    """The SQL type a value is bound as: its input size's where setinputsizes gave one (with the column
    size: 0 is (max)), else pyodbc's from its Python type."""
    if size is None:
        return sql_type(value)
    kind, column_size = (size, None) if isinstance(size, int) else (size[0], size[1] if len(size) > 1 else None)
    name = SQL_TYPES[kind]
    return name if column_size is None else f"{name}({'max' if column_size == 0 else column_size})"


@dataclass
class Call:
    """One statement the double was sent: how, its text, its binds with their SQL types, and the
    input sizes set before it (setinputsizes)."""

    method: str  # "execute" or "executemany"
    sql: str
    params: tuple | list[tuple]
    types: tuple[str, ...] | list[tuple[str, ...]]
    input_sizes: list | None = None
    fast: bool = False  # executemany with fast_executemany: one round trip for every row


@dataclass
class Server:
    """What every connection of the double reaches: the responders, the calls recorded, the session's
    NOCOUNT (`user options` 512) and the server's version."""

    nocount: bool = False
    version: str = "15.0.2000.5"
    calls: list[Call] = field(default_factory=list)
    responders: list[tuple[Callable[[str], bool], Answer]] = field(default_factory=list)
    commits: int = 0
    rollbacks: int = 0
    round_trips: int = 0  # statements sent: one per execute, one per row of a plain executemany

    def __post_init__(self) -> None:
        # what SQLAlchemy's mssql dialect asks on its first connection
        self.on("SERVERPROPERTY('ProductVersion')", lambda sql, params: [[(self.version,)]])
        self.on("schema_name()", lambda sql, params: [[("dbo",)]])
        self.on("sys.dm_exec_sessions", lambda sql, params: [[("READ COMMITTED",)]])
        self.on("test max support", lambda sql, params: [[("test max support",)]])
        self.on("sys.system_views", lambda sql, params: [[("dm_exec_sessions",)]])

    def on(self, match: str | Callable[[str], bool], answer: Answer) -> None:
        """Answer statements containing `match` (or for which it returns True) with `answer`; the
        latest responder is tried first, so a test's own come before the defaults."""
        test = match if callable(match) else (lambda sql, text=match: text in sql)
        self.responders.insert(0, (test, answer))

    def answer(self, sql: str, params: tuple) -> list:
        for test, answer in self.responders:
            if test(sql):
                return list(answer(sql, params))
        if sql.lstrip().upper().startswith("SELECT"):
            return [[]]  # a query nobody scripted: no rows
        return []  # a statement nobody scripted: no result (SET, DECLARE, ...)

    def executed(self, containing: str = "") -> list[Call]:
        """The calls whose text contains `containing`, in order."""
        return [call for call in self.calls if containing in call.sql]

    def module(self) -> types.ModuleType:
        """The double as the `pyodbc` module a DBAPI consumer imports."""
        module = types.ModuleType("pyodbc")
        module.paramstyle = "qmark"  # type: ignore[attr-defined]
        module.version = "5.1.0"  # type: ignore[attr-defined]
        module.connect = lambda *args, **kwargs: Connection(self)  # type: ignore[attr-defined]
        module.Cursor = Cursor  # type: ignore[attr-defined]
        module.Error = Error  # type: ignore[attr-defined]
        module.ProgrammingError = ProgrammingError  # type: ignore[attr-defined]
        module.SQL_DBMS_VER = 18  # type: ignore[attr-defined]
        return module

    def engine(self) -> sa.Engine:
        """An `mssql+pyodbc` SQLAlchemy engine whose connections are the double's."""
        return sa.create_engine("mssql+pyodbc://", module=self.module(), poolclass=sa.pool.StaticPool)

    def driver_connection(self) -> DriverConnection:
        """A DriverConnection over a connection of the double, as Transport.driver_connection binds
        a pyodbc connection."""
        connection = Connection(self)
        return DriverConnection(connection, connection.cursor(), "qmark")


class Connection:
    """pyodbc.Connection."""

    def __init__(self, server: Server):
        self.server = server
        self.autocommit = False

    def cursor(self) -> Cursor:
        return Cursor(self)

    def commit(self) -> None:
        self.server.commits += 1

    def rollback(self) -> None:
        self.server.rollbacks += 1

    def close(self) -> None:
        pass

    def add_output_converter(self, sql_type: int, converter: Any) -> None:
        pass

    def getinfo(self, kind: int) -> str:
        return self.server.version


class Cursor:
    """pyodbc.Cursor: the current result's rowcount and description, and the results still to come."""

    def __init__(self, connection: Connection):
        self.connection = connection
        self.fast_executemany = False
        self.rowcount = -1
        self.description: list[tuple] | None = None
        self.closed = False
        self._input_sizes: list | None = None
        self._current: list[tuple] | None = None
        self._pending: list = []

    def setinputsizes(self, sizes: Sequence | None) -> None:
        """As pyodbc: kept for every later statement until changed; None clears them."""
        self._input_sizes = None if sizes is None else list(sizes)

    def _types(self, row: tuple) -> tuple[str, ...]:
        sizes = self._input_sizes or []
        return tuple(bound_type(value, sizes[i] if i < len(sizes) else None) for i, value in enumerate(row))

    def execute(self, sql: str, *params: Any) -> Cursor:
        binds = tuple(params[0]) if len(params) == 1 and isinstance(params[0], (tuple, list)) else tuple(params)
        server = self.connection.server
        server.calls.append(Call("execute", sql, binds, self._types(binds), self._input_sizes))
        server.round_trips += 1
        results = server.answer(sql, binds)
        if server.nocount or NOCOUNT_ON.search(sql):
            results = [result for result in results if not isinstance(result, int)]  # no row counts sent
        self._pending = results
        self.nextset()
        return self

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> None:
        rows = [tuple(row) for row in seq_of_params]
        server = self.connection.server
        types_ = [self._types(row) for row in rows]
        server.calls.append(Call("executemany", sql, rows, types_, self._input_sizes, self.fast_executemany))
        server.round_trips += 1 if self.fast_executemany else len(rows)  # pyodbc's loop without it: a trip per row
        for row in rows:
            server.answer(sql, row)
        self._pending, self._current, self.description, self.rowcount = [], None, None, -1

    def nextset(self) -> bool | None:
        if not self._pending:
            self._current, self.description, self.rowcount = None, None, -1
            return None
        result = self._pending.pop(0)
        if isinstance(result, int):
            self._current, self.description, self.rowcount = None, None, result
        else:
            self._current = list(result)
            width = len(self._current[0]) if self._current else 1
            self.description = [(f"column{i}", str, None, None, None, None, True) for i in range(width)]
            self.rowcount = -1
        return True

    def _rows(self) -> list[tuple]:
        if self._current is None:
            raise ProgrammingError("No results.  Previous SQL was not a query.")
        return self._current

    def fetchone(self) -> tuple | None:
        rows = self._rows()
        return rows.pop(0) if rows else None

    def fetchall(self) -> list[tuple]:
        rows, self._current = self._rows(), []
        return rows

    def fetchmany(self, size: int = 1) -> list[tuple]:
        rows = self._rows()
        taken, self._current = rows[:size], rows[size:]
        return taken

    def close(self) -> None:
        self.closed = True
