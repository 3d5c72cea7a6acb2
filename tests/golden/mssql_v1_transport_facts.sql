IF NOT  EXISTS (SELECT * FROM sys.objects WHERE object_id = OBJECT_ID(N'[{0}].[{1}]') AND type in (N'U'))
  BEGIN
    CREATE TABLE [{0}].[{1}](
        [Id] [uniqueidentifier] NOT NULL,
        [CorrelationId] [varchar](255) NULL,
        [ReplyToAddress] [varchar](255) NULL,
        [Recoverable] [bit] NOT NULL,
        [Expires] [datetime] NULL,
        [Headers] [varchar](max) NOT NULL,
        [Body] [varbinary](max) NULL,
        [RowVersion] [bigint] IDENTITY(1,1) NOT NULL
    ) ON [PRIMARY];
    CREATE CLUSTERED INDEX [Index_RowVersion] ON [{0}].[{1}]
    ( [RowVersion] ASC )
  END
