"""PostgreSQL's statements of status and retry (engines/live_bus.py): `PostgreSQL.LiveBus`."""

from __future__ import annotations

from ..base import Dialect


class LiveBus(Dialect.LiveBus):
    """Exact figures in one scan per table (count and the expired count together), the head by
    Seq's index; estimates from the statistics collector (pg_stat_user_tables.n_live_tup, kept
    as rows are written), else pg_class.reltuples (set by VACUUM and ANALYZE).

    On a new connection most of a status is the server loading each table's and index's catalog
    entries while planning (a session's own, on one core), so the figures go out on two
    connections, in batches of 50 (planning time grows faster than the arms above that); the
    statements are prepared at their first run (a repeated status is not planned again). A queue
    the statistics say is empty is counted without planning its head read (QUEUE_COUNT_ARM)."""

    supported = True
    batch = 50
    connections = 2
    prepare = True
    order = "Seq"
    QUEUE_ARM = (
        "SELECT {index} AS i, count(*) AS depth, "
        "count(*) FILTER (WHERE Expires < now() AT TIME ZONE 'UTC') AS expired, "
        "(SELECT Headers FROM {table} ORDER BY {order} LIMIT 1) AS head, CAST(NULL AS timestamptz) AS due FROM {table}"
    )
    QUEUE_COUNT_ARM = (
        "SELECT {index} AS i, count(*) AS depth, "
        "count(*) FILTER (WHERE Expires < now() AT TIME ZONE 'UTC') AS expired, "
        "CAST(NULL AS text) AS head, CAST(NULL AS timestamptz) AS due FROM {table}"
    )
    # the head as the arm's own FROM (no row for an empty queue): planned in about half the time
    # of a scalar subquery, whose cost per arm grows with the arms of the statement
    QUEUE_ESTIMATE_ARM = (
        "(SELECT {index}, CAST(NULL AS bigint), CAST(NULL AS bigint), Headers, CAST(NULL AS timestamptz) "
        "FROM {table} ORDER BY {order} LIMIT 1)"
    )
    # due as the transport's move compares it (Due < now() AT TIME ZONE 'UTC'): what its next move takes
    DELAYED_ARM = (
        "SELECT {index}, count(*), count(*) FILTER (WHERE Due < now() AT TIME ZONE 'UTC'), CAST(NULL AS text), min(Due) FROM {table}"
    )
    COUNT_ARM = "SELECT {index}, count(*), CAST(NULL AS bigint), CAST(NULL AS text), CAST(NULL AS timestamptz) FROM {table}"
    # SQL persistence writes DispatchedAt in UTC (timestamp without time zone)
    OUTBOX_ARM = (
        "SELECT {index}, count(*), count(*) FILTER (WHERE NOT \"Dispatched\"), CAST(NULL AS text), "
        "min(\"DispatchedAt\") AT TIME ZONE 'UTC' FROM {table}"
    )
    # Seq's sequence (serial or bigserial), NULL before its first nextval
    HIGH_WATER_ARM = "SELECT {index}, pg_sequence_last_value(CAST(pg_get_serial_sequence(@Name, 'seq') AS regclass))"
    TABLES = """\
SELECT CAST(NULL AS text), n.nspname, c.relname, CAST(NULL AS real)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')"""
    # the collector's live-row count straight from its function (the pg_stat_user_tables view
    # computes every figure of every table), else reltuples (-1: never vacuumed nor analyzed)
    TABLES_ESTIMATED = """\
SELECT CAST(NULL AS text), n.nspname, c.relname,
    CASE WHEN pg_stat_get_live_tuples(c.oid) > 0 OR c.reltuples < 0 THEN pg_stat_get_live_tuples(c.oid) ELSE c.reltuples END
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')"""
    # The header's value, cut out by a pattern of a JSON string (only JSON's escapes) and read as JSON
    # by the server (so \/ is /); NULL where a message names none or its headers are not JSON.
    JSON_STRING = r'"((?:[^"\\]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{{4}}))*)"'  # a JSON string's body, captured
    # a JSON string's body holding an escape of NUL or of a surrogate (operations.ESCAPED_VALUE): not read as text
    ESCAPES_UNREAD = r"'\\u(0000|[dD][89a-fA-F])'"
    FAILED_Q_COUNTS = (
        r"""SELECT FailedQ, count(*) AS Messages FROM (
    SELECT CASE WHEN q ~ """
        + ESCAPES_UNREAD
        + """ THEN NULL ELSE ('"' || q || '"')::json #>> '{{}}' END AS FailedQ
    FROM (SELECT substring(Headers FROM '"NServiceBus\\.FailedQ"\\s*:\\s*"""
        + JSON_STRING
        + """') AS q FROM {table}) AS cut
) AS failed
GROUP BY FailedQ ORDER BY FailedQ"""
    )
    ACTION_LOG_INSERT = "INSERT INTO {table} (At, Who, Action, Target, Messages) VALUES (now(), @Who, @Action, @Target, @Messages)"
    # One statement each way: the row deleted and inserted at once, so a retry running beside never
    # sends a message this archives (the DELETE takes the row or finds it gone). The queue's Id (its
    # primary key) and Seq (UNIQUE) are both indexed: the keys' read and each move are index lookups.
    ARCHIVE_KEYS = "SELECT {order}, Id FROM {queue} WHERE Id = ANY(CAST(@Ids AS uuid[]))"
    ARCHIVE_MOVES = (
        """WITH moved AS (DELETE FROM {queue} WHERE {order} = @Key RETURNING Id, Expires, Headers, Body)
INSERT INTO {archive} (Id, Expires, Headers, Body, ArchivedAt, ArchivedWhy, ArchivedBy)
SELECT Id, Expires, Headers, Body, now(), @Why, @By FROM moved""",
    )
    RESTORE_MOVES = (
        # a message whose Id is in the error queue again stays archived (the queue's key is its Id)
        """WITH moved AS (
    DELETE FROM {archive} AS a WHERE Seq = @Key AND NOT EXISTS (SELECT 1 FROM {queue} AS q WHERE q.Id = a.Id)
    RETURNING Id, Expires, Headers, Body
)
INSERT INTO {queue} (Id, Expires, Headers, Body) SELECT Id, Expires, Headers, Body FROM moved""",
    )
    ARCHIVE_PURGE = (
        "DELETE FROM {archive} WHERE Seq IN (SELECT Seq FROM {archive} "
        "WHERE ArchivedAt < now() - make_interval(secs => @Seconds) ORDER BY Seq LIMIT @BatchSize)"
    )

    @staticmethod
    def _cut(header: str) -> str:
        """The text between "Name":" and the next quote (split_part: a plain byte search, far cheaper
        than strpos or substr, which count characters, or a pattern); '' where the header is not
        written so. Compact JSON, as NServiceBus writes it, holds "Name":" only where the header's
        value begins (a quote inside a value is escaped)."""
        return f"split_part(split_part(Headers, '\"{header}\":\"', 2), '\"', 1)"

    def _value(self, cut: str, header: str) -> str:
        """The header's value from its cut: the cut itself when it is not empty and holds no
        backslash; else NULL where the name is nowhere in the text, else (escapes, spaces around the
        colon, an empty value) the JSON string a pattern cuts out after the name, read by the server
        as JSON (so \\/ is /), as FAILED_Q_COUNTS reads FailedQ. A cast of the whole text fails on
        headers that are not JSON; this never does."""
        name = '"' + header + '"'
        pattern = name.replace(".", "\\.") + r"\s*:\s*" + self.JSON_STRING
        string = f"substring(Headers FROM '{pattern}')"
        exact = f"('\"' || {string} || '\"')::json #>> '{{{{}}}}'"
        escaped = f"chr(1) || '\"' || {string} || '\"'"  # operations.ESCAPED_VALUE, the JSON string as written
        return (
            f"CASE WHEN {cut} <> '' AND strpos({cut}, '\\') = 0 THEN {cut} WHEN strpos(Headers, '{name}') = 0 THEN NULL "
            f"WHEN {string} ~ {self.ESCAPES_UNREAD} THEN {escaped} ELSE {exact} END"
        )

    def header_value(self, header: str) -> str:
        return self._value(self._cut(header), header)

    def _group_source(self, fields: tuple[str, ...], body: bool) -> str:
        """Two layers, each fenced by OFFSET 0 (planned on its own, never flattened): the inner cuts
        each header once per row, the outer reads the values from the cuts. Unfenced, the planner
        repeats each expression where it is used (min and max each read TimeOfFailure anew) and,
        estimating a group per row of Headers, sorts whole rows to disk; fenced, it reads the table
        once and groups in a hash table. (Parallel workers do not pay here: the rows cross to the
        leader through a queue, slower than the cuts themselves.)"""
        cuts = ", ".join(f"{self._cut(self.FAILED_HEADERS[name])} AS cut_{name}" for name in fields)
        values = ", ".join(f"COALESCE({self._value('r.cut_' + name, self.FAILED_HEADERS[name])}, '') AS {name}" for name in fields)
        body_column = ", BodyString AS body" if body else ""
        return (
            f"SELECT r.Headers AS headers{', r.body' if body else ''}, {values} FROM "
            f"(SELECT Headers{body_column}, {cuts} FROM {{table}} OFFSET 0) AS r OFFSET 0"
        )

    # FOR UPDATE, not SKIP LOCKED: a message another transaction holds is waited for, never passed over
    ERROR_BATCH = "SELECT {order}, Id, Headers, Body FROM {table} WHERE {order} > @After ORDER BY {order} LIMIT @BatchSize FOR UPDATE"
    ERROR_SCAN = "SELECT {order}, Id, Headers, NULL FROM {table} WHERE {order} > @After ORDER BY {order} LIMIT @BatchSize"
