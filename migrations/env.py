"""Alembic environment for sqltransport-schema.

The database URL comes from `alembic -x url=...`, else SQLTRANSPORT_URL, else
sqlalchemy.url in alembic.ini (a SQLite file by default). `-x discard_messages=true`
lets drops proceed on queues that still hold messages (for downgrades you mean).
"""

from sqltransport_schema.migrate.env import run

run()
