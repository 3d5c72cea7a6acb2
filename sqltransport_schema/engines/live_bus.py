"""The live bus side of an engine: the neutral base of each engine's nested `LiveBus`.

An engine's live-bus section (`PostgreSQL.LiveBus`, `SQLite.LiveBus`, `MSSQL.LiveBus`;
the instance is `dialect.live_bus`) holds the statements of `sqltransport-schema status` and
`retry` (runtime/status.py runs them): the per-table figures of many tables in one statement
(a UNION ALL of one arm per table, `batch` tables a statement), the table list with the engine's
row estimates, the error queue's counts by `NServiceBus.FailedQ`, the subscribers per topic, and the
error-queue reads and deletes of a retry batch.

Each arm returns the same five columns: the table's position in the request ({index} in a template,
an integer literal: part of the statement's shape, not a value, so the statement has no
parameters and a server that keeps its plan, PostgreSQL's prepared statements, plans it once), and
three figures and a time whose meaning depends on the table kind:

    queue        i, depth, expired (NULL when estimating), head Headers (text), NULL
    delayed      i, depth, due now, NULL, earliest Due
    outbox       i, rows, not dispatched yet, NULL, earliest DispatchedAt (of the rows awaiting cleanup)
    other        i, depth (rows), NULL, NULL, NULL

An engine's estimating queue arm may return no row for an empty queue (PostgreSQL's reads the head
as the arm's own FROM); a queue whose estimate is 0 gets no arm at all when estimating, and an arm
without the head read (NULL) when counting, where the engine has one (QUEUE_COUNT_ARM).

Values are bound; table names reach the text only through the dialect's `qualified`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..schema import Kind, TableName
from ..statements import Statement, fill, parameters_of

if TYPE_CHECKING:
    from ..versions import Profile
    from .base import Dialect

# The header the error queue's messages name their failed queue in (wire.py's FAILED_Q).
FAILED_Q = "NServiceBus.FailedQ"
# A header's value no engine reads as text: its JSON string escapes a NUL (PostgreSQL's text refuses
# it, SQLite's json_extract stops at it) or a surrogate (lone, neither engine decodes it). The console's
# reads (header_value) then give ESCAPED_VALUE and the JSON string as written, quotes and escapes kept,
# which errorqueue/selection.py (read_value) decodes and marks; a group's key and its filter compare that text, so such
# messages group and filter as any others. status's FailedQ counts read such a value as NULL (unread).
ESCAPED_VALUE = "\x01"


class LiveBus:
    """What every engine's operations section provides; engines without transport tables keep this base."""

    supported = False
    batch = 200  # tables per UNION ALL statement (SQLite allows 500 arms in one compound SELECT)
    # connections status spreads its figures statements over when it opens its own (a server that
    # runs each session on its own core counts two halves at once)
    connections = 1
    prepare = False  # ask the driver to prepare the figures statements at their first run
    order = "RowVersion"  # the queue's FIFO column

    QUEUE_ARM = ""
    # QUEUE_ARM without the head read (NULL): counting a queue the table list estimates empty, whose
    # head status reads after, only if the count finds messages; "" where the engine keeps no estimate
    QUEUE_COUNT_ARM = ""
    QUEUE_ESTIMATE_ARM = ""
    DELAYED_ARM = ""
    OUTBOX_ARM = ""  # "": the outbox is counted as any other table
    COUNT_ARM = ""
    # (position, the last RowVersion/Seq the queue's identity or sequence gave: kept when the queue
    # empties, never reused; NULL before its first message): what status --watch derives messages
    # in from. @Name is the table's name as the engine's catalog function takes it (high_water_name).
    HIGH_WATER_ARM = ""
    UNION = "\nUNION ALL\n"
    # every table of the database: catalog, schema, name, NULL; with the engine's row estimate
    # (NULL where it has none) in TABLES_ESTIMATED, where that costs more
    TABLES = ""
    TABLES_ESTIMATED = None
    FAILED_Q_COUNTS = ""
    TOPICS = "SELECT Topic, count(*) AS Subscribers FROM {table} GROUP BY Topic ORDER BY Topic"
    SUBSCRIPTIONS = "SELECT Endpoint, Topic, QueueAddress FROM {table} ORDER BY QueueAddress, Endpoint, Topic"
    ERROR_BATCH = ""  # a retry batch: locked until the transaction ends
    ERROR_SCAN = ""  # a dry run's read: no lock
    DELETE_RETRIED = "DELETE FROM {table} WHERE {order} = @Key"

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def _unsupported(self) -> NotImplementedError:
        return NotImplementedError(f"status and retry do not support {self.dialect.name}")

    def statement(self, name: str, template: str, **identifiers: str) -> Statement:
        return Statement(name, template, identifiers, parameters_of(template))

    # -- status ------------------------------------------------------------------------------
    def figures(
        self, tables: list[tuple[Kind, TableName]], profile: Profile, estimate: bool = False, empty: frozenset[int] = frozenset()
    ) -> list[Statement]:
        """The statements (one per `batch` tables) whose rows are each table's figures, the first
        column the table's position in `tables`. Estimating, queues are not scanned (their depth comes
        from `TABLES_ESTIMATED`): only their head is read, and not even that for the positions in
        `empty` (queues estimated empty); counting, those are counted without their head
        (QUEUE_COUNT_ARM). A batch keeps its tables whichever are in `empty`, so one queue filling or
        draining changes one statement's text, not every later one's."""
        if not self.supported:
            raise self._unsupported()
        out = []
        for start in range(0, len(tables), self.batch):
            arms, identifiers, templates = [], {}, set()
            for i, (kind, name) in enumerate(tables[start : start + self.batch], start):
                if kind is Kind.QUEUE and estimate:
                    if i in empty:
                        continue
                    arm = self.QUEUE_ESTIMATE_ARM
                elif kind is Kind.QUEUE:
                    arm = self.QUEUE_COUNT_ARM if i in empty and self.QUEUE_COUNT_ARM else self.QUEUE_ARM
                elif kind is Kind.DELAYED:
                    arm = self.DELAYED_ARM
                elif kind is Kind.OUTBOX and self.OUTBOX_ARM:
                    arm = self.OUTBOX_ARM
                else:
                    arm = self.COUNT_ARM
                templates.add(arm)
                identifiers[f"t{i}"] = self.dialect.qualified(name, profile)
                arms.append(fill(arm, {"table": "{t%d}" % i, "index": str(i), "order": self.order}))
            if arms:  # the parameters are the arm templates' (each read once, not in each of its arms)
                params = tuple(dict.fromkeys(name for arm in sorted(templates) for name in parameters_of(arm)))
                out.append(Statement("table_figures", self.UNION.join(arms), identifiers, params))
        return out

    def high_water_name(self, name: TableName, profile: Profile) -> str:
        """The table's name as a value for HIGH_WATER_ARM's catalog function: its quoted name."""
        return self.dialect.qualified(name, profile)

    def high_water(self, queues: list[tuple[int, TableName]], profile: Profile) -> list[tuple[Statement, dict[str, str]]]:
        """(statement, its parameters) pairs, one per `batch` queues, whose rows are (position, the
        last RowVersion/Seq the queue's identity or sequence gave) of each (position, queue)."""
        if not self.supported or not self.HIGH_WATER_ARM:
            raise self._unsupported()
        out = []
        for start in range(0, len(queues), self.batch):
            part = queues[start : start + self.batch]
            arms = [fill(self.HIGH_WATER_ARM, {"index": str(i)}).replace("@Name", f"@Name{i}") for i, _ in part]
            params = {f"Name{i}": self.high_water_name(name, profile) for i, name in part}
            out.append((Statement("high_water", self.UNION.join(arms), {}, tuple(params)), params))
        return out

    def tables(self, catalogs: set[str | None], estimate: bool = False) -> list[Statement]:
        """Every table of the databases the blueprint uses: rows (catalog, schema, name, estimate),
        the engine's row estimate only when asked; one database here, whatever the catalogs."""
        if not self.supported:
            raise self._unsupported()
        template = self.TABLES_ESTIMATED if estimate and self.TABLES_ESTIMATED else self.TABLES
        return [self.statement("tables", template)]

    READ_PROBE = "SELECT 1 FROM {table} WHERE 1 = 0"

    def read_probe(self, table: TableName, profile: Profile) -> Statement:
        """Reads no row, and is refused where the login may not read the table: what status runs on
        each table, one at a time, once a read of several was refused (docs/operations.md)."""
        return self.statement("read_probe", self.READ_PROBE, table=self.dialect.qualified(table, profile))

    def failed_queue_counts(self, table: TableName, profile: Profile) -> Statement:
        """(FailedQ, messages) of an error queue; FailedQ NULL where a message names none (or its
        headers cannot be read)."""
        return self.statement("failed_queue_counts", self.FAILED_Q_COUNTS, table=self.dialect.qualified(table, profile))

    def topics(self, table: TableName, profile: Profile) -> Statement:
        """(topic, subscribers) of a subscription table."""
        return self.statement("topics", self.TOPICS, table=self.dialect.qualified(table, profile))

    def subscriptions(self, table: TableName, profile: Profile) -> Statement:
        """(endpoint, topic, subscriber address) of every row of a subscription table."""
        return self.statement("subscriptions", self.SUBSCRIPTIONS, table=self.dialect.qualified(table, profile))

    # -- retry -------------------------------------------------------------------------------
    def error_batch(self, table: TableName, profile: Profile, lock: bool = True) -> Statement:
        """Up to @BatchSize messages of the error queue after @After in FIFO order: (key, Id, Headers,
        Body), locked until the transaction ends; without lock (a dry run) Body is NULL."""
        if not self.supported:
            raise self._unsupported()
        template = fill(self.ERROR_BATCH if lock else self.ERROR_SCAN, {"order": self.order})
        return self.statement("error_batch" if lock else "error_scan", template, table=self.dialect.qualified(table, profile))

    def delete_retried(self, table: TableName, profile: Profile) -> Statement:
        """Delete one message of the error queue by its key (@Key), run for each message of a batch."""
        template = fill(self.DELETE_RETRIED, {"order": self.order})
        return self.statement("delete_retried", template, table=self.dialect.qualified(table, profile))

    # -- values ------------------------------------------------------------------------------
    def time_value(self, value: Any) -> datetime | None:
        """A time a statement returned, as an aware UTC datetime (the engines store UTC)."""
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)

    # -- the error queue model's reads (errorqueue/reading.py) -----------------------------------
    # Each message of the error queue as a row of the headers the console groups and filters by,
    # each '' where a message names none (or its headers are not JSON), so that a group's key is
    # never NULL and compares with =. The times are NServiceBus.TimeOfFailure's text (wire format:
    # fixed width, so its text order is time order).
    FAILED_HEADERS = {
        "failed_queue": FAILED_Q,
        "exception_type": "NServiceBus.ExceptionInfo.ExceptionType",
        "exception_message": "NServiceBus.ExceptionInfo.Message",
        "message_type": "NServiceBus.EnclosedMessageTypes",
        "endpoint": "NServiceBus.ProcessingEndpoint",
        "time_of_failure": "NServiceBus.TimeOfFailure",
    }
    # the filters a read may take: field -> its condition on the source row f (values bound)
    FAILED_FILTERS = {
        "since": "f.time_of_failure >= @Since",
        "until": "f.time_of_failure < @Until",
        "failed_queue": "f.failed_queue = @FailedQueue",
        "text": "f.headers LIKE @Text ESCAPE '!'",
        "body": "f.body LIKE @Body ESCAPE '!'",  # only where the error queue has BodyString
        "exception_type": "f.exception_type = @ExceptionType",
        "exception_message": "f.exception_message = @ExceptionMessage",
        "message_type": "f.message_type = @MessageType",
        "endpoint": "f.endpoint = @Endpoint",
    }
    FAILED_ROW = "SELECT k, id, failed_queue, exception_type, exception_message, message_type, endpoint, time_of_failure"
    FAILED_MESSAGE = "SELECT {order}, Id, Headers, Body FROM {table} WHERE {order} = @Key"

    def header_value(self, header: str) -> str:
        """SQL of the header's value in a row's Headers (NULL where none, or not JSON); header is one
        of FAILED_HEADERS' (a constant of ours, never a user's text)."""
        raise self._unsupported()

    def _failed_source(self, fields: tuple[str, ...] = tuple(FAILED_HEADERS), body: bool = False) -> str:
        """Each message as a row of k, id, headers, the `fields` of FAILED_HEADERS (and body, its
        BodyString, when asked)."""
        values = ", ".join(f"COALESCE({self.header_value(self.FAILED_HEADERS[name])}, '') AS {name}" for name in fields)
        return f"SELECT {{order}} AS k, Id AS id, Headers AS headers{', BodyString AS body' if body else ''}, {values} FROM {{table}}"

    def _group_source(self, fields: tuple[str, ...], body: bool) -> str:
        """The rows a grouping reads: only the headers it groups, filters and dates by (an engine may
        read them in fewer passes)."""
        return self._failed_source(fields, body)

    def _failed_where(self, filters: tuple[str, ...], extra: tuple[str, ...] = ()) -> str:
        conditions = list(extra) + [self.FAILED_FILTERS[name] for name in filters]
        return (" WHERE " + " AND ".join(conditions)) if conditions else ""

    # the orders a list of groups may be sorted in (the console's `sort`): the request names one, the
    # SQL is this table's, never the request's text
    GROUP_ORDERS = {
        "count": "count(*) DESC",
        "count_asc": "count(*)",
        "time": "max(f.time_of_failure) DESC",
        "time_asc": "min(f.time_of_failure)",
    }

    def failed_groups(
        self, table: TableName, profile: Profile, by: tuple[str, ...], filters: tuple[str, ...], sort: str = "count"
    ) -> Statement:
        """(the group's fields in `by`..., messages, first and last TimeOfFailure) of the error queue's
        messages that pass `filters`, in the order GROUP_ORDERS[sort] (the largest group first by default)."""
        if not self.supported:
            raise self._unsupported()
        order = self.GROUP_ORDERS[sort]
        keys = ", ".join(f"f.{name}" for name in by)
        fields = tuple(name for name in self.FAILED_HEADERS if name in by or name in filters or name == "time_of_failure")
        template = (
            f"SELECT {keys}, count(*) AS messages, min(f.time_of_failure) AS first, max(f.time_of_failure) AS last "
            f"FROM ({self._group_source(fields, 'body' in filters)}) AS f{self._failed_where(filters)} "
            f"GROUP BY {keys} ORDER BY {order}, {keys}"
        )
        return self.statement(f"failed_groups_{sort}", fill(template, {"order": self.order}), table=self.dialect.qualified(table, profile))

    def failed_count(self, table: TableName, profile: Profile, filters: tuple[str, ...]) -> Statement:
        """How many messages of the error queue pass `filters`, counted up to @Cap (a list's total:
        the count stops there, so a page of 200,000 messages costs no read of them all)."""
        if not self.supported:
            raise self._unsupported()
        self.header_value(self.FAILED_HEADERS["failed_queue"])  # only where the failed reads are (not SQL Server's yet)
        if filters:
            timed = {"since", "until"} & set(filters)
            fields = tuple(name for name in self.FAILED_HEADERS if name in filters or (timed and name == "time_of_failure"))
            source = f"({self._group_source(fields or ('failed_queue',), 'body' in filters)}) AS f{self._failed_where(filters)}"
        else:
            source = "{table}"
        template = f"SELECT count(*) FROM (SELECT 1 AS one FROM {source} LIMIT @Cap) AS c"
        return self.statement("failed_count", fill(template, {"order": self.order}), table=self.dialect.qualified(table, profile))

    def failed_page(self, table: TableName, profile: Profile, filters: tuple[str, ...], newest: bool = False) -> Statement:
        """Up to @Limit messages after the key @After that pass `filters`, in FIFO order (`newest`: the
        last to fail first, @After then the key the page starts below): a page by keyset (the next page
        starts after the last key shown), never by OFFSET."""
        if not self.supported:
            raise self._unsupported()
        source = self._failed_source(body="body" in filters)
        after, order = ("f.k < @After", "f.k DESC") if newest else ("f.k > @After", "f.k")
        template = f"{self.FAILED_ROW} FROM ({source}) AS f{self._failed_where(filters, (after,))} ORDER BY {order} LIMIT @Limit"
        name = "failed_page_newest" if newest else "failed_page"
        return self.statement(name, fill(template, {"order": self.order}), table=self.dialect.qualified(table, profile))

    def failed_message(self, table: TableName, profile: Profile) -> Statement:
        """One message of the error queue by its key (@Key): (key, Id, Headers, Body)."""
        template = fill(self.FAILED_MESSAGE, {"order": self.order})
        return self.statement("failed_message", template, table=self.dialect.qualified(table, profile))

    # -- the console's action log (a table the migrations create: `action_log:` in the topology) ---
    ACTION_LOG_INSERT = ""  # At is the server's clock (UTC)
    ACTION_LOG_READ = "SELECT At, Who, Action, Target, Messages FROM {table} ORDER BY Id DESC LIMIT @Limit"
    # the actions whose Target names a message (its row Id, as Actions.start records them), oldest first
    ACTION_LOG_ABOUT = (
        "SELECT At, Who, Action, Target, Messages FROM {table} WHERE Target LIKE @Pattern ESCAPE '!' ORDER BY Id LIMIT @Limit"
    )

    def action_log(self, table: TableName, profile: Profile, which: str) -> Statement:
        """The action log's statement `which` (insert, read)."""
        template = {"insert": self.ACTION_LOG_INSERT, "read": self.ACTION_LOG_READ, "about": self.ACTION_LOG_ABOUT}[which]
        if not template:
            raise self._unsupported()
        return self.statement(f"action_log_{which}", template, table=self.dialect.qualified(table, profile))

    # -- a queue's archive (`archive:` on a plain queue): moves between it and the queue, each
    # statement run once per message (execute_many), a batch of them one transaction. A move takes
    # a message by its table's key ({order}: the queue has no index on Id on SQLite and SQL Server,
    # so a move by Id would read the whole queue for each message); ARCHIVE_KEYS maps the Ids an
    # operator chose to the queue's keys in one read ------------------------------------------------
    ARCHIVE_KEYS = ""  # {order} and Id of each message of {queue} whose Id is in @Ids (a list_parameter)
    ARCHIVE_MOVES: tuple[str, ...] = ()  # @Key ({order}) of {queue} -> {archive}, with @Why and @By
    RESTORE_MOVES: tuple[str, ...] = ()  # @Key of {archive} -> {queue}
    ARCHIVE_PURGE = ""  # up to @BatchSize rows archived more than @Seconds ago
    ARCHIVE_PAGE = (
        "SELECT {order}, Id, ArchivedAt, ArchivedWhy, ArchivedBy FROM {archive} WHERE {order} > @After ORDER BY {order} LIMIT @Limit"
    )
    ARCHIVE_COUNT = "SELECT count(*) FROM {archive}"
    ARCHIVE_ID = "SELECT Id FROM {archive} WHERE {order} = @Key"  # an archived message's row Id (restore's action log)

    def archive(self, which: str, queue: TableName, archive: TableName, profile: Profile) -> list[Statement]:
        """The statements of `which` (archive, restore: run in order for each message; keys, purge,
        page, count: one) between the queue and its archive table."""
        templates = {
            "keys": (self.ARCHIVE_KEYS,) if self.ARCHIVE_KEYS else (),
            "archive": self.ARCHIVE_MOVES,
            "restore": self.RESTORE_MOVES,
            "purge": (self.ARCHIVE_PURGE,) if self.ARCHIVE_PURGE else (),
            "page": (self.ARCHIVE_PAGE,),
            "count": (self.ARCHIVE_COUNT,),
            "id": (self.ARCHIVE_ID,),
        }[which]
        if not templates or not self.supported:
            raise self._unsupported()
        names = {"queue": self.dialect.qualified(queue, profile), "archive": self.dialect.qualified(archive, profile)}
        return [
            self.statement(f"archive_{which}_{i}", fill(template, {"order": self.order}), **names) for i, template in enumerate(templates)
        ]

    WRITE_PROBE = "DELETE FROM {table} WHERE 1 = 0"

    def write_probe(self, table: TableName, profile: Profile) -> Statement:
        """Deletes no row, and is refused where the login may not delete from the table (a `grants
        --monitor` login): what tells the console to run read-only."""
        return self.statement("write_probe", self.WRITE_PROBE, table=self.dialect.qualified(table, profile))
