"""SQL Server's statements of `status`, `retry` and the console's archive and action log (engines/live_bus.py;
the nested `MSSQL.LiveBus`)."""

from __future__ import annotations

from ...statements import Statement
from ..base import Dialect


class LiveBus(Dialect.LiveBus):  # pragma: no cover - no SQL Server here; text only (tests parse it)
    """Figures read WITH (NOLOCK): never blocked by a receive's locks, nor blocking one (a message
    in flight is counted). Estimates from sys.partitions (per catalog, three-part names). A retry
    batch is read WITH (UPDLOCK, ROWLOCK): held until its transaction ends."""

    supported = True
    order = "RowVersion"
    QUEUE_ARM = (
        "SELECT {index} AS i, COUNT_BIG(*) AS depth, COUNT_BIG(CASE WHEN Expires < GETUTCDATE() THEN 1 END) AS expired, "
        "(SELECT TOP (1) Headers FROM {table} WITH (NOLOCK) ORDER BY {order}) AS head, CAST(NULL AS datetime) AS due "
        "FROM {table} WITH (NOLOCK)"
    )
    QUEUE_ESTIMATE_ARM = (
        "SELECT {index}, CAST(NULL AS bigint), CAST(NULL AS bigint), "
        "(SELECT TOP (1) Headers FROM {table} WITH (NOLOCK) ORDER BY {order}), CAST(NULL AS datetime)"
    )
    DELAYED_ARM = (
        "SELECT {index}, COUNT_BIG(*), COUNT_BIG(CASE WHEN Due < GETUTCDATE() THEN 1 END), CAST(NULL AS nvarchar(max)), MIN(Due) "
        "FROM {table} WITH (NOLOCK)"
    )
    OUTBOX_ARM = (
        "SELECT {index}, COUNT_BIG(*), COUNT_BIG(CASE WHEN Dispatched = 0 THEN 1 END), CAST(NULL AS nvarchar(max)), MIN(DispatchedAt) "
        "FROM {table} WITH (NOLOCK)"
    )
    COUNT_ARM = (
        "SELECT {index}, COUNT_BIG(*), CAST(NULL AS bigint), CAST(NULL AS nvarchar(max)), CAST(NULL AS datetime) FROM {table} WITH (NOLOCK)"
    )
    HIGH_WATER_ARM = "SELECT {index}, CAST(IDENT_CURRENT(@Name) AS bigint)"  # RowVersion's IDENTITY
    TABLES = """\
SELECT {catalog} AS CatalogName, s.name, t.name, SUM(p.rows)
FROM {sys}.tables AS t
JOIN {sys}.schemas AS s ON s.schema_id = t.schema_id
JOIN {sys}.partitions AS p ON p.object_id = t.object_id AND p.index_id IN (0, 1)
GROUP BY s.name, t.name"""
    FAILED_Q_COUNTS = """\
SELECT FailedQ, COUNT_BIG(*) AS Messages FROM (
    SELECT CASE WHEN ISJSON(Headers) = 1 THEN JSON_VALUE(Headers, '$."NServiceBus.FailedQ"') END AS FailedQ
    FROM {table} WITH (NOLOCK)
) AS failed
GROUP BY FailedQ ORDER BY FailedQ"""
    TOPICS = "SELECT Topic, COUNT_BIG(*) AS Subscribers FROM {table} GROUP BY Topic ORDER BY Topic"
    ERROR_BATCH = (
        "SELECT TOP (@BatchSize) {order}, Id, Headers, Body FROM {table} WITH (UPDLOCK, ROWLOCK) WHERE {order} > @After ORDER BY {order}"
    )
    ERROR_SCAN = "SELECT TOP (@BatchSize) {order}, Id, Headers, NULL FROM {table} WHERE {order} > @After ORDER BY {order}"
    # The console's action log and the error queue's archive. Each move is one statement, the DELETE's
    # OUTPUT DELETED... INTO the other table (so a retry running beside never sends a message this
    # archives: the DELETE takes the row or finds it gone); the archive's RowVersion is its own
    # IDENTITY, the queue's is given anew on a restore. The queue has no index on Id (the
    # transport's): the Ids chosen are mapped to its RowVersion in one read (ARCHIVE_KEYS, @Ids a
    # JSON array), and each message moves by a seek of its clustered key.
    ACTION_LOG_INSERT = (
        "INSERT INTO {table} (At, Who, Action, Target, Messages) VALUES (SYSUTCDATETIME(), @Who, @Action, @Target, @Messages)"
    )
    ACTION_LOG_READ = "SELECT TOP (@Limit) At, Who, Action, Target, Messages FROM {table} ORDER BY Id DESC"
    ACTION_LOG_ABOUT = (
        "SELECT TOP (@Limit) At, Who, Action, Target, Messages FROM {table} WHERE Target LIKE @Pattern ESCAPE '!' ORDER BY Id"
    )
    _MOVED = "Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body"
    _DELETED = ", ".join(f"DELETED.{column}" for column in _MOVED.split(", "))
    ARCHIVE_KEYS = "SELECT {order}, Id FROM {queue} WHERE Id IN (SELECT CAST(value AS uniqueidentifier) FROM OPENJSON(@Ids))"
    ARCHIVE_MOVES = (
        f"DELETE FROM {{queue}} WITH (ROWLOCK) OUTPUT {_DELETED}, SYSUTCDATETIME(), @Why, @By "
        f"INTO {{archive}} ({_MOVED}, ArchivedAt, ArchivedWhy, ArchivedBy) WHERE {{order}} = @Key",
    )
    RESTORE_MOVES = (f"DELETE FROM {{archive}} WITH (ROWLOCK) OUTPUT {_DELETED} INTO {{queue}} ({_MOVED}) WHERE {{order}} = @Key",)
    # @Seconds may hold a fraction and 30 days of milliseconds pass an int (DATEADD's): whole seconds, then the rest
    ARCHIVE_PURGE = (
        "DELETE FROM {archive} WHERE {order} IN (SELECT TOP (@BatchSize) {order} FROM {archive} WHERE ArchivedAt < "
        "DATEADD(millisecond, -CAST((@Seconds - FLOOR(@Seconds)) * 1000 AS int), "
        "DATEADD(second, -CAST(FLOOR(@Seconds) AS int), SYSUTCDATETIME())) ORDER BY {order})"
    )
    ARCHIVE_PAGE = (
        "SELECT TOP (@Limit) {order}, Id, ArchivedAt, ArchivedWhy, ArchivedBy FROM {archive} WHERE {order} > @After ORDER BY {order}"
    )
    ARCHIVE_COUNT = "SELECT COUNT_BIG(*) FROM {archive}"

    def tables(self, catalogs: set[str | None], estimate: bool = False) -> list[Statement]:
        """One statement per catalog (None: the connection's database), its name returned as given."""
        out = []
        for catalog in sorted(catalogs, key=lambda c: (c is not None, c or "")):
            literal = "CAST(NULL AS sysname)" if catalog is None else "N" + self.dialect.literal(catalog)
            out.append(self.statement("tables", self.TABLES.format(catalog=literal, sys=self.dialect._sys(catalog))))
        return out
