"""SQL Server's catalog without a server: the sys.* views as SQL Server fills them, held in SQLite.

`SqlServerCatalog` keeps sys.schemas, sys.tables, sys.types, sys.columns, sys.indexes and
sys.index_columns with SQL Server's own column names and the rows SQL Server keeps for a table:
system types with their real ids (sysname shares nvarchar's system_type_id), a HEAP row (index_id 0)
for a table without a clustered index, MS-shipped tables beside the user's. It answers whatever
query reads those views (`exec_driver_sql`), so the implementation's real joins and filters run:
rewording a query changes nothing, a wrong join or a missing filter changes the result. The only
rewrite is the name of another database's views ([catalog].sys.x), which SQLite spells as an
attached schema; DB_ID() is a function of the connection. sys.databases, server-wide, is the
connection's own database's view. Defaults, computed columns, triggers and collations are kept as
SQL Server keeps them (sys.default_constraints, sys.computed_columns, sys.triggers, collation_name).

The row builders below (`TABLES`, `queue_columns`, ...) are the same table written as the four
SHAPE_* queries return it, for tests of the pure `shapes_from_rows`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SALES = 581577110  # object_id of dbo.Sales
DELAYED = 613577224  # object_id of dbo.Sales.Delayed
SUBS = 645577338  # object_id of dbo.SubscriptionRouting

# name -> (system_type_id, user_type_id, max_length, precision, scale), as sys.types lists them
SYSTEM_TYPES = {
    "uniqueidentifier": (36, 36, 16, 0, 0),
    "datetime2": (42, 42, 8, 27, 7),
    "int": (56, 56, 4, 10, 0),
    "datetime": (61, 61, 8, 23, 3),
    "bit": (104, 104, 1, 1, 0),
    "decimal": (106, 106, 17, 38, 38),
    "bigint": (127, 127, 8, 19, 0),
    "varbinary": (165, 165, 8000, 0, 0),
    "varchar": (167, 167, 8000, 0, 0),
    "char": (175, 175, 8000, 0, 0),
    "nvarchar": (231, 231, 8000, 0, 0),
    "nchar": (239, 239, 8000, 0, 0),
    "sysname": (231, 256, 256, 0, 0),  # an alias type: same system_type_id as nvarchar
}

VIEWS = """
CREATE TABLE {db}.schemas (name TEXT, schema_id INT, principal_id INT);
CREATE TABLE {db}.tables (name TEXT, object_id INT, schema_id INT, type TEXT, type_desc TEXT, is_ms_shipped INT);
CREATE TABLE {db}.types (name TEXT, system_type_id INT, user_type_id INT, schema_id INT, max_length INT,
                         precision INT, scale INT, is_nullable INT, is_user_defined INT);
CREATE TABLE {db}.columns (object_id INT, name TEXT, column_id INT, system_type_id INT, user_type_id INT,
                           max_length INT, precision INT, scale INT, collation_name TEXT, is_nullable INT, is_identity INT,
                           is_computed INT);
CREATE TABLE {db}.indexes (object_id INT, name TEXT, index_id INT, type INT, type_desc TEXT, is_unique INT,
                           ignore_dup_key INT, is_primary_key INT, fill_factor INT, is_padded INT, is_disabled INT,
                           is_hypothetical INT, allow_row_locks INT, allow_page_locks INT, has_filter INT, filter_definition TEXT);
CREATE TABLE {db}.index_columns (object_id INT, index_id INT, index_column_id INT, column_id INT, key_ordinal INT,
                                 is_descending_key INT, is_included_column INT);
CREATE TABLE {db}.default_constraints (name TEXT, object_id INT, parent_object_id INT, type TEXT, parent_column_id INT,
                                       definition TEXT);
CREATE TABLE {db}.computed_columns (object_id INT, name TEXT, column_id INT, definition TEXT, is_persisted INT);
CREATE TABLE {db}.triggers (name TEXT, object_id INT, parent_class INT, parent_class_desc TEXT, parent_id INT, type TEXT,
                            is_disabled INT);
