"""The defaults a command's --help shows, each defined once here, where the modules that use them
import them from: building the command line's parser then imports none of those modules (no
SQLAlchemy, Alembic, YAML or pyspark for `--help`, `--version` or a command that needs none of them).

Plain values; this module imports nothing. A default only one module uses, and that the parser
does not show, stays in that module.
"""

from __future__ import annotations

# runtime/status.py: status and retry (and the console's retries)
DEFAULT_ERROR_QUEUE = "error"
DEFAULT_RETRY_BATCH = 100

# runtime/outbox.py: outbox cleanup
DEFAULT_CLEANUP_BATCH = 10000

# console/actions.py
DEFAULT_KEEP_JOBS = 200  # finished jobs a console keeps in memory (their pages); the oldest ended is dropped first

# migrate/locks.py: how long each statement of a migration waits for its lock (-x lock_timeout, script --lock-timeout)
DEFAULT_TIMEOUT = "2s"

# topology/format.py: the transport's defaults where a topology names no subscription table or delayed-table suffix.
# seconds a read of a database may wait (its connection, each statement, each lock): fleet, status, check,
# the exporters and the console report a database past it (a held lock, a server that does not answer), never
# wait it out; the pipeline's connections (DBAPI and JDBC) are opened within it (their statements unbounded)
DEFAULT_READ_TIMEOUT = 10.0
DEFAULT_SUBSCRIPTION_TABLE = "SubscriptionRouting"
DEFAULT_DELAYED_SUFFIX = "Delayed"

# listings.py: what `statements` lists when it is given none
EXAMPLE_QUEUE = "MyQueue"  # the queue a listing names when it is given none
DEFAULT_TOPICS = 1  # topics find_subscribers takes
DEFAULT_PEEK_BATCH_SIZE = 100  # TOP n of SQL Server's peek (4.1.2-6.0), as the runtime's Transport defaults it

# pipeline/: the Spark jobs' sizes
DEFAULT_ROWS_PER_PARTITION = 25_000  # move
ARCHIVE_PARTITIONS = 4  # archive: parallel JDBC reads of the queue
BACKFILL_BATCH = 5_000  # backfill: rows per UPDATE transaction
TENANT_BATCH = 1_000  # tenants: rows per tenant transaction
