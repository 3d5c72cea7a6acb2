"""SQL Server's runtime statements (upstream-conformance §3), token for token the transport's text
of each release (the `Runtime` part of `MSSQL`). `Dialect.runtime_statements` builds the statement
table; this part names the templates, chooses each release's, and says what differs by release."""

from __future__ import annotations

import re
from typing import Any

from ...errors import UsageError
from ...schema import TableName
from ...statements import MESSAGE_WITH_CORRELATION, fill
from ...versions import FEATURE_SINCE, DueForm, IndexCheck, PeekForm, Profile, RecoverableCheck, first_release
from ..base import Dialect

_REGULAR_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_@#$]*$")  # needs no brackets


class Runtime:
    """Mixin of `MSSQL`: the runtime templates, the statement tables naming them, and the hooks of
    `Dialect.runtime_statements` that choose a release's template, result columns and description."""

    # One constant per statement, as the transport's SqlConstants, token for token its text of
    # the release. Placeholders filled by Statement: {table} the queue, {delayed} the endpoint's
    # delayed table, {subscriptions} the subscription table (bracket-quoted, three-part where
    # the catalog is known), {table_literal} the queue's name inside a '...' literal, {sys} the
    # sys schema the Recoverable count reads. Where releases differ, a template has a slot
    # ({not_expired}, {hint}, ...) that a method of the statement table fills with a fragment chosen by a
    # Profile field (versions.BOUNDARIES), before the Statement is made. @Name are parameters;
    # @NOCOUNT, @DueAfter and @batch are T-SQL variables.

    # The NOCOUNT save/restore around send, receive, store and the early move is the
    # transport's: the caller's setting is left as it found it.

    # Send, up to 6.x: fills CorrelationId/ReplyToAddress for v1/v2 receivers; {recoverable} is
    # @Recoverable up to 4.0.0, the literal 1 from 4.1.0.
    SEND_WITH_CORRELATION = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {table} (
    Id,
    CorrelationId,
    ReplyToAddress,
    Recoverable,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    @CorrelationId,
    @ReplyToAddress,
    {recoverable},
    CASE WHEN @TimeToBeReceivedMs IS NOT NULL
        THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,
    @Headers,
    @Body);

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Send, 7.0+: correlation and reply-to travel in the headers only.
    SEND = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {table} (
    Id,
    Recoverable,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    1,
    CASE WHEN @TimeToBeReceivedMs IS NOT NULL
        THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,
    @Headers,
    @Body);

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Send, 7.0+, on a queue whose Recoverable column was dropped (the transport chooses it per
    # queue from CHECK_RECOVERABLE_COLUMN; `statements` prints it as send_norec).
    SEND_WITHOUT_RECOVERABLE = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {table} (
    Id,
    Expires,
    Headers,
    Body)
VALUES (
    @Id,
    CASE WHEN @TimeToBeReceivedMs IS NOT NULL
        THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,
    @Headers,
    @Body);

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Receive. 3.x skip expired rows in the query ({not_expired}); later releases return an
    # expired flag instead and the receiver drops flagged rows. {output} lists the columns
    # before Headers and Body: Id, then CorrelationId/ReplyToAddress (up to 6.x), Recoverable
    # (up to 4.0.0), the expired flag (4.0.0+).
    RECEIVE = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';
SET NOCOUNT ON;

WITH message AS (
    SELECT TOP(1) *
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK){not_expired}
    ORDER BY {rowversion})
DELETE FROM message
OUTPUT
{output}
    deleted.Headers,
    deleted.Body;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""
    NOT_EXPIRED = "\n    WHERE Expires IS NULL OR Expires > GETUTCDATE()"
    EXPIRED_FLAG = """\
    CASE WHEN deleted.Expires IS NULL
        THEN 0
        ELSE CASE WHEN deleted.Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END,"""
    # Receive's output columns before Headers and Body, in order: (result name(s), text).
    RECEIVE_OUTPUT = (
        (("Id",), "    deleted.Id,"),
        (("CorrelationId", "ReplyToAddress"), "    deleted.CorrelationId,\n    deleted.ReplyToAddress,"),
        (("Recoverable",), "    deleted.Recoverable,"),
        (("Expired",), EXPIRED_FLAG),
    )

    # Beyond the transport: up to @BatchSize messages in one round trip, the same locking
    # hints as RECEIVE (no message is handed to two receivers; rows locked by others are
    # skipped), the output of 4.1+'s receive per version plus RowVersion last (expired rows
    # are flagged in every version). DELETE ... OUTPUT returns rows in no defined order, so
    # they pass through a table variable and come back ordered by RowVersion, oldest first,
    # as RECEIVE hands them out one by one. Headers is held as nvarchar(max), which takes a
    # varchar(max) column without loss. Keep @BatchSize well below SQL Server's lock
    # escalation threshold (about 5,000 row locks).
    RECEIVE_BATCH_WITH_CORRELATION = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';
