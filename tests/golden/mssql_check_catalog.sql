-- SHAPE_TABLES (own database)
SELECT t.object_id, s.name, t.name
FROM sys.tables t
INNER JOIN sys.schemas s ON s.schema_id = t.schema_id
WHERE t.is_ms_shipped = 0
GO

-- SHAPE_TABLES (logistics)
SELECT t.object_id, s.name, t.name
FROM [logistics].sys.tables t
INNER JOIN [logistics].sys.schemas s ON s.schema_id = t.schema_id
WHERE t.is_ms_shipped = 0
GO

-- SHAPE_COLUMNS (own database)
SELECT c.object_id, c.name, ty.name, c.max_length, c.[precision], c.scale, c.is_nullable, c.is_identity, c.is_computed,
       c.collation_name, COALESCE(dc.[definition], CASE WHEN dc.object_id IS NOT NULL THEN '(?)' END),
       COALESCE(cc.[definition], CASE WHEN cc.object_id IS NOT NULL THEN '(?)' END), cc.is_persisted
FROM sys.columns c
INNER JOIN sys.types ty ON ty.user_type_id = c.user_type_id
INNER JOIN sys.tables t ON t.object_id = c.object_id
LEFT JOIN sys.default_constraints dc ON dc.parent_object_id = c.object_id AND dc.parent_column_id = c.column_id
LEFT JOIN sys.computed_columns cc ON cc.object_id = c.object_id AND cc.column_id = c.column_id
WHERE t.is_ms_shipped = 0
ORDER BY c.object_id, c.column_id
GO

-- SHAPE_COLUMNS (logistics)
SELECT c.object_id, c.name, ty.name, c.max_length, c.[precision], c.scale, c.is_nullable, c.is_identity, c.is_computed,
       c.collation_name, COALESCE(dc.[definition], CASE WHEN dc.object_id IS NOT NULL THEN '(?)' END),
       COALESCE(cc.[definition], CASE WHEN cc.object_id IS NOT NULL THEN '(?)' END), cc.is_persisted
FROM [logistics].sys.columns c
INNER JOIN [logistics].sys.types ty ON ty.user_type_id = c.user_type_id
INNER JOIN [logistics].sys.tables t ON t.object_id = c.object_id
LEFT JOIN [logistics].sys.default_constraints dc ON dc.parent_object_id = c.object_id AND dc.parent_column_id = c.column_id
LEFT JOIN [logistics].sys.computed_columns cc ON cc.object_id = c.object_id AND cc.column_id = c.column_id
WHERE t.is_ms_shipped = 0
ORDER BY c.object_id, c.column_id
GO

-- SHAPE_INDEXES (own database)
SELECT i.object_id, i.index_id, i.name, i.type_desc, i.is_unique, i.has_filter, i.filter_definition, i.is_disabled,
       i.ignore_dup_key, i.fill_factor, i.is_padded, i.allow_row_locks, i.allow_page_locks
FROM sys.indexes i
INNER JOIN sys.tables t ON t.object_id = i.object_id
WHERE t.is_ms_shipped = 0 AND i.type <> 0 AND i.is_hypothetical = 0
GO

-- SHAPE_INDEXES (logistics)
SELECT i.object_id, i.index_id, i.name, i.type_desc, i.is_unique, i.has_filter, i.filter_definition, i.is_disabled,
       i.ignore_dup_key, i.fill_factor, i.is_padded, i.allow_row_locks, i.allow_page_locks
FROM [logistics].sys.indexes i
INNER JOIN [logistics].sys.tables t ON t.object_id = i.object_id
WHERE t.is_ms_shipped = 0 AND i.type <> 0 AND i.is_hypothetical = 0
GO

-- SHAPE_INDEX_COLUMNS (own database)
SELECT ic.object_id, ic.index_id, c.name, ic.key_ordinal, ic.is_included_column, ic.is_descending_key
FROM sys.index_columns ic
INNER JOIN sys.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
INNER JOIN sys.tables t ON t.object_id = ic.object_id
WHERE t.is_ms_shipped = 0
ORDER BY ic.object_id, ic.index_id, ic.key_ordinal, ic.index_column_id
GO

-- SHAPE_INDEX_COLUMNS (logistics)
SELECT ic.object_id, ic.index_id, c.name, ic.key_ordinal, ic.is_included_column, ic.is_descending_key
FROM [logistics].sys.index_columns ic
INNER JOIN [logistics].sys.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
INNER JOIN [logistics].sys.tables t ON t.object_id = ic.object_id
WHERE t.is_ms_shipped = 0
ORDER BY ic.object_id, ic.index_id, ic.key_ordinal, ic.index_column_id
GO

-- SHAPE_TRIGGERS (own database)
SELECT tr.parent_id, tr.name
FROM sys.triggers tr
INNER JOIN sys.tables t ON t.object_id = tr.parent_id
WHERE t.is_ms_shipped = 0 AND tr.parent_class = 1
GO

-- SHAPE_TRIGGERS (logistics)
SELECT tr.parent_id, tr.name
FROM [logistics].sys.triggers tr
INNER JOIN [logistics].sys.tables t ON t.object_id = tr.parent_id
WHERE t.is_ms_shipped = 0 AND tr.parent_class = 1
GO

-- SHAPE_DATABASES (own database)
SELECT d.name, d.collation_name, CASE WHEN d.database_id = DB_ID() THEN 1 ELSE 0 END
FROM sys.databases d
GO

-- SHAPE_DATABASES (logistics)
SELECT d.name, d.collation_name, CASE WHEN d.database_id = DB_ID() THEN 1 ELSE 0 END
FROM sys.databases d
GO
