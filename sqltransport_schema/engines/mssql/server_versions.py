"""The oldest SQL Server each T-SQL construct the project writes runs on.

docs/sql-server-versions.md states the minimum SQL Server of each transport release and each
command; tests/test_sql_server_versions.py derives each from what the command emits, with these
constructs, and holds the table to it. Facts from Microsoft's T-SQL reference: OPENJSON (2016,
database compatibility level 130), JSON_VALUE and ISJSON (2016), THROW (2012), filtered indexes,
sys.indexes' has_filter and filter_definition, a DECLARE's initial value and datetime2/datetimeoffset
(2008), TRY/CATCH, (max) types, OUTPUT and sp_getapplock (2005).

`status` and `check` compare the server's own version (its major version, as SERVERPROPERTY
('ProductVersion') gives it) with what they need, and say so when it is older (`older_server`)."""

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
    ("variable initialiser (DECLARE @v type = value)", 2008, re.compile(r"\bDECLARE\s+@\w+\s+\w+\s*(\([^)]*\)\s*)?=", re.I)),
    ("sys.indexes' has_filter / filter_definition", 2008, re.compile(r"\b(has_filter|filter_definition)\b", re.I)),
    ("TRY/CATCH, (max) types, OUTPUT, sp_getapplock", 2005, re.compile(r"\bBEGIN\s+TRY\b|\(max\)|\bOUTPUT\b|\bsp_getapplock\b", re.I)),
)
OLDEST = 2005  # what the transport's oldest scripts need: nvarchar(max), varbinary(max)


def minimum(texts: Iterable[str]) -> tuple[int, list[str]]:
    """The oldest SQL Server that runs every text, and the constructs that need exactly that one."""
    found = [(name, version) for text in texts for name, version, pattern in CONSTRUCTS if pattern.search(text)]
    oldest = max([version for _, version in found], default=OLDEST)
    return oldest, sorted({name for name, version in found if version == oldest})


# The major version of SQL Server (SERVERPROPERTY('ProductVersion')) -> its release year
RELEASES = {8: 2000, 9: 2005, 10: 2008, 11: 2012, 12: 2014, 13: 2016, 14: 2017, 15: 2019, 16: 2022, 17: 2025}
# What each command that reads a server needs, and why (docs/sql-server-versions.md, "Commands")
COMMANDS = {
    "status": (2016, "JSON_VALUE and ISJSON read each failed message's NServiceBus.FailedQ header"),
    "check": (2008, "it reads sys.indexes' has_filter and filter_definition"),
}


def older_server(command: str, version_info: tuple | None) -> str | None:
    """What `command` says on a server older than it needs (None: new enough, or not known)."""
    if not version_info or command not in COMMANDS:
        return None
    needed, why = COMMANDS[command]
    major = int(version_info[0])
    year = RELEASES.get(major, RELEASES[8] if major < 8 else None)
    if year is None or year >= needed:
        return None
    found = ".".join(str(part) for part in version_info)
    return f"{command} needs SQL Server {needed} or later ({why}); this server is SQL Server {year} ({found})"
