-- create_outbox_table: Sales_Api_OutboxData
IF OBJECT_ID(N'[dbo].[Sales_Api_OutboxData]', N'U') IS NULL
BEGIN
    CREATE TABLE [dbo].[Sales_Api_OutboxData] (
        MessageId nvarchar(200) NOT NULL PRIMARY KEY NONCLUSTERED,
        Dispatched bit NOT NULL DEFAULT 0,
        DispatchedAt datetime,
        PersistenceVersion varchar(23) NOT NULL,
        Operations nvarchar(max) NOT NULL
    );
END;
GO
IF NOT EXISTS (SELECT * FROM sys.indexes WHERE object_id = OBJECT_ID(N'[dbo].[Sales_Api_OutboxData]') AND name = N'Index_DispatchedAt')
    CREATE INDEX Index_DispatchedAt ON [dbo].[Sales_Api_OutboxData] (DispatchedAt)
    WHERE Dispatched = 1;
GO
-- drop_outbox_table (refused while a message is not dispatched): Sales_Api_OutboxData
IF OBJECT_ID(N'[dbo].[Sales_Api_OutboxData]', N'U') IS NOT NULL
BEGIN
    IF EXISTS (SELECT * FROM [dbo].[Sales_Api_OutboxData] WHERE Dispatched = 0)
        THROW 50000, N'refusing to drop outbox table [dbo].[Sales_Api_OutboxData]: it still holds messages not yet dispatched (Dispatched = false). Let the endpoint dispatch them first, or list the table under discard: in topology.yaml to drop it with its rows', 1;
    DROP TABLE [dbo].[Sales_Api_OutboxData];
END
GO
-- drop_outbox_table (discarding): Sales_Api_OutboxData
IF OBJECT_ID(N'[dbo].[Sales_Api_OutboxData]', N'U') IS NOT NULL
    DROP TABLE [dbo].[Sales_Api_OutboxData];
GO
-- create_outbox_table: Bill_OutboxData
IF OBJECT_ID(N'[finance].[billing].[Bill_OutboxData]', N'U') IS NULL
BEGIN
    CREATE TABLE [finance].[billing].[Bill_OutboxData] (
        MessageId nvarchar(200) NOT NULL PRIMARY KEY NONCLUSTERED,
        Dispatched bit NOT NULL DEFAULT 0,
        DispatchedAt datetime,
        PersistenceVersion varchar(23) NOT NULL,
        Operations nvarchar(max) NOT NULL
    );
END;
GO
IF NOT EXISTS (SELECT * FROM [finance].sys.indexes WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_OutboxData]') AND name = N'Index_DispatchedAt')
    CREATE INDEX Index_DispatchedAt ON [finance].[billing].[Bill_OutboxData] (DispatchedAt)
    WHERE Dispatched = 1;
GO
-- drop_outbox_table (refused while a message is not dispatched): Bill_OutboxData
IF OBJECT_ID(N'[finance].[billing].[Bill_OutboxData]', N'U') IS NOT NULL
BEGIN
    IF EXISTS (SELECT * FROM [finance].[billing].[Bill_OutboxData] WHERE Dispatched = 0)
        THROW 50000, N'refusing to drop outbox table [finance].[billing].[Bill_OutboxData]: it still holds messages not yet dispatched (Dispatched = false). Let the endpoint dispatch them first, or list the table under discard: in topology.yaml to drop it with its rows', 1;
    DROP TABLE [finance].[billing].[Bill_OutboxData];
END
GO
-- drop_outbox_table (discarding): Bill_OutboxData
IF OBJECT_ID(N'[finance].[billing].[Bill_OutboxData]', N'U') IS NOT NULL
    DROP TABLE [finance].[billing].[Bill_OutboxData];
GO