CREATE TABLE {db}.databases (name TEXT, database_id INT, collation_name TEXT);
"""
# The instance's collation: each database's default unless created with another (SQL Server's setup default)
DEFAULT_COLLATION = "SQL_Latin1_General_CP1_CI_AS"
# A case-sensitive database (the transport supports one): identifiers, the catalog's own included, match
# only in their exact case, so `information_schema.columns` is "Invalid object name" there.
CASE_SENSITIVE_COLLATION = "SQL_Latin1_General_CP1_CS_AS"
# INFORMATION_SCHEMA.COLUMNS over the sys views, as SQL Server defines it (its names upper case);
# a TEMP view, since SQLite lets only those read another attached database.
INFORMATION_SCHEMA_COLUMNS = """
CREATE TEMP VIEW {view} AS
SELECT d.name AS TABLE_CATALOG, s.name AS TABLE_SCHEMA, t.name AS TABLE_NAME, c.name AS COLUMN_NAME,
       c.column_id AS ORDINAL_POSITION, CASE WHEN c.is_nullable THEN 'YES' ELSE 'NO' END AS IS_NULLABLE,
       ty.name AS DATA_TYPE, c.collation_name AS COLLATION_NAME
FROM {db}.columns c
INNER JOIN {db}.tables t ON t.object_id = c.object_id
INNER JOIN {db}.schemas s ON s.schema_id = t.schema_id
INNER JOIN {db}.types ty ON ty.user_type_id = c.user_type_id
INNER JOIN "sys".databases d ON d.name = {catalog}
"""
# The catalog's names in their exact case: each sys view's columns (lower case), INFORMATION_SCHEMA's (upper)
CATALOG_COLUMNS = {
    **{view: re.findall(r"(?:^|,)\s*(\w+) [A-Z]+", columns) for view, columns in re.findall(r"\{db\}\.(\w+) \(([^;]*)\);", VIEWS)},
    "objects": ["object_id", "name", "schema_id", "type", "type_desc", "is_ms_shipped"],
    "partitions": ["partition_id", "object_id", "index_id", "partition_number", "rows"],
    "INFORMATION_SCHEMA.COLUMNS": ["TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "COLUMN_NAME", "ORDINAL_POSITION",
                                   "IS_NULLABLE", "DATA_TYPE", "COLLATION_NAME"],
}  # fmt: skip
CATALOG_VIEW = re.compile(r"\b(sys|INFORMATION_SCHEMA)\s*\.\s*\[?(\w+)\]?", re.I)


def case_problems(sql: str) -> list[str]:
    """What a case-sensitive database refuses in `sql`: a catalog schema, view or column of a view the
    text reads, spelled in another case than the catalog's (SQL Server's errors 208 and 207)."""
    from .tsql import tokenize

    problems, exact = [], {}
    for schema, view in CATALOG_VIEW.findall(sql):
        proper = "sys" if schema.lower() == "sys" else "INFORMATION_SCHEMA"
        prefix = "" if proper == "sys" else proper + "."
        views = [name for name in CATALOG_COLUMNS if name.lower() == (prefix + view).lower()]
        if schema != proper or (views and prefix + view not in views):
            problems.append(f"Invalid object name '{schema}.{view}'.")
        for name in views:
            exact.update((column.lower(), column) for column in CATALOG_COLUMNS[name])
    tokens = tokenize(sql)
    for token, after in zip(tokens, [*tokens[1:], None]):
        word = token.value if token.kind in ("word", "ident") else None
        if after is not None and after.raw == "(":
            continue  # a function (OBJECT_ID(...)): built-in names match in any case
        if word is not None and word.lower() in exact and word != exact[word.lower()]:
            problems.append(f"Invalid column name '{word}'.")
    return problems


STRING_TYPES = frozenset({"varchar", "char", "nvarchar", "nchar", "sysname"})
INDEX_TYPES = {"HEAP": 0, "CLUSTERED": 1, "NONCLUSTERED": 2}
# [catalog].sys.view (another database's views) or sys.view; a catalog name doubles its ]
SYS_VIEW = re.compile(r"(?:\[((?:[^\]]|\]\])*)\]\.)?\bsys\.(\w+)\b", re.I)
INFORMATION_SCHEMA_VIEW = re.compile(r"(?:\[((?:[^\]]|\]\])*)\]\.)?\bINFORMATION_SCHEMA\.(COLUMNS)\b", re.I)


@dataclass(frozen=True)
class Column:
    """A column as its DDL declares it; max_length in bytes (-1: max), None: the type's own."""

    name: str
    type: str
    max_length: int | None = None
    nullable: bool = False
    identity: bool = False
    computed: bool = False
    definition: str | None = None  # a computed column's, as sys.computed_columns keeps it
    default: str | None = None  # the DEFAULT constraint's definition, as SQL Server keeps it: ((0))
    collation: str | None = None  # COLLATE (None: the database's default, for the string types)


