"""Compile a messaging topology into Alembic migrations with the SQL transport's exact DDL."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`from sqltransport_schema import Transport`, without importing SQLAlchemy for the CLI's sake."""
    if name == "Transport":
        from .runtime.transport import Transport

        return Transport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
