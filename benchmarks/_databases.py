"""Throwaway PostgreSQL databases for the benchmarks (created and dropped around each measurement)."""

from __future__ import annotations

import uuid

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def admin():
    import psycopg

    return psycopg.connect(PG_ADMIN, autocommit=True)


def create_database(prefix: str = "sqlts_bench") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    with admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