@dataclass(frozen=True)
class Index:
    type_desc: str  # CLUSTERED or NONCLUSTERED
    name: str
    keys: Sequence[str]
    include: Sequence[str] = ()
    unique: bool = False
    filter_definition: str | None = None  # as SQL Server stores it: ([Expires] IS NOT NULL)
    hypothetical: bool = False  # a Database Engine Tuning Advisor leftover: in sys.indexes, not a real index
    descending: Sequence[str] = ()  # key columns declared DESC
    fill_factor: int = 0  # WITH (FILLFACTOR = n); 0: the server's default
    ignore_dup_key: bool = False


def queue_table(headers: tuple[str, int] = ("nvarchar", -1), body_string: bool = False) -> list[Column]:
    """A queue's columns as the transport's 9.1 DDL creates them."""
    columns = [
        Column("Id", "uniqueidentifier"),
        Column("CorrelationId", "varchar", 255, nullable=True),
        Column("ReplyToAddress", "varchar", 255, nullable=True),
        Column("Recoverable", "bit"),
        Column("Expires", "datetime", nullable=True),
        Column("Headers", headers[0], headers[1]),
        Column("Body", "varbinary", -1, nullable=True),
        Column("RowVersion", "bigint", identity=True),
    ]
    if body_string:
        columns.append(Column("BodyString", "nvarchar", -1, nullable=True, computed=True, definition="(CONVERT([nvarchar](max),[Body],0))"))
    return columns


QUEUE_INDEXES = [
    Index("NONCLUSTERED", "Index_RowVersion", ["RowVersion"]),
    Index("NONCLUSTERED", "Index_Expires", ["Expires"], include=["Id", "RowVersion"], filter_definition="([Expires] IS NOT NULL)"),
]


