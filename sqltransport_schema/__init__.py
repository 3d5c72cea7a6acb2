"""Compile a messaging topology into Alembic migrations with the SQL transport's exact DDL."""

__version__ = "0.1.0"
