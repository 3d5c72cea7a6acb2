-- This part completed: the last file of the deployment stamps only when every part did.
IF OBJECT_ID(N'sqltransport_script_parts', N'U') IS NULL
    CREATE TABLE sqltransport_script_parts (
        deployment nvarchar(100) NOT NULL,
        part nvarchar(200) NOT NULL,
        CONSTRAINT sqltransport_script_parts_pk PRIMARY KEY (deployment, part)
    );
IF NOT EXISTS (SELECT 1 FROM sqltransport_script_parts WHERE deployment = N'base:0123456789ab' AND part = N'01-Sales.sql')
    INSERT INTO sqltransport_script_parts (deployment, part) VALUES (N'base:0123456789ab', N'01-Sales.sql');

GO

IF @@ERROR <> 0 OR @@TRANCOUNT = 0
BEGIN
    IF @@TRANCOUNT > 0 ROLLBACK;
    SET NOEXEC ON;
END;

GO

-- Stamp only if every part of this deployment completed (each recorded it as its last batch).
IF OBJECT_ID(N'sqltransport_script_parts', N'U') IS NULL
    CREATE TABLE sqltransport_script_parts (
        deployment nvarchar(100) NOT NULL,
        part nvarchar(200) NOT NULL,
        CONSTRAINT sqltransport_script_parts_pk PRIMARY KEY (deployment, part)
    );
IF NOT EXISTS (SELECT 1 FROM sqltransport_script_parts WHERE deployment = N'base:0123456789ab' AND part = N'00-shared.sql')
BEGIN
    ROLLBACK;
    RAISERROR(N'not stamped: %s of this deployment did not complete; run it, then this file again', 16, 1, N'00-shared.sql');
END
ELSE IF NOT EXISTS (SELECT 1 FROM sqltransport_script_parts WHERE deployment = N'base:0123456789ab' AND part = N'01-Sales.sql')
BEGIN
    ROLLBACK;
    RAISERROR(N'not stamped: %s of this deployment did not complete; run it, then this file again', 16, 1, N'01-Sales.sql');
END
ELSE IF NOT EXISTS (SELECT 1 FROM sqltransport_script_parts WHERE deployment = N'base:0123456789ab' AND part = N'02-Billing''s.sql')
BEGIN
    ROLLBACK;
    RAISERROR(N'not stamped: %s of this deployment did not complete; run it, then this file again', 16, 1, N'02-Billing''s.sql');
END
ELSE BEGIN
    DELETE FROM sqltransport_script_parts WHERE deployment = N'base:0123456789ab';
    IF NOT EXISTS (SELECT 1 FROM sqltransport_script_parts)
        DROP TABLE sqltransport_script_parts;
END;

GO

IF @@ERROR <> 0 OR @@TRANCOUNT = 0
BEGIN
    IF @@TRANCOUNT > 0 ROLLBACK;
    SET NOEXEC ON;
END;

GO