class SqlServerCatalog:
    """The sys views of one SQL Server instance: the connection's database and any others (`attach`)."""

    def __init__(self, collation: str = DEFAULT_COLLATION) -> None:
        """collation: the connection's database's (CASE_SENSITIVE_COLLATION: a case-sensitive one,
        whose catalog answers only names in their exact case)."""
        self.db = sqlite3.connect(":memory:")
        self.db.create_function("DB_ID", 0, lambda: 5)  # the connection's database
        self.next_object_id = SALES
        self.views_read: list[set[str]] = []  # per query: the sys views it read
        self.case_sensitive = "_CS_" in collation
        self.attach(None, collation)

    @staticmethod
    def _schema(catalog: str | None) -> str:
        return '"sys"' if catalog is None else '"' + ("sys@" + catalog).replace('"', '""') + '"'

    def attach(self, catalog: str | None, collation: str = DEFAULT_COLLATION) -> None:
        """A database with its system types and schemas, and one MS-shipped table (as every database has);
        listed in sys.databases (server-wide: the connection's own database's view holds every database)."""
        db = self._schema(catalog)
        self.db.execute(f"ATTACH DATABASE ':memory:' AS {db}")
        self.db.executescript(VIEWS.format(db=db))
        (count,) = self.db.execute('SELECT count(*) FROM "sys".databases').fetchone() if catalog is not None else (0,)
        self.db.execute('INSERT INTO "sys".databases VALUES (?, ?, ?)', (catalog or "app", 5 if catalog is None else 6 + count, collation))
        self.db.executemany(
            f"INSERT INTO {db}.types VALUES (?, ?, ?, 4, ?, ?, ?, 1, 0)", [(name, *row) for name, row in SYSTEM_TYPES.items()]
        )
        self.db.executemany(f"INSERT INTO {db}.schemas VALUES (?, ?, 1)", [("dbo", 1), ("guest", 2), ("sys", 4)])
        name = "'" + (catalog or "app").replace("'", "''") + "'"
        self.db.executescript(INFORMATION_SCHEMA_COLUMNS.format(view=self._information_schema(catalog), db=db, catalog=name))
        self.create_table("dbo", "MSreplication_options", [Column("optname", "sysname")], catalog=catalog, object_id=117575457)

    def create_table(
        self,
        schema: str,
        table: str,
        columns: Iterable[Column],
        indexes: Iterable[Index] = (),
        catalog: str | None = None,
        object_id: int | None = None,
        triggers: Iterable[str] = (),
    ) -> int:
        """The rows SQL Server adds for CREATE TABLE and its CREATE INDEX statements; returns the object_id.
        An object_id given: a table shipped with SQL Server (is_ms_shipped), not the user's."""
        db = self._schema(catalog)
        (schema_id,) = self.db.execute(f"SELECT schema_id FROM {db}.schemas WHERE name = ?", (schema,)).fetchone() or (None,)
        if schema_id is None:
            (schema_id,) = self.db.execute(f"SELECT max(schema_id) + 1 FROM {db}.schemas").fetchone()
            self.db.execute(f"INSERT INTO {db}.schemas VALUES (?, ?, 1)", (schema, schema_id))
        ms_shipped = object_id is not None
        if object_id is None:
            object_id, self.next_object_id = self.next_object_id, self.next_object_id + 32000114  # SALES, DELAYED, SUBS, ...
        self.db.execute(f"INSERT INTO {db}.tables VALUES (?, ?, ?, 'U ', 'USER_TABLE', ?)", (table, object_id, schema_id, ms_shipped))
        column_ids = {}
        (database_collation,) = self.db.execute('SELECT collation_name FROM "sys".databases WHERE name = ?', (catalog or "app",)).fetchone()
        for column_id, column in enumerate(columns, start=1):
            system_type_id, user_type_id, max_length, precision, scale = SYSTEM_TYPES[column.type]
            column_ids[column.name] = column_id
            collation = (column.collation or database_collation) if column.type in STRING_TYPES else None
            self.db.execute(
                f"INSERT INTO {db}.columns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (object_id, column.name, column_id, system_type_id, user_type_id,
                 max_length if column.max_length is None else column.max_length, precision, scale, collation,
                 column.nullable, column.identity, column.computed),
            )  # fmt: skip
            if column.definition is not None:
                self.db.execute(
                    f"INSERT INTO {db}.computed_columns VALUES (?, ?, ?, ?, 0)", (object_id, column.name, column_id, column.definition)
                )
            if column.default is not None:
                self.db.execute(
                    f"INSERT INTO {db}.default_constraints VALUES (?, ?, ?, 'D ', ?, ?)",
                    (f"DF__{table[:9]}__{column.name[:5]}__{object_id + column_id:X}", object_id + 1000 + column_id, object_id, column_id,
                     column.default),
                )  # fmt: skip
        for number, trigger in enumerate(triggers, start=1):
            self.db.execute(
                f"INSERT INTO {db}.triggers VALUES (?, ?, 1, 'OBJECT_OR_COLUMN', ?, 'TR', 0)",
                (trigger, object_id + 2000 + number, object_id),
            )
        indexes = list(indexes)
        if not any(index.type_desc == "CLUSTERED" for index in indexes):
            self.db.execute(f"INSERT INTO {db}.indexes VALUES (?, NULL, 0, 0, 'HEAP', 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, NULL)", (object_id,))
        next_id = 2
        for index in indexes:
            if index.type_desc == "CLUSTERED":
                index_id = 1
            else:
                index_id, next_id = next_id, next_id + 1
            self.db.execute(
                f"INSERT INTO {db}.indexes VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, 0, 0, ?, 1, 1, ?, ?)",
                (object_id, index.name, index_id, INDEX_TYPES[index.type_desc], index.type_desc, index.unique, index.ignore_dup_key,
                 index.fill_factor, index.hypothetical, index.filter_definition is not None, index.filter_definition),
            )  # fmt: skip
            members = [(name, ordinal, False) for ordinal, name in enumerate(index.keys, start=1)]
            members += [(name, 0, True) for name in index.include]
            for index_column_id, (name, key_ordinal, included) in enumerate(members, start=1):
                self.db.execute(
                    f"INSERT INTO {db}.index_columns VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (object_id, index_id, index_column_id, column_ids[name], key_ordinal, name in index.descending, included),
                )
        return object_id

    def as_monitoring_login(self, catalog: str | None = None) -> None:
        """The catalog as a login without VIEW DEFINITION sees it (`grants --monitor`: SELECT on every
        table): every row still listed, but sys.indexes.filter_definition is NULL (has_filter kept),
        as are the definitions of defaults and computed columns ("insufficient permissions")."""
        db = self._schema(catalog)
        self.db.execute(f"UPDATE {db}.indexes SET filter_definition = NULL")
        self.db.execute(f"UPDATE {db}.default_constraints SET definition = NULL")
        self.db.execute(f"UPDATE {db}.computed_columns SET definition = NULL")

    @staticmethod
    def _information_schema(catalog: str | None) -> str:
        return '"' + ("INFORMATION_SCHEMA.COLUMNS@" + (catalog or "")).replace('"', '""') + '"'

    def exec_driver_sql(self, sql: str) -> list[tuple]:
        """Run a query over the sys views and INFORMATION_SCHEMA.COLUMNS, as a SQLAlchemy connection
        would on SQL Server; in a case-sensitive database, a catalog name in another case is refused
        as SQL Server refuses it."""
        if self.case_sensitive and (problems := case_problems(sql)):
            raise sqlite3.OperationalError(" ".join(problems))
        read: set[str] = set()

        def local(match: re.Match) -> str:
            catalog = None if match[1] is None else match[1].replace("]]", "]")
            read.add(match[2].lower())
            return f"{self._schema(catalog)}.{match[2]}"

        def information_schema(match: re.Match) -> str:
            read.add("information_schema." + match[2].lower())
            return self._information_schema(None if match[1] is None else match[1].replace("]]", "]"))

        sql = INFORMATION_SCHEMA_VIEW.sub(information_schema, sql)
        rows = self.db.execute(SYS_VIEW.sub(local, sql)).fetchall()
        self.views_read.append(read)
        return rows


