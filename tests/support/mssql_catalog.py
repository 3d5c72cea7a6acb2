"""SQL Server's catalog without a server: the sys.* views as SQL Server fills them, held in SQLite.

`SqlServerCatalog` keeps sys.schemas, sys.tables, sys.types, sys.columns, sys.indexes and
sys.index_columns with SQL Server's own column names and the rows SQL Server keeps for a table:
system types with their real ids (sysname shares nvarchar's system_type_id), a HEAP row (index_id 0)
for a table without a clustered index, MS-shipped tables beside the user's. It answers whatever
query reads those views (`exec_driver_sql`), so the implementation's real joins and filters run:
rewording a query changes nothing, a wrong join or a missing filter changes the result. The only
rewrite is the name of another database's views ([catalog].sys.x), which SQLite spells as an
attached schema.

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
                           max_length INT, precision INT, scale INT, is_nullable INT, is_identity INT, is_computed INT);
CREATE TABLE {db}.indexes (object_id INT, name TEXT, index_id INT, type INT, type_desc TEXT, is_unique INT,
                           is_primary_key INT, is_disabled INT, is_hypothetical INT, has_filter INT, filter_definition TEXT);
CREATE TABLE {db}.index_columns (object_id INT, index_id INT, index_column_id INT, column_id INT, key_ordinal INT,
                                 is_descending_key INT, is_included_column INT);
"""
INDEX_TYPES = {"HEAP": 0, "CLUSTERED": 1, "NONCLUSTERED": 2}
# [catalog].sys.view (another database's views) or sys.view; a catalog name doubles its ]
SYS_VIEW = re.compile(r"(?:\[((?:[^\]]|\]\])*)\]\.)?\bsys\.(\w+)\b", re.I)


@dataclass(frozen=True)
class Column:
    """A column as its DDL declares it; max_length in bytes (-1: max), None: the type's own."""

    name: str
    type: str
    max_length: int | None = None
    nullable: bool = False
    identity: bool = False
    computed: bool = False


@dataclass(frozen=True)
class Index:
    type_desc: str  # CLUSTERED or NONCLUSTERED
    name: str
    keys: Sequence[str]
    include: Sequence[str] = ()
    unique: bool = False
    filter_definition: str | None = None  # as SQL Server stores it: ([Expires] IS NOT NULL)
    hypothetical: bool = False  # a Database Engine Tuning Advisor leftover: in sys.indexes, not a real index


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
        columns.append(Column("BodyString", "nvarchar", -1, nullable=True, computed=True))
    return columns


QUEUE_INDEXES = [
    Index("NONCLUSTERED", "Index_RowVersion", ["RowVersion"]),
    Index("NONCLUSTERED", "Index_Expires", ["Expires"], include=["Id", "RowVersion"], filter_definition="([Expires] IS NOT NULL)"),
]


