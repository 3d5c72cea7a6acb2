"""Compile a messaging topology into Alembic migrations with the SQL transport's exact DDL."""

DISTRIBUTION = "sqltransport-schema"


def __getattr__(name: str) -> object:
    """`from sqltransport_schema import Transport`, without importing SQLAlchemy for the CLI's sake;
    `__version__` from the installed package's metadata (pyproject.toml holds the one version)."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(DISTRIBUTION)
        except PackageNotFoundError:  # run from a checkout that was never installed
            return "0+unknown"
    if name == "Transport":
        from .runtime.transport import Transport

        return Transport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