# SHAPE_TABLES: (object_id, schema, table)
TABLES = [(SALES, "dbo", "Sales")]


# The values of the SHAPE_* columns after the ones the rows below spell out, as SQL Server fills them for
# a column or index made without the clause: collation (the database's, for string types: see
# column_rows), no default, not computed; enabled, no ignore_dup_key, default fill factor, not padded,
# row and page locks allowed; ascending keys.
COLUMN_REST = (None, None, None, None)  # collation_name, default definition, computed definition, is_persisted
INDEX_REST = (False, False, 0, False, True, True)  # is_disabled, ignore_dup_key, fill_factor, is_padded, allow_row/page_locks
INDEX_COLUMN_REST = (False,)  # is_descending_key


def column_rows(rows):
    """SHAPE_COLUMNS rows from their first nine values (the rest as a column without COLLATE, DEFAULT or AS has them)."""
    out = []
    for row in rows:
        row = tuple(row) + COLUMN_REST[len(row) - 9 :]
        if len(row) == 13 and row[9] is None and str(row[2]).lower() in STRING_TYPES:
            row = row[:9] + (DEFAULT_COLLATION,) + row[10:]
        out.append(row)
    return out


def index_rows(rows):
    """SHAPE_INDEXES rows from their first seven values (the rest: CREATE INDEX's defaults)."""
    return [tuple(row) + INDEX_REST[len(row) - 7 :] for row in rows]