class SqlServerCatalog:
    """The sys views of one SQL Server instance: the connection's database and any others (`attach`)."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.next_object_id = SALES
        self.views_read: list[set[str]] = []  # per query: the sys views it read
        self.attach(None)

    @staticmethod
    def _schema(catalog: str | None) -> str:
        return '"sys"' if catalog is None else '"' + ("sys@" + catalog).replace('"', '""') + '"'

    def attach(self, catalog: str | None) -> None:
        """A database with its system types and schemas, and one MS-shipped table (as every database has)."""
        db = self._schema(catalog)
        self.db.execute(f"ATTACH DATABASE ':memory:' AS {db}")
        self.db.executescript(VIEWS.format(db=db))
        self.db.executemany(
            f"INSERT INTO {db}.types VALUES (?, ?, ?, 4, ?, ?, ?, 1, 0)", [(name, *row) for name, row in SYSTEM_TYPES.items()]
        )
        self.db.executemany(f"INSERT INTO {db}.schemas VALUES (?, ?, 1)", [("dbo", 1), ("guest", 2), ("sys", 4)])
        self.create_table("dbo", "MSreplication_options", [Column("optname", "sysname")], catalog=catalog, object_id=117575457)

    def create_table(
        self,
        schema: str,
        table: str,
        columns: Iterable[Column],
        indexes: Iterable[Index] = (),
        catalog: str | None = None,
        object_id: int | None = None,
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
        for column_id, column in enumerate(columns, start=1):
            system_type_id, user_type_id, max_length, precision, scale = SYSTEM_TYPES[column.type]
            column_ids[column.name] = column_id
            self.db.execute(
                f"INSERT INTO {db}.columns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (object_id, column.name, column_id, system_type_id, user_type_id,
                 max_length if column.max_length is None else column.max_length, precision, scale,
                 column.nullable, column.identity, column.computed),
            )  # fmt: skip
        indexes = list(indexes)
        if not any(index.type_desc == "CLUSTERED" for index in indexes):
            self.db.execute(f"INSERT INTO {db}.indexes VALUES (?, NULL, 0, 0, 'HEAP', 0, 0, 0, 0, 0, NULL)", (object_id,))
        next_id = 2
        for index in indexes:
            if index.type_desc == "CLUSTERED":
                index_id = 1
            else:
                index_id, next_id = next_id, next_id + 1
            self.db.execute(
                f"INSERT INTO {db}.indexes VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?)",
                (object_id, index.name, index_id, INDEX_TYPES[index.type_desc], index.type_desc, index.unique,
                 index.hypothetical, index.filter_definition is not None, index.filter_definition),
            )  # fmt: skip
            members = [(name, ordinal, False) for ordinal, name in enumerate(index.keys, start=1)]
            members += [(name, 0, True) for name in index.include]
            for index_column_id, (name, key_ordinal, included) in enumerate(members, start=1):
                self.db.execute(
                    f"INSERT INTO {db}.index_columns VALUES (?, ?, ?, ?, ?, 0, ?)",
                    (object_id, index_id, index_column_id, column_ids[name], key_ordinal, included),
                )
        return object_id

    def exec_driver_sql(self, sql: str) -> list[tuple]:
        """Run a query over the sys views, as a SQLAlchemy connection would on SQL Server."""
        read: set[str] = set()

        def local(match: re.Match) -> str:
            catalog = None if match[1] is None else match[1].replace("]]", "]")
            read.add(match[2].lower())
            return f"{self._schema(catalog)}.{match[2]}"

        rows = self.db.execute(SYS_VIEW.sub(local, sql)).fetchall()
        self.views_read.append(read)
        return rows


# SHAPE_TABLES: (object_id, schema, table)
TABLES = [(SALES, "dbo", "Sales")]


def queue_columns(headers=("nvarchar", -1), body_string=False):
    """SHAPE_COLUMNS rows of a queue: (object_id, name, type, max_length, precision, scale,
    is_nullable, is_identity, is_computed), in column_id order."""
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
        rows.append((SALES, "BodyString", "nvarchar", -1, 0, 0, True, False, True))
    return rows


def queue_indexes(rowversion="NONCLUSTERED", expires_filter="([Expires] IS NOT NULL)", expires=True):
    """SHAPE_INDEXES rows: (object_id, index_id, name, type_desc, is_unique, has_filter, filter_definition)."""
    rows = []
    if rowversion == "NONCLUSTERED":  # no clustered index: the table is a heap (index_id 0, left out by the query)
        rows.append((SALES, 2, "Index_RowVersion", "NONCLUSTERED", False, False, None))
    else:
        rows.append((SALES, 1, "Index_RowVersion", "CLUSTERED", False, False, None))
    if expires:
        rows.append((SALES, 3, "Index_Expires", "NONCLUSTERED", False, expires_filter is not None, expires_filter))
    return rows


def queue_index_columns(rowversion="NONCLUSTERED", include=("Id", "RowVersion"), expires=True):
    """SHAPE_INDEX_COLUMNS rows: (object_id, index_id, column, key_ordinal, is_included_column)."""
    rows = [(SALES, 2 if rowversion == "NONCLUSTERED" else 1, "RowVersion", 1, False)]
    if expires:
        rows.append((SALES, 3, "Expires", 1, False))
        rows += [(SALES, 3, column, 0, True) for column in include]
    return rows