SET NOCOUNT ON;

DECLARE @batch TABLE (
    Id uniqueidentifier NOT NULL,
    CorrelationId varchar(255),
    ReplyToAddress varchar(255),
    Expired int NOT NULL,
    Headers nvarchar(max) NOT NULL,
    Body varbinary(max),
    RowVersion bigint NOT NULL);

WITH message AS (
    SELECT TOP(@BatchSize) *
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
    ORDER BY RowVersion)
DELETE FROM message
OUTPUT
    deleted.Id,
    deleted.CorrelationId,
    deleted.ReplyToAddress,
    CASE WHEN deleted.Expires IS NULL
        THEN 0
        ELSE CASE WHEN deleted.Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END,
    deleted.Headers,
    deleted.Body,
    deleted.RowVersion
INTO @batch (Id, CorrelationId, ReplyToAddress, Expired, Headers, Body, RowVersion);

SELECT Id, CorrelationId, ReplyToAddress, Expired, Headers, Body, RowVersion
FROM @batch
ORDER BY RowVersion;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    RECEIVE_BATCH = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';
SET NOCOUNT ON;

DECLARE @batch TABLE (
    Id uniqueidentifier NOT NULL,
    Expired int NOT NULL,
    Headers nvarchar(max) NOT NULL,
    Body varbinary(max),
    RowVersion bigint NOT NULL);

WITH message AS (
    SELECT TOP(@BatchSize) *
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
    ORDER BY RowVersion)
DELETE FROM message
OUTPUT
    deleted.Id,
    CASE WHEN deleted.Expires IS NULL
        THEN 0
        ELSE CASE WHEN deleted.Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END,
    deleted.Headers,
    deleted.Body,
    deleted.RowVersion
INTO @batch (Id, Expired, Headers, Body, RowVersion);

