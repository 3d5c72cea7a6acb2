"""What an engine says about reaching its databases, beside the SQL of engines/base.py's Dialect:
the bounds of a read that must not wait (a fleet's version read and status), and the making of a
database that is not there (fleet upgrade --create-missing). Each engine overrides what it has."""

from __future__ import annotations

from typing import Any


class Connecting:
    # A bounded read (a fleet's version read and status): the driver's connect parameter taking the
    # seconds to wait for a connection, and the session statements ({ms}: the bound in milliseconds)
    # that keep a statement, and its wait for a lock, within it.
    CONNECT_TIMEOUT_PARAM: str | None = None
    READ_TIMEOUT_STATEMENTS: tuple[str, ...] = ()

    def bounded_connect(self, cparams: dict[str, Any], seconds: float) -> None:
        """The driver's connect parameters, waiting at most `seconds` for the connection."""
        if self.CONNECT_TIMEOUT_PARAM is not None:
            cparams[self.CONNECT_TIMEOUT_PARAM] = max(int(seconds + 0.999), 1)

    def bound_session(self, dbapi_connection: Any, seconds: float) -> None:
        """A fresh connection's statements (and lock waits) bounded to `seconds` for its session."""
        if self.READ_TIMEOUT_STATEMENTS:
            cursor = dbapi_connection.cursor()
            for statement in self.READ_TIMEOUT_STATEMENTS:
                cursor.execute(statement.format(ms=int(seconds * 1000)))
            cursor.close()

    # fleet upgrade --create-missing: a server's database made before its first upgrade, from the
    # server's maintenance database (None: the engine cannot here; a file engine's folder is made instead)
    MAINTENANCE_DATABASE: str | None = None
    DATABASE_EXISTS: str | None = None  # a row when the database named @Name exists
    CREATE_DATABASE: str | None = None  # {name}: the quoted database name
    DUPLICATE_DATABASE: str | None = None  # the error code of a CREATE another session won

    def duplicate_database(self, error: BaseException) -> bool:
        return self.DUPLICATE_DATABASE is not None and self.DUPLICATE_DATABASE in (
            getattr(error, "sqlstate", None),
            getattr(error, "pgcode", None),
        )
