"""A transport deployed by the project's own migrations, and the connections a user would hold on it."""

from __future__ import annotations

import sqlite3

from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.transport import Transport

# Two endpoints and the error queue: the smallest topology a new user deploys (tests of what they meet).
TWO_ENDPOINTS = """\
transport_version: "9.1"
endpoints:
  - name: Sales
  - name: Billing
queues:
  - name: error
"""
TOPOLOGY = TWO_ENDPOINTS + "  - name: audit\n"


def deployed(project, url, monkeypatch, topology: str = TOPOLOGY) -> Transport:
    """TOPOLOGY (or `topology`) deployed on `url`, read back as a user's process would (from the project folder)."""
    project.deploy(url, topology)
    monkeypatch.chdir(project.root)
    return Transport.from_database(make_engine(url), str(project.ini))


def plain_driver_connection(transport):
    """What a user holds without SQLAlchemy: sqlite3.connect / psycopg.connect on the same database."""
    url = transport.engine.url
    if url.get_backend_name() == "sqlite":
        return sqlite3.connect(url.database)
    import psycopg

    return psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False))
