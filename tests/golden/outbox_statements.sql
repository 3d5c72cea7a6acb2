-- sqltransport-schema runtime statements: postgresql, outbox

-- Sales_Api_OutboxData: store_outbox: store a handled message's outgoing operations, not dispatched yet
-- parameters: @MessageId, @Operations, @PersistenceVersion
INSERT INTO "public"."Sales_Api_OutboxData" ("MessageId", "Operations", "PersistenceVersion")
VALUES (@MessageId, @Operations, @PersistenceVersion)

-- Sales_Api_OutboxData: get_outbox: read a message's outbox row: whether it was dispatched, and its operations
-- parameters: @MessageId
SELECT "Dispatched", "Operations"
FROM "public"."Sales_Api_OutboxData"
WHERE "MessageId" = @MessageId

-- Sales_Api_OutboxData: set_outbox_dispatched: mark a message's operations dispatched at @DispatchedAt, emptying them to '[]'
-- parameters: @DispatchedAt, @MessageId
UPDATE "public"."Sales_Api_OutboxData"
SET "Dispatched" = true, "DispatchedAt" = @DispatchedAt, "Operations" = '[]'
WHERE "MessageId" = @MessageId

-- Sales_Api_OutboxData: cleanup_outbox: delete up to @BatchSize rows dispatched before @DispatchedBefore
-- parameters: @DispatchedBefore, @BatchSize
DELETE FROM "public"."Sales_Api_OutboxData"
WHERE ctid IN (
    SELECT ctid FROM "public"."Sales_Api_OutboxData"
    WHERE "Dispatched" = true AND "DispatchedAt" < @DispatchedBefore
    LIMIT @BatchSize
)
-- sqltransport-schema runtime statements: mssql, outbox

-- Sales_Api_OutboxData: store_outbox: store a handled message's outgoing operations, not dispatched yet
-- parameters: @MessageId, @Operations, @PersistenceVersion
INSERT INTO [dbo].[Sales_Api_OutboxData] (MessageId, Operations, PersistenceVersion)
VALUES (@MessageId, @Operations, @PersistenceVersion)
GO

-- Sales_Api_OutboxData: get_outbox: read a message's outbox row: whether it was dispatched, and its operations
-- parameters: @MessageId
SELECT Dispatched, Operations
FROM [dbo].[Sales_Api_OutboxData]
WHERE MessageId = @MessageId
GO

-- Sales_Api_OutboxData: set_outbox_dispatched: mark a message's operations dispatched at @DispatchedAt, emptying them to '[]'
-- parameters: @DispatchedAt, @MessageId
UPDATE [dbo].[Sales_Api_OutboxData]
SET Dispatched = 1, DispatchedAt = @DispatchedAt, Operations = '[]'
WHERE MessageId = @MessageId
GO

-- Sales_Api_OutboxData: cleanup_outbox: delete up to @BatchSize rows dispatched before @DispatchedBefore
-- parameters: @BatchSize, @DispatchedBefore
DELETE TOP (@BatchSize) FROM [dbo].[Sales_Api_OutboxData] WITH (ROWLOCK, READPAST)
WHERE Dispatched = 1 AND DispatchedAt < @DispatchedBefore
OPTION (MAXDOP 1)
GO
-- sqltransport-schema runtime statements: mysql, outbox

-- Sales_Api_OutboxData: store_outbox: store a handled message's outgoing operations, not dispatched yet
-- parameters: @MessageId, @Operations, @PersistenceVersion
INSERT INTO `Sales_Api_OutboxData` (MessageId, Operations, PersistenceVersion)
VALUES (@MessageId, @Operations, @PersistenceVersion)

-- Sales_Api_OutboxData: get_outbox: read a message's outbox row: whether it was dispatched, and its operations
-- parameters: @MessageId
SELECT Dispatched, Operations
FROM `Sales_Api_OutboxData`
WHERE MessageId = @MessageId

-- Sales_Api_OutboxData: set_outbox_dispatched: mark a message's operations dispatched at @DispatchedAt, emptying them to '[]'
-- parameters: @DispatchedAt, @MessageId
UPDATE `Sales_Api_OutboxData`
SET Dispatched = 1, DispatchedAt = @DispatchedAt, Operations = '[]'
WHERE MessageId = @MessageId

-- Sales_Api_OutboxData: cleanup_outbox: delete up to @BatchSize rows dispatched before @DispatchedBefore
-- parameters: @DispatchedBefore, @BatchSize
DELETE FROM `Sales_Api_OutboxData`
WHERE Dispatched = true AND DispatchedAt < @DispatchedBefore
LIMIT @BatchSize
-- sqltransport-schema runtime statements: sqlite, outbox

-- Sales_Api_OutboxData: store_outbox: store a handled message's outgoing operations, not dispatched yet
-- parameters: @MessageId, @Operations, @PersistenceVersion
INSERT INTO "Sales_Api_OutboxData" (MessageId, Operations, PersistenceVersion)
VALUES (@MessageId, @Operations, @PersistenceVersion)

-- Sales_Api_OutboxData: get_outbox: read a message's outbox row: whether it was dispatched, and its operations
-- parameters: @MessageId
SELECT Dispatched, Operations
FROM "Sales_Api_OutboxData"
WHERE MessageId = @MessageId

-- Sales_Api_OutboxData: set_outbox_dispatched: mark a message's operations dispatched at @DispatchedAt, emptying them to '[]'
-- parameters: @DispatchedAt, @MessageId
UPDATE "Sales_Api_OutboxData"
SET Dispatched = 1, DispatchedAt = @DispatchedAt, Operations = '[]'
WHERE MessageId = @MessageId

-- Sales_Api_OutboxData: cleanup_outbox: delete up to @BatchSize rows dispatched before @DispatchedBefore
-- parameters: @DispatchedBefore, @BatchSize
DELETE FROM "Sales_Api_OutboxData"
WHERE MessageId IN (
    SELECT MessageId FROM "Sales_Api_OutboxData"
    WHERE Dispatched = 1 AND DispatchedAt < @DispatchedBefore
    LIMIT @BatchSize
)
-- sqltransport-schema runtime statements: oracle, outbox

-- Sales_Api_OutboxData: store_outbox: store a handled message's outgoing operations, not dispatched yet
-- parameters: @MessageId, @Operations, @PersistenceVersion
INSERT INTO "SALES_API_OD" (MessageId, Operations, PersistenceVersion)
VALUES (@MessageId, @Operations, @PersistenceVersion)

-- Sales_Api_OutboxData: get_outbox: read a message's outbox row: whether it was dispatched, and its operations
-- parameters: @MessageId
SELECT Dispatched, Operations
FROM "SALES_API_OD"
WHERE MessageId = @MessageId

-- Sales_Api_OutboxData: set_outbox_dispatched: mark a message's operations dispatched at @DispatchedAt, emptying them to '[]'
-- parameters: @DispatchedAt, @MessageId
UPDATE "SALES_API_OD"
SET Dispatched = 1, DispatchedAt = @DispatchedAt, Operations = '[]'
WHERE MessageId = @MessageId

-- Sales_Api_OutboxData: cleanup_outbox: delete up to @BatchSize rows dispatched before @DispatchedBefore
-- parameters: @DispatchedBefore, @BatchSize
DELETE FROM "SALES_API_OD"
WHERE Dispatched = 1 AND DispatchedAt < @DispatchedBefore AND ROWNUM <= @BatchSize
