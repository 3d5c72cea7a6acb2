"""Alembic environment for sqltransport-schema.

The database URL comes from `alembic -x url=...`, else SQLTRANSPORT_URL, else
sqlalchemy.url in alembic.ini (a SQLite file by default). `-x discard=Sales.host-b,...`
lets the drops of those tables take their rows along; `-x discard_messages=true` every drop
(for downgrades you mean); `-x drop_protected=error,...` names protected queues a run may drop.
`-x lock_timeout=2s` bounds each statement's wait for a lock and `-x lock_retry_for=10m` how long a
blocked upgrade is rolled back and retried (docs/live-migrations.md). `-x verbose=true` adds
Alembic's own INFO lines, which alembic.ini keeps quiet.
"""

from sqltransport_schema.migrate.env import run

run()
