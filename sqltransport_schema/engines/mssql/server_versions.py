"""The oldest SQL Server each T-SQL construct the project writes runs on.

docs/sql-server-versions.md states the minimum SQL Server of each transport release and each
command; tests/test_sql_server_versions.py derives each from what the command emits, with these
constructs, and holds the table to it. Facts from Microsoft's T-SQL reference: OPENJSON (2016,
database compatibility level 130), JSON_VALUE and ISJSON (2016), THROW (2012), filtered indexes
and datetime2/datetimeoffset (2008), TRY/CATCH, (max) types, OUTPUT and sp_getapplock (2005)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

CONSTRUCTS: tuple[tuple[str, int, re.Pattern[str]], ...] = (
    ("OPENJSON", 2016, re.compile(r"\bOPENJSON\s*\(", re.I)),
    ("JSON_VALUE / ISJSON", 2016, re.compile(r"\b(JSON_VALUE|ISJSON)\s*\(", re.I)),
    ("THROW", 2012, re.compile(r"\bTHROW\b", re.I)),
    (
        "filtered index",
        2008,
        re.compile(r"CREATE\s+(UNIQUE\s+)?(NONCLUSTERED\s+)?INDEX\s+\S+\s+ON\s+\S+\s*\([^)]*\)\s*(INCLUDE\s*\([^)]*\)\s*)?WHERE\b", re.I),
    ),
    ("datetime2 / datetimeoffset", 2008, re.compile(r"\b(datetime2|datetimeoffset)\b", re.I)),
    ("TRY/CATCH, (max) types, OUTPUT, sp_getapplock", 2005, re.compile(r"\bBEGIN\s+TRY\b|\(max\)|\bOUTPUT\b|\bsp_getapplock\b", re.I)),
)
OLDEST = 2005  # what the transport's oldest scripts need: nvarchar(max), varbinary(max)


def minimum(texts: Iterable[str]) -> tuple[int, list[str]]:
    """The oldest SQL Server that runs every text, and the constructs that need exactly that one."""
    found = [(name, version) for text in texts for name, version, pattern in CONSTRUCTS if pattern.search(text)]
    oldest = max([version for _, version in found], default=OLDEST)
    return oldest, sorted({name for name, version in found if version == oldest})