SELECT Id, Expired, Headers, Body, RowVersion
FROM @batch
ORDER BY RowVersion;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""

    # Beyond the transport, for the pump's batches (docs/runtime.md): up to @BatchSize messages
    # locked, not taken, with RECEIVE's hints (UPDLOCK holds them to the end of the transaction,
    # READPAST passes over rows a competing batch holds), oldest first, expired ones flagged in
    # every version. The handled messages are deleted by their RowVersion before the one commit, in
    # one statement (@Orders: a JSON array, OPENJSON: SQL Server 2016+); one
    # whose handler failed is left in place. Each message's handler runs after a savepoint (SQL
    # Server has no RELEASE: a savepoint lasts until the commit; a newer one of the same name
    # hides the older, and ROLLBACK TRANSACTION goes back to the newest). An error that dooms
    # the transaction (XACT_ABORT ON) cannot be undone to a savepoint: the whole batch rolls back.
    LOCK_BATCH = """\
SELECT TOP(@BatchSize)
    Id,
    CASE WHEN Expires IS NULL
        THEN 0
        ELSE CASE WHEN Expires > GETUTCDATE()
            THEN 0
            ELSE 1
        END
    END AS Expired,
    Headers,
    Body,
    RowVersion
FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
ORDER BY RowVersion"""
    DELETE_LOCKED = """\
DELETE FROM {table}
WHERE RowVersion IN (SELECT CAST(value AS bigint) FROM OPENJSON(@Orders))"""
    SAVEPOINT = "SAVE TRANSACTION sqltransport_message"
    ROLLBACK_TO_SAVEPOINT = "ROLLBACK TRANSACTION sqltransport_message"

    # Peek, a plain count (3.1.0-3.1.5 skipping expired rows, 4.0.0-4.1.1), ending in `;` as upstream's.
    PEEK_COUNT = """\
SELECT count(*) Id FROM {table} WITH (READPAST){not_expired};"""

    # Peek, at most {peek_batch_size} rows (3.1.6 skipping expired rows, 4.1.2-6.0.1); the
    # number is a validated integer written into the text, as the transport formats it.
    PEEK_TOP = """\
SELECT count(*) Id
FROM (
    SELECT TOP {peek_batch_size} *
    FROM {table} WITH (READPAST){not_expired}
) as count_table;"""

    # Peek, 6.1+: the RowVersion range, an estimate that reads two index ends; {hint} is
    # nolock until 6.3.6 and 7.0.4, then READPAST, READCOMMITTEDLOCK.
    PEEK = """\
SELECT isnull(cast(max([RowVersion]) - min([RowVersion]) + 1 AS int), 0) Id FROM {table} WITH ({hint})"""

    # {hint}: NOLOCK in 3.1.x, READPAST from 4.0.0.
    PURGE_EXPIRED = """\
DELETE FROM {table}
WHERE RowVersion
    IN (SELECT TOP (@BatchSize) RowVersion
        FROM {table} WITH ({hint})
        WHERE Expires < GETUTCDATE())"""

    PURGE_ALL = "DELETE FROM {table}"

    # Start-up checks. They read the connection's own database's sys views (so they see a queue
    # of another catalog only when the connection is in it), as the transport does, but name the
    # queue as an N'...' literal where the transport writes a plain '...' one: a varchar literal
    # turns a name outside the database's code page into '?', OBJECT_ID finds nothing and the check
    # warns falsely (docs/fidelity.md, "Where the project differs from upstream").
    CHECK_EXPIRES_INDEX = """\
SELECT COUNT(*)
FROM sys.indexes
WHERE name = 'Index_Expires'
    AND object_id = OBJECT_ID(N'{table_literal}')"""

    # 4.3.2, 5.0.3, 6.0.1-6.3.8: a nonclustered (type 2) Index_RowVersion.
    CHECK_ROWVERSION_INDEX = """\
SELECT COUNT(*)
FROM sys.indexes
WHERE name = 'Index_RowVersion'
    AND object_id = OBJECT_ID(N'{table_literal}')
    AND type = 2"""

    # 7.0+: indexes of any name whose first key column is {column} (Expires; RowVersion with
    # {nonclustered}, type 2).
    CHECK_INDEX_BY_KEY = """\
SELECT COUNT(*)
FROM sys.indexes i
INNER JOIN sys.index_columns AS ic ON ic.index_id = i.index_id AND ic.object_id = i.object_id AND ic.key_ordinal = 1
INNER JOIN sys.columns AS c ON c.column_id = ic.column_id AND c.object_id = ic.object_id
WHERE i.object_id = OBJECT_ID(N'{table_literal}')
AND c.name = '{column}'{nonclustered}"""
    NONCLUSTERED_ONLY = "\nAND i.type = 2"

    # The type's name; upstream reads the first row (sysname shares nvarchar's system_type_id).
    CHECK_HEADERS_TYPE = """\
SELECT t.name
FROM sys.columns c
INNER JOIN sys.types t ON c.system_type_id = t.system_type_id
WHERE c.object_id = OBJECT_ID(N'{table_literal}')
    AND c.name = 'Headers'"""

    # 3.0.x (Sql.cs): every column in brackets, and a send that ends in an empty statement
    # (`;;`). The purge of expired messages takes the oldest expired Ids with the receive's
    # locking hints; upstream formats the batch size into the text, the project binds
    # @BatchSize (docs/fidelity.md). Receive, peek and the index check as 3.0.x wrote them.
    SEND_3_0 = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;

INSERT INTO {table} ([Id],[CorrelationId],[ReplyToAddress],[Recoverable],[Expires],[Headers],[Body])
VALUES (@Id,@CorrelationId,@ReplyToAddress,@Recoverable,CASE WHEN @TimeToBeReceivedMs IS NOT NULL THEN DATEADD(ms, @TimeToBeReceivedMs, GETUTCDATE()) END,@Headers,@Body);;

