-- create_saga_table: Sales_OrderSaga
IF OBJECT_ID(N'[dbo].[Sales_OrderSaga]', N'U') IS NULL
BEGIN
    CREATE TABLE [dbo].[Sales_OrderSaga] (
        Id uniqueidentifier NOT NULL PRIMARY KEY,
        Metadata nvarchar(max) NOT NULL,
        Data nvarchar(max) NOT NULL,
        PersistenceVersion varchar(23) NOT NULL,
        SagaTypeVersion varchar(23) NOT NULL,
        Concurrency int NOT NULL
    );
END;
GO
IF NOT EXISTS (SELECT * FROM sys.columns WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Correlation_OrderId')
    ALTER TABLE [dbo].[Sales_OrderSaga] ADD [Correlation_OrderId] uniqueidentifier NULL;
GO
DECLARE @found sysname = (
    SELECT DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS
    WHERE TABLE_SCHEMA = N'dbo' AND TABLE_NAME = N'Sales_OrderSaga' AND COLUMN_NAME = N'Correlation_OrderId'
);
IF @found <> N'uniqueidentifier'
BEGIN
    DECLARE @refusal nvarchar(2048) = N'saga table [dbo].[Sales_OrderSaga]: column Correlation_OrderId exists with type ' + @found + N', not uniqueidentifier. SQL persistence''s installer stops on this column too; give the property a new name (a transitional property) instead of a new type';
    THROW 50000, @refusal, 1;
END;
GO
IF NOT EXISTS (SELECT * FROM sys.indexes WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Index_Correlation_OrderId')
    CREATE UNIQUE NONCLUSTERED INDEX [Index_Correlation_OrderId] ON [dbo].[Sales_OrderSaga] ([Correlation_OrderId])
    WHERE [Correlation_OrderId] IS NOT NULL;
GO
IF NOT EXISTS (SELECT * FROM sys.columns WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Correlation_OrderNumber')
    ALTER TABLE [dbo].[Sales_OrderSaga] ADD [Correlation_OrderNumber] nvarchar(200) NULL;
GO
DECLARE @found sysname = (
    SELECT DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS
    WHERE TABLE_SCHEMA = N'dbo' AND TABLE_NAME = N'Sales_OrderSaga' AND COLUMN_NAME = N'Correlation_OrderNumber'
);
IF @found <> N'nvarchar'
BEGIN
    DECLARE @refusal nvarchar(2048) = N'saga table [dbo].[Sales_OrderSaga]: column Correlation_OrderNumber exists with type ' + @found + N', not nvarchar. SQL persistence''s installer stops on this column too; give the property a new name (a transitional property) instead of a new type';
    THROW 50000, @refusal, 1;
END;
GO
IF NOT EXISTS (SELECT * FROM sys.indexes WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Index_Correlation_OrderNumber')
    CREATE UNIQUE NONCLUSTERED INDEX [Index_Correlation_OrderNumber] ON [dbo].[Sales_OrderSaga] ([Correlation_OrderNumber])
    WHERE [Correlation_OrderNumber] IS NOT NULL;
GO
-- add_saga_correlation: Sales_OrderSaga
IF NOT EXISTS (SELECT * FROM sys.columns WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Correlation_OrderNumber')
    ALTER TABLE [dbo].[Sales_OrderSaga] ADD [Correlation_OrderNumber] nvarchar(200) NULL;
GO
DECLARE @found sysname = (
    SELECT DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS
    WHERE TABLE_SCHEMA = N'dbo' AND TABLE_NAME = N'Sales_OrderSaga' AND COLUMN_NAME = N'Correlation_OrderNumber'
);
IF @found <> N'nvarchar'
BEGIN
    DECLARE @refusal nvarchar(2048) = N'saga table [dbo].[Sales_OrderSaga]: column Correlation_OrderNumber exists with type ' + @found + N', not nvarchar. SQL persistence''s installer stops on this column too; give the property a new name (a transitional property) instead of a new type';
    THROW 50000, @refusal, 1;
END;
GO
IF NOT EXISTS (SELECT * FROM sys.indexes WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Index_Correlation_OrderNumber')
    CREATE UNIQUE NONCLUSTERED INDEX [Index_Correlation_OrderNumber] ON [dbo].[Sales_OrderSaga] ([Correlation_OrderNumber])
    WHERE [Correlation_OrderNumber] IS NOT NULL;
GO
-- drop_saga_correlation (promotion, guarded): Sales_OrderSaga
IF EXISTS (SELECT * FROM sys.columns WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Correlation_OrderId')
BEGIN
    IF EXISTS (SELECT * FROM [dbo].[Sales_OrderSaga] WHERE [Correlation_OrderNumber] IS NULL)
        THROW 50000, N'refusing to drop Correlation_OrderId of saga table [dbo].[Sales_OrderSaga]: some rows still have Correlation_OrderNumber NULL (the backfill is not done). Backfill it first: sqltransport-schema pipeline backfill --property OrderNumber --column Correlation_OrderNumber (PostgreSQL), or e.g. UPDATE [dbo].[Sales_OrderSaga] SET [Correlation_OrderNumber] = <the saga data''s OrderNumber> WHERE [Correlation_OrderNumber] IS NULL, or let the endpoint update each saga (every update writes Correlation_OrderNumber); then run the upgrade again', 1;
    IF EXISTS (SELECT * FROM sys.indexes WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Index_Correlation_OrderId')
        DROP INDEX [Index_Correlation_OrderId] ON [dbo].[Sales_OrderSaga];
    ALTER TABLE [dbo].[Sales_OrderSaga] DROP COLUMN [Correlation_OrderId];
END;
GO
-- drop_saga_correlation (abandoned transition): Sales_OrderSaga
IF EXISTS (SELECT * FROM sys.columns WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Correlation_OrderNumber')
BEGIN
    IF EXISTS (SELECT * FROM sys.indexes WHERE object_id = OBJECT_ID(N'[dbo].[Sales_OrderSaga]') AND name = N'Index_Correlation_OrderNumber')
        DROP INDEX [Index_Correlation_OrderNumber] ON [dbo].[Sales_OrderSaga];
    ALTER TABLE [dbo].[Sales_OrderSaga] DROP COLUMN [Correlation_OrderNumber];
END;
GO
-- drop_saga_table (refused while it holds sagas): Sales_OrderSaga
IF OBJECT_ID(N'[dbo].[Sales_OrderSaga]', N'U') IS NOT NULL
BEGIN
    IF EXISTS (SELECT * FROM [dbo].[Sales_OrderSaga])
        THROW 50000, N'refusing to drop saga table [dbo].[Sales_OrderSaga]: it still holds saga instances (sagas in progress). Let them complete first, or list the table under discard: in topology.yaml to drop it with its data', 1;
    DROP TABLE [dbo].[Sales_OrderSaga];
END
GO
-- drop_saga_table (discarding): Sales_OrderSaga
IF OBJECT_ID(N'[dbo].[Sales_OrderSaga]', N'U') IS NOT NULL
    DROP TABLE [dbo].[Sales_OrderSaga];
GO
-- create_saga_table: Bill_Invoices
IF OBJECT_ID(N'[finance].[billing].[Bill_Invoices]', N'U') IS NULL
BEGIN
    CREATE TABLE [finance].[billing].[Bill_Invoices] (
        Id uniqueidentifier NOT NULL PRIMARY KEY,
        Metadata nvarchar(max) NOT NULL,
        Data nvarchar(max) NOT NULL,
        PersistenceVersion varchar(23) NOT NULL,
        SagaTypeVersion varchar(23) NOT NULL,
        Concurrency int NOT NULL
    );
END;
GO
IF NOT EXISTS (SELECT * FROM [finance].sys.columns WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Correlation_PlacedAt')
    ALTER TABLE [finance].[billing].[Bill_Invoices] ADD [Correlation_PlacedAt] datetimeoffset NULL;
GO
DECLARE @found sysname = (
    SELECT DATA_TYPE FROM [finance].INFORMATION_SCHEMA.COLUMNS
    WHERE TABLE_SCHEMA = N'billing' AND TABLE_NAME = N'Bill_Invoices' AND COLUMN_NAME = N'Correlation_PlacedAt'
);
IF @found <> N'datetimeoffset'
BEGIN
    DECLARE @refusal nvarchar(2048) = N'saga table [finance].[billing].[Bill_Invoices]: column Correlation_PlacedAt exists with type ' + @found + N', not datetimeoffset. SQL persistence''s installer stops on this column too; give the property a new name (a transitional property) instead of a new type';
    THROW 50000, @refusal, 1;
END;
GO
IF NOT EXISTS (SELECT * FROM [finance].sys.indexes WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Index_Correlation_PlacedAt')
    CREATE UNIQUE NONCLUSTERED INDEX [Index_Correlation_PlacedAt] ON [finance].[billing].[Bill_Invoices] ([Correlation_PlacedAt])
    WHERE [Correlation_PlacedAt] IS NOT NULL;
GO
IF NOT EXISTS (SELECT * FROM [finance].sys.columns WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Correlation_InvoiceNumber')
    ALTER TABLE [finance].[billing].[Bill_Invoices] ADD [Correlation_InvoiceNumber] bigint NULL;
GO
DECLARE @found sysname = (
    SELECT DATA_TYPE FROM [finance].INFORMATION_SCHEMA.COLUMNS
    WHERE TABLE_SCHEMA = N'billing' AND TABLE_NAME = N'Bill_Invoices' AND COLUMN_NAME = N'Correlation_InvoiceNumber'
);
IF @found <> N'bigint'
BEGIN
    DECLARE @refusal nvarchar(2048) = N'saga table [finance].[billing].[Bill_Invoices]: column Correlation_InvoiceNumber exists with type ' + @found + N', not bigint. SQL persistence''s installer stops on this column too; give the property a new name (a transitional property) instead of a new type';
    THROW 50000, @refusal, 1;
END;
GO
IF NOT EXISTS (SELECT * FROM [finance].sys.indexes WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Index_Correlation_InvoiceNumber')
    CREATE UNIQUE NONCLUSTERED INDEX [Index_Correlation_InvoiceNumber] ON [finance].[billing].[Bill_Invoices] ([Correlation_InvoiceNumber])
    WHERE [Correlation_InvoiceNumber] IS NOT NULL;
GO
-- add_saga_correlation: Bill_Invoices
IF NOT EXISTS (SELECT * FROM [finance].sys.columns WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Correlation_InvoiceNumber')
    ALTER TABLE [finance].[billing].[Bill_Invoices] ADD [Correlation_InvoiceNumber] bigint NULL;
GO
DECLARE @found sysname = (
    SELECT DATA_TYPE FROM [finance].INFORMATION_SCHEMA.COLUMNS
    WHERE TABLE_SCHEMA = N'billing' AND TABLE_NAME = N'Bill_Invoices' AND COLUMN_NAME = N'Correlation_InvoiceNumber'
);
IF @found <> N'bigint'
BEGIN
    DECLARE @refusal nvarchar(2048) = N'saga table [finance].[billing].[Bill_Invoices]: column Correlation_InvoiceNumber exists with type ' + @found + N', not bigint. SQL persistence''s installer stops on this column too; give the property a new name (a transitional property) instead of a new type';
    THROW 50000, @refusal, 1;
END;
GO
IF NOT EXISTS (SELECT * FROM [finance].sys.indexes WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Index_Correlation_InvoiceNumber')
    CREATE UNIQUE NONCLUSTERED INDEX [Index_Correlation_InvoiceNumber] ON [finance].[billing].[Bill_Invoices] ([Correlation_InvoiceNumber])
    WHERE [Correlation_InvoiceNumber] IS NOT NULL;
GO
-- drop_saga_correlation (promotion, guarded): Bill_Invoices
IF EXISTS (SELECT * FROM [finance].sys.columns WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Correlation_PlacedAt')
BEGIN
    IF EXISTS (SELECT * FROM [finance].[billing].[Bill_Invoices] WHERE [Correlation_InvoiceNumber] IS NULL)
        THROW 50000, N'refusing to drop Correlation_PlacedAt of saga table [finance].[billing].[Bill_Invoices]: some rows still have Correlation_InvoiceNumber NULL (the backfill is not done). Backfill it first: sqltransport-schema pipeline backfill --property InvoiceNumber --column Correlation_InvoiceNumber (PostgreSQL), or e.g. UPDATE [finance].[billing].[Bill_Invoices] SET [Correlation_InvoiceNumber] = <the saga data''s InvoiceNumber> WHERE [Correlation_InvoiceNumber] IS NULL, or let the endpoint update each saga (every update writes Correlation_InvoiceNumber); then run the upgrade again', 1;
    IF EXISTS (SELECT * FROM [finance].sys.indexes WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Index_Correlation_PlacedAt')
        DROP INDEX [Index_Correlation_PlacedAt] ON [finance].[billing].[Bill_Invoices];
    ALTER TABLE [finance].[billing].[Bill_Invoices] DROP COLUMN [Correlation_PlacedAt];
END;
GO
-- drop_saga_correlation (abandoned transition): Bill_Invoices
IF EXISTS (SELECT * FROM [finance].sys.columns WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Correlation_InvoiceNumber')
BEGIN
    IF EXISTS (SELECT * FROM [finance].sys.indexes WHERE object_id = OBJECT_ID(N'[finance].[billing].[Bill_Invoices]') AND name = N'Index_Correlation_InvoiceNumber')
        DROP INDEX [Index_Correlation_InvoiceNumber] ON [finance].[billing].[Bill_Invoices];
    ALTER TABLE [finance].[billing].[Bill_Invoices] DROP COLUMN [Correlation_InvoiceNumber];
END;
GO
-- drop_saga_table (refused while it holds sagas): Bill_Invoices
IF OBJECT_ID(N'[finance].[billing].[Bill_Invoices]', N'U') IS NOT NULL
BEGIN
    IF EXISTS (SELECT * FROM [finance].[billing].[Bill_Invoices])
        THROW 50000, N'refusing to drop saga table [finance].[billing].[Bill_Invoices]: it still holds saga instances (sagas in progress). Let them complete first, or list the table under discard: in topology.yaml to drop it with its data', 1;
    DROP TABLE [finance].[billing].[Bill_Invoices];
END
GO
-- drop_saga_table (discarding): Bill_Invoices
IF OBJECT_ID(N'[finance].[billing].[Bill_Invoices]', N'U') IS NOT NULL
    DROP TABLE [finance].[billing].[Bill_Invoices];
GO
