"""The DDL guards' refusals are recognised by the driver's error code, never by the message: each
engine's GUARD_ERROR_CODES against the code each of its drivers reports (errors shaped as those
drivers raise them; SQLite and PostgreSQL also live in the migration tests)."""

from __future__ import annotations

import sqlite3

import pytest

from sqltransport_schema import engines
from sqltransport_schema.engines.base import driver_error_codes


class _PsycopgError(Exception):
    sqlstate = "55006"  # object_in_use, the drop guard's ERRCODE


class _Psycopg2Error(Exception):
    pgcode = "23502"  # not_null_violation, the saga promotion's guard


class _OracleError:
    code = 20001
    message = "ORA-20001: refusing to drop saga table"


def _sqlite_check_failure() -> sqlite3.Error:
    connection = sqlite3.connect(":memory:")
    connection.execute('CREATE TEMP TABLE guard (q TEXT CONSTRAINT "refusing to drop queue x" CHECK (q IS NULL))')
    try:
        connection.execute("INSERT INTO guard VALUES ('nonempty')")
    except sqlite3.IntegrityError as error:
        return error
    raise AssertionError("the CHECK constraint did not fail")


GUARDS = {
    "postgresql (psycopg)": ("postgresql", _PsycopgError("refusing to drop queue x: it still holds messages")),
    "postgresql (psycopg2)": ("postgresql", _Psycopg2Error("refusing to promote ...")),
    "sqlite": ("sqlite", _sqlite_check_failure()),
    "mysql (pymysql)": ("mysql", Exception(1644, "refusing to drop saga table x")),
    "mssql (pyodbc)": (
        "mssql",
        Exception("42000", "[42000] [Microsoft][ODBC Driver 18][SQL Server]refusing to drop x (50000) (SQLExecDirectW)"),
    ),
    "oracle (oracledb)": ("oracle", Exception(_OracleError())),
}


@pytest.mark.parametrize("case", list(GUARDS))
def test_a_guard_is_recognised_by_its_code(case):
    engine, error = GUARDS[case]
    assert engines.get(engine).guard_refused(error)


@pytest.mark.parametrize(
    "engine, error",
    [
        ("postgresql", type("E", (Exception,), {"sqlstate": "42P01"})("refusing to drop: but undefined_table")),
        ("sqlite", sqlite3.OperationalError("refusing to drop: but no code")),
        ("mysql", Exception(1050, "refusing to drop: table exists")),
        ("mssql", Exception("42S02", "[42S02] refusing to drop: invalid object name (208) (SQLExecDirectW)")),
    ],
)
def test_a_message_alone_is_not_a_guard(engine, error):
    assert not engines.get(engine).guard_refused(error)


def test_the_codes_of_an_error_without_any():
    assert driver_error_codes(Exception()) == set()