IF (@NOCOUNT = 'ON') SET NOCOUNT ON;
IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""
    NOT_EXPIRED_3_0 = "\n    WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE()"
    PEEK_3_0 = """\
SELECT count(*) Id FROM {table} WITH (READPAST) WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE();"""
    PURGE_EXPIRED_3_0 = """\
DELETE FROM {table}
WHERE [Id] IN (SELECT TOP (@BatchSize) [Id]
    FROM {table} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE [Expires] < GETUTCDATE()
    ORDER BY [RowVersion])"""
    CHECK_EXPIRES_INDEX_3_0 = """\
SELECT COUNT(*) FROM [sys].[indexes] WHERE [name] = 'Index_Expires' AND [object_id] = OBJECT_ID(N'{table_literal}')"""

    # 7.0.0-7.0.6, 8.0.0-8.1.4: an empty result whose column names tell.
    CHECK_RECOVERABLE_COLUMNS = "SELECT TOP (0) * FROM {table} WITH (NOLOCK);"
    # 7.0.7+, 8.1.5+: a count in the catalog's sys.columns ({sys}: the catalog raw in 7.0.7 and
    # 8.1.5, in brackets later). Upstream never doubles an inner ]; the project quotes by the
    # engine's rules, the same text for every name that upstream's text would not break.
    CHECK_RECOVERABLE_COLUMN = """\
SELECT COUNT(*)
FROM {sys}.columns c
WHERE c.object_id = OBJECT_ID(N'{table_literal}')
    AND c.name = 'Recoverable'"""

    # Store of a delayed message: {declare_due} and {due} by release (DUE_FORMS).
    STORE_DELAYED = """\
DECLARE @NOCOUNT VARCHAR(3) = 'OFF';
IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON'
SET NOCOUNT ON;
{declare_due}
INSERT INTO {delayed} (
    Headers,
    Body,
    Due)
VALUES (
    @Headers,
    @Body,
    {due});

IF(@NOCOUNT = 'ON') SET NOCOUNT ON;
IF(@NOCOUNT = 'OFF') SET NOCOUNT OFF;"""
    DUE_AFTER_PARTS = """
DECLARE @DueAfter DATETIME = GETUTCDATE();
SET @DueAfter = DATEADD(ms, @DueAfterMilliseconds, @DueAfter);
SET @DueAfter = DATEADD(s, @DueAfterSeconds, @DueAfter);
SET @DueAfter = DATEADD(n, @DueAfterMinutes, @DueAfter);
SET @DueAfter = DATEADD(hh, @DueAfterHours, @DueAfter);
SET @DueAfter = DATEADD(d, @DueAfterDays, @DueAfter);
"""
    # DueForm -> ({declare_due}, {due})
    DUE_FORMS = {
        DueForm.ABSOLUTE: ("", "@Due"),
        DueForm.AFTER_MS: ("", "DATEADD(ms, @DueAfterMs, GETUTCDATE())"),
        DueForm.PARTS: (DUE_AFTER_PARTS, "@DueAfter"),
    }

    # Move of due messages into the owning endpoint's input queue: the core of every release,
    # INTO the queue with {into_columns} (a column list from 6.3.6 and 7.0.4).
    MOVE_DUE = """\
WITH message AS (
    SELECT TOP(@BatchSize) *
    FROM {delayed} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE Due < GETUTCDATE())
DELETE FROM message
OUTPUT
    NEWID(),
    NULL,
    NULL,
    1,
    NULL,
    deleted.Headers,
    deleted.Body
INTO {table}{into_columns};"""

    # 3.1.0-6.2.0: one silent batch, NOCOUNT-wrapped.
    MOVE_DUE_DELAYED_SILENT = (
        "DECLARE @NOCOUNT VARCHAR(3) = 'OFF';\n"
        "IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';\n"
        "SET NOCOUNT ON;\n\n" + MOVE_DUE + "\n\n"
        "IF (@NOCOUNT = 'ON') SET NOCOUNT ON;\n"
        "IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"
    )

    # Beyond the transport: the move of 3.1.0-6.2.0 that the runtime runs, the release's move
    # (MOVE_DUE_DELAYED_SILENT, what `statements` prints as move_due_delayed) with how many rows it
    # moved returned, read from @@ROWCOUNT before the NOCOUNT restore resets it. Under NOCOUNT a
    # driver's row count is -1 (pyodbc's, ADO.NET's): the transport ignores the count and moves one
    # batch per interval, while DueMover moves again at once after a full batch.
    MOVE_DUE_DELAYED_COUNTED = (
        "DECLARE @NOCOUNT VARCHAR(3) = 'OFF';\n"
        "IF ( (512 & @@OPTIONS) = 512 ) SET @NOCOUNT = 'ON';\n"
        "SET NOCOUNT ON;\n\n" + MOVE_DUE + "\n\n"
        "SELECT @@ROWCOUNT AS Moved;\n\n"
        "IF (@NOCOUNT = 'ON') SET NOCOUNT ON;\n"
        "IF (@NOCOUNT = 'OFF') SET NOCOUNT OFF;"
    )

    # 6.3.1+: then reports when the next one falls due, {next_hint} (READPAST on the probe)
    # from 6.3.4 and 7.0.0.
    MOVE_DUE_DELAYED = (
        ";"
        + MOVE_DUE
        + """

SELECT TOP 1 GETUTCDATE() as UtcNow, Due as NextDue
FROM {delayed}{next_hint}
ORDER BY Due"""
    )
    MOVE_INTO_COLUMNS = " (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)"
    READPAST = " WITH (READPAST)"

    # Beyond the transport (whose move would fail there): the same move into a queue whose
    # Recoverable column was dropped, in the latest form.
    MOVE_DUE_DELAYED_WITHOUT_RECOVERABLE = """\
;WITH message AS (
    SELECT TOP(@BatchSize) *
    FROM {delayed} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE Due < GETUTCDATE())
DELETE FROM message
OUTPUT
    NEWID(),
    NULL,
    NULL,
    NULL,
    deleted.Headers,
    deleted.Body
INTO {table} (Id, CorrelationId, ReplyToAddress, Expires, Headers, Body);

SELECT TOP 1 GETUTCDATE() as UtcNow, Due as NextDue
FROM {delayed} WITH (READPAST)
ORDER BY Due"""

    # Subscriptions (5.0+). {topics} becomes @Topic_0, @Topic_1, ... in the template.
    SUBSCRIBE = """\
MERGE {subscriptions} WITH (HOLDLOCK, TABLOCK) AS target
USING(SELECT @Endpoint AS Endpoint, @QueueAddress AS QueueAddress, @Topic AS Topic) AS source
ON target.Endpoint = source.Endpoint
AND target.Topic = source.Topic
WHEN MATCHED AND target.QueueAddress <> source.QueueAddress THEN
UPDATE SET QueueAddress = @QueueAddress
WHEN NOT MATCHED THEN
INSERT
(
    QueueAddress,
    Topic,
    Endpoint
)
VALUES
(
    @QueueAddress,
    @Topic,
    @Endpoint
);"""

    UNSUBSCRIBE = """\
DELETE FROM {subscriptions}
WHERE
    Endpoint = @Endpoint and
    Topic = @Topic"""

    FIND_SUBSCRIBERS = """\
SELECT DISTINCT QueueAddress
FROM {subscriptions}
WHERE Topic IN ({topics})"""

    # -- the statement tables: name -> (a template, or the method choosing the release's; what it does)
    QUEUE_STATEMENTS = {  # the base's rows, with the ones this engine words or builds its own way
        **Dialect.QUEUE_STATEMENTS,
        "send": ("_send", "place a message on the queue"),
        "receive": ("_receive", "take the oldest unlocked message off the queue"),
        "receive_batch": ("_receive_batch", "take up to @BatchSize oldest unlocked messages, oldest first, flagging expired ones"),
        "lock_batch": (
            "LOCK_BATCH",
            "lock up to @BatchSize oldest unlocked messages for this transaction, oldest first, flagging expired ones",
        ),
        "peek": ("_peek", "estimate how many messages wait in the queue"),
        "purge_expired": ("_purge_expired", "delete up to @BatchSize expired messages"),
        "check_expires_index": ("_check_expires_index", "count the queue's Index_Expires (0: missing)"),
        "check_headers_type": ("_check_headers_type", "name the type of the queue's Headers column"),
        "check_rowversion_index": (
            "_check_rowversion_index",
            "count the queue's nonclustered RowVersion index (0: still clustered, the transport warns)",
        ),
        "send_norec": ("_send_norec", "place a message on a queue whose Recoverable column was dropped"),
        "check_recoverable_column": (
            "_check_recoverable_column",
            "tell whether the queue still has its Recoverable column (chooses send or send_norec)",
        ),
    }
    DELAYED_STATEMENTS = {
        "store_delayed": ("_store_delayed", "store a message in the delayed table, due at the given time"),
        "move_due_delayed": ("_move_due", "move up to @BatchSize due messages into the input queue"),
        "move_due_delayed_counted": (
            "_move_due_counted",
            "move_due_delayed returning how many it moved (Moved), as the runtime runs it where the release's move is silent",
        ),
    }
    SUBSCRIPTION_STATEMENTS = {
        **Dialect.SUBSCRIPTION_STATEMENTS,
        "subscribe": ("SUBSCRIBE", "subscribe an endpoint (at a queue address) to a topic"),
        "find_subscribers": ("FIND_SUBSCRIBERS", "queue addresses subscribed to any of the topics"),
    }
    TOPIC_PARAMETER = "Topic_{i}"

    # -- how the parameters are bound: upstream's ADO.NET types and sizes as pyodbc's input sizes
    # (SQL type, column size, digits; None: pyodbc's default). Size 0 is (max), as upstream's -1:
    # Body is DbType.Binary / SqlDbType.VarBinary, size -1 from 4.0 (3.1: the value's size), so a
    # None body binds as varbinary, not the varchar pyodbc falls back to (SQL Server refuses that
    # for varbinary(max)); Headers nvarchar(max) (9.1: DbType.String, -1; before, NVarChar by the
    # value's size). tests/fixtures/mssql_upstream_binds.json holds upstream's facts per tag.
    SQL_GUID, SQL_VARBINARY, SQL_WVARCHAR, SQL_VARCHAR, SQL_INTEGER, SQL_BIT, SQL_TYPE_TIMESTAMP = -11, -3, -9, 12, 4, -7, 93
    PARAMETER_TYPES: dict[str, tuple[int, int | None, int | None]] = {
        "Id": (SQL_GUID, None, None),
        "CorrelationId": (SQL_VARCHAR, None, None),
        "ReplyToAddress": (SQL_VARCHAR, None, None),
        "Recoverable": (SQL_BIT, None, None),
        "TimeToBeReceivedMs": (SQL_INTEGER, None, None),
        "Headers": (SQL_WVARCHAR, 0, 0),
        "Body": (SQL_VARBINARY, 0, 0),
        "BatchSize": (SQL_INTEGER, None, None),
        "Due": (SQL_TYPE_TIMESTAMP, None, None),
        "DueAfterDays": (SQL_INTEGER, None, None),
        "DueAfterHours": (SQL_INTEGER, None, None),
        "DueAfterMinutes": (SQL_INTEGER, None, None),
        "DueAfterSeconds": (SQL_INTEGER, None, None),
        "DueAfterMilliseconds": (SQL_INTEGER, None, None),
    }

    def runtime_binds(self, params: tuple[str, ...], profile: Profile) -> tuple[tuple[str, Any], ...]:
        return tuple((name, self.PARAMETER_TYPES[name]) for name in params if name in self.PARAMETER_TYPES)

    # The session's isolation level for the runtime, as upstream begins its receive transaction
    # (BeginTransaction with IsolationLevel.ReadCommitted, its options' default): READPAST is refused
    # under SNAPSHOT and SERIALIZABLE (error 650), so a session left at either could not receive.
    RUNTIME_ISOLATION = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"

    def runtime_cursor(self, dbapi_connection: Any) -> Any:
        """The runtime's cursor on a pyodbc connection, made once per connection: fast_executemany
        (send_many's rows in one round trip, not pyodbc's loop of one per row) and the session at
        READ COMMITTED (RUNTIME_ISOLATION)."""
        cursor = dbapi_connection.cursor()
        cursor.fast_executemany = True
        cursor.execute(self.RUNTIME_ISOLATION)
        return cursor

    # -- the hooks of Dialect.runtime_statements ----------------------------------------------
    def runtime_options(
        self,
        profile: Profile,
        *,
        delayed: TableName | None,
        subscriptions: TableName | None,
        topics: int,
        recoverable_column: bool = True,
        peek_batch_size: int = 0,
    ) -> dict[str, Any]:
        """Every statement of `profile`'s transport version includes each variant the transport can
        choose (send_norec, 7.0+). `delayed` (3.1+) adds store/move of delayed messages (moved into
        the queue, the owning endpoint's input queue); `subscriptions` (5.0+) adds subscribe,
        unsubscribe and find with `topics` parameters @Topic_0..; `recoverable_column=False` (7.0+)
        makes `send` the send into a queue whose Recoverable column was dropped; `peek_batch_size`
        is the N of the TOP N peek (3.1.6, 4.1.2 - 6.0.1)."""
        options = super().runtime_options(profile, delayed=delayed, subscriptions=subscriptions, topics=topics)
        if isinstance(peek_batch_size, bool) or not isinstance(peek_batch_size, int) or peek_batch_size < 0:
            raise UsageError(f"peek_batch_size must be a positive integer, not {peek_batch_size!r}")
        if profile.peek is PeekForm.TOP and peek_batch_size <= 0:
            raise UsageError(f"transport {profile.version} peeks with SELECT TOP n: give peek_batch_size, a positive integer")
        if not recoverable_column and profile.send_correlation:
            raise UsageError(
                f"transport {profile.version} always writes the Recoverable column; "
                f"a queue without it needs transport {first_release('send_correlation')} or later"
            )
        if delayed is not None and not profile.delayed_delivery:
            raise UsageError(f"transport {profile.version} has no delayed delivery table (since {FEATURE_SINCE['delayed_delivery']})")
        if subscriptions is not None and not profile.subscriptions:
            raise UsageError(f"transport {profile.version} has no subscription table (since {FEATURE_SINCE['subscriptions']})")
        return {**options, "recoverable_column": recoverable_column, "peek_batch_size": peek_batch_size}

    def runtime_identifiers(self, profile: Profile, queue: TableName) -> dict[str, str]:
        """{table}, and for the start-up checks the queue's name inside a '...' literal
        ({table_literal}) and the sys schema the Recoverable count reads ({sys})."""
        names = super().runtime_identifiers(profile, queue)
        return {**names, "table_literal": self.literal_text(names["table"]), "sys": self._recoverable_sys(profile, queue)}

    def runtime_doc(self, name: str, doc: str, profile: Profile) -> str:
        """The description, with what the release does differently (expired messages, the index
        check, the move's report of the next due)."""
        if name == "receive":
            return doc + (", skipping expired ones" if profile.filters_expired else ", flagging it if expired")
        if name == "check_expires_index" and profile.expires_check is not IndexCheck.BY_NAME:
            return "count the queue's indexes keyed on Expires (0: missing)"
        if name == "move_due_delayed" and profile.move_due_returns_next:
            return doc + "; then return when the next falls due"
        return super().runtime_doc(name, doc, profile)

    def runtime_columns(self, name: str, profile: Profile) -> tuple[str, ...]:
        """Receive's columns as the release outputs them; the batch receive's with correlation up to 6.x."""
        if name == "receive":
            return tuple(column for names, _ in self._receive_output(profile) for column in names) + ("Headers", "Body")
        if name == "receive_batch" and profile.receive_correlation:
            return MESSAGE_WITH_CORRELATION + ("Order",)
        if name == "move_due_delayed_counted":
            return ("Moved",)
        return super().runtime_columns(name, profile)

    # -- each release's template (the methods the statement tables name; None: not in the release)
    def _send(self, profile: Profile, options: dict[str, Any]) -> str:
        if profile.send_correlation:
            if profile.bracketed_runtime:
                return self.SEND_3_0
            return fill(self.SEND_WITH_CORRELATION, {"recoverable": "@Recoverable" if profile.send_recoverable_parameter else "1"})
        return self.SEND if options["recoverable_column"] else self.SEND_WITHOUT_RECOVERABLE

    def _send_norec(self, profile: Profile, options: dict[str, Any]) -> str | None:
        return None if profile.send_correlation else self.SEND_WITHOUT_RECOVERABLE

    def _receive_output(self, profile: Profile) -> list[tuple[tuple[str, ...], str]]:
        """Receive's output columns before Headers and Body in the release: (result names, text)."""
        wanted = {
            "Id": True,
            "CorrelationId": profile.receive_correlation,
            "Recoverable": profile.receive_recoverable,
            "Expired": not profile.filters_expired,
        }
        return [(names, text) for names, text in self.RECEIVE_OUTPUT if wanted[names[0]]]

    def _receive(self, profile: Profile, options: dict[str, Any]) -> str:
        not_expired = self.NOT_EXPIRED_3_0 if profile.bracketed_runtime else self.NOT_EXPIRED
        fragments = {
            "not_expired": not_expired if profile.filters_expired else "",
            "rowversion": "[RowVersion]" if profile.bracketed_runtime else "RowVersion",
            "output": "\n".join(text for _, text in self._receive_output(profile)),
        }
        return fill(self.RECEIVE, fragments)

    def _receive_batch(self, profile: Profile, options: dict[str, Any]) -> str:
        return self.RECEIVE_BATCH_WITH_CORRELATION if profile.receive_correlation else self.RECEIVE_BATCH

    def _peek(self, profile: Profile, options: dict[str, Any]) -> str:
        if profile.bracketed_runtime:
            return self.PEEK_3_0
        not_expired = self.NOT_EXPIRED if profile.filters_expired else ""
        if profile.peek is PeekForm.COUNT:
            return fill(self.PEEK_COUNT, {"not_expired": not_expired})
        if profile.peek is PeekForm.TOP:
            return fill(self.PEEK_TOP, {"not_expired": not_expired, "peek_batch_size": str(options["peek_batch_size"])})
        return fill(self.PEEK, {"hint": "READPAST, READCOMMITTEDLOCK" if profile.peek_readcommittedlock else "nolock"})

    def _purge_expired(self, profile: Profile, options: dict[str, Any]) -> str:
        if profile.bracketed_runtime:
            return self.PURGE_EXPIRED_3_0
        return fill(self.PURGE_EXPIRED, {"hint": "READPAST" if profile.purge_expired_readpast else "NOLOCK"})

    def _index_check(self, how: IndexCheck, column: str, profile: Profile) -> str:
        if profile.bracketed_runtime and column == "Expires":
            return self.CHECK_EXPIRES_INDEX_3_0
        if how is IndexCheck.BY_KEY:
            nonclustered = self.NONCLUSTERED_ONLY if column == "RowVersion" else ""
            return fill(self.CHECK_INDEX_BY_KEY, {"column": column, "nonclustered": nonclustered})
        return self.CHECK_ROWVERSION_INDEX if column == "RowVersion" else self.CHECK_EXPIRES_INDEX

    def _check_expires_index(self, profile: Profile, options: dict[str, Any]) -> str:
        return self._index_check(profile.expires_check, "Expires", profile)

    def _check_rowversion_index(self, profile: Profile, options: dict[str, Any]) -> str | None:
        if profile.rowversion_check is IndexCheck.NONE:
            return None
        return self._index_check(profile.rowversion_check, "RowVersion", profile)

    def _check_headers_type(self, profile: Profile, options: dict[str, Any]) -> str | None:
        """The check came with nvarchar Headers (2.2.6, 3.0.3), to warn of varchar."""
        return self.CHECK_HEADERS_TYPE if profile.headers_unicode else None

    def _check_recoverable_column(self, profile: Profile, options: dict[str, Any]) -> str | None:
        if profile.send_correlation:
            return None
        return self.CHECK_RECOVERABLE_COLUMNS if profile.recoverable_check is RecoverableCheck.COLUMNS else self.CHECK_RECOVERABLE_COLUMN

    def _recoverable_sys(self, profile: Profile, queue: TableName) -> str:
        """The sys schema of the queue's catalog as the release's Recoverable count writes it."""
        catalog = queue.catalog if profile.three_part_names else None
        if catalog is None:
            sys_ = "sys"
        elif profile.recoverable_check is RecoverableCheck.COUNT_RAW_CATALOG and _REGULAR_IDENTIFIER.match(catalog):
            sys_ = f"{catalog}.sys"  # raw, as 7.0.7 and 8.1.5 write it, where that is still one identifier
        else:
            sys_ = f"{self.quote(catalog)}.sys"
        return sys_

    def _store_delayed(self, profile: Profile, options: dict[str, Any]) -> str:
        declare_due, due = self.DUE_FORMS[profile.store_delayed]
        return fill(self.STORE_DELAYED, {"declare_due": declare_due, "due": due})

    def _move_due_counted(self, profile: Profile, options: dict[str, Any]) -> str | None:
        """3.1.0-6.2.0 only: their move returns nothing (later ones return the next due time, and
        a row count where the session's NOCOUNT is off)."""
        if profile.move_due_returns_next or not options["recoverable_column"]:
            return None
        into_columns = self.MOVE_INTO_COLUMNS if profile.move_due_column_list else ""
        return fill(self.MOVE_DUE_DELAYED_COUNTED, {"into_columns": into_columns})

    def _move_due(self, profile: Profile, options: dict[str, Any]) -> str:
        if not options["recoverable_column"]:
            return self.MOVE_DUE_DELAYED_WITHOUT_RECOVERABLE
        into_columns = self.MOVE_INTO_COLUMNS if profile.move_due_column_list else ""
        if not profile.move_due_returns_next:
            return fill(self.MOVE_DUE_DELAYED_SILENT, {"into_columns": into_columns})
        return fill(
            self.MOVE_DUE_DELAYED, {"into_columns": into_columns, "next_hint": self.READPAST if profile.move_due_next_readpast else ""}
        )