def index_column_rows(rows):
    """SHAPE_INDEX_COLUMNS rows from their first five values (ascending keys)."""
    return [tuple(row) + INDEX_COLUMN_REST[len(row) - 5 :] for row in rows]


def queue_columns(headers=("nvarchar", -1), body_string=False):
    """SHAPE_COLUMNS rows of a queue: (object_id, name, type, max_length, precision, scale,
    is_nullable, is_identity, is_computed, collation_name, default, computed definition, is_persisted),
    in column_id order."""
    rows = [
        (SALES, "Id", "uniqueidentifier", 16, 0, 0, False, False, False),
        (SALES, "CorrelationId", "varchar", 255, 0, 0, True, False, False),
        (SALES, "ReplyToAddress", "varchar", 255, 0, 0, True, False, False),
        (SALES, "Recoverable", "bit", 1, 1, 0, False, False, False),
        (SALES, "Expires", "datetime", 8, 23, 3, True, False, False),
        (SALES, "Headers", headers[0], headers[1], 0, 0, False, False, False),
        (SALES, "Body", "varbinary", -1, 0, 0, True, False, False),
        (SALES, "RowVersion", "bigint", 8, 19, 0, False, True, False),
    ]
    if body_string:
        rows.append(
            (SALES, "BodyString", "nvarchar", -1, 0, 0, True, False, True, None, None, "(CONVERT([nvarchar](max),[Body],0))", False)
        )
    return column_rows(rows)


def queue_indexes(rowversion="NONCLUSTERED", expires_filter="([Expires] IS NOT NULL)", expires=True):
    """SHAPE_INDEXES rows: (object_id, index_id, name, type_desc, is_unique, has_filter, filter_definition,
    is_disabled, ignore_dup_key, fill_factor, is_padded, allow_row_locks, allow_page_locks)."""
    rows = []
    if rowversion == "NONCLUSTERED":  # no clustered index: the table is a heap (index_id 0, left out by the query)
        rows.append((SALES, 2, "Index_RowVersion", "NONCLUSTERED", False, False, None))
    else:
        rows.append((SALES, 1, "Index_RowVersion", "CLUSTERED", False, False, None))
    if expires:
        rows.append((SALES, 3, "Index_Expires", "NONCLUSTERED", False, expires_filter is not None, expires_filter))
    return index_rows(rows)


def queue_index_columns(rowversion="NONCLUSTERED", include=("Id", "RowVersion"), expires=True):
    """SHAPE_INDEX_COLUMNS rows: (object_id, index_id, column, key_ordinal, is_included_column, is_descending_key)."""
    rows = [(SALES, 2 if rowversion == "NONCLUSTERED" else 1, "RowVersion", 1, False)]
    if expires:
        rows.append((SALES, 3, "Expires", 1, False))
        rows += [(SALES, 3, column, 0, True) for column in include]
    return index_column_rows(rows)
