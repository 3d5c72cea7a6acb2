"""SQL Server: every transport release 3.1.0-9.1.0 writes the statements upstream's release writes.

Sources of truth (workplace documents, copied into tests/fixtures/ and tests/conformance/; tests/fixtures/manifest.json
names each source):
- upstream-conformance.md §2, the release matrix (tests/fixtures/upstream_conformance_s2.md): which
  variant of each statement every release has. Releases with the same letter must print the same
  text, releases with different letters different texts, and a `-` no statement at all. This
  reaches every release, including those between the digested ones.
- tests/conformance/digests.json: sha256 digests of upstream's normalised texts for a set of
  releases. tests/test_conformance.py runs the checker over the public commands; here the two
  statements the checker cannot reach are compared directly: the send without Recoverable (the
  checker lists it as "not rendered") and the nonclustered RowVersion check (the digests name no
  project statement for it).
Nothing below is computed from sqltransport_schema.versions.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from sqltransport_schema.engines.mssql import MSSQL
from sqltransport_schema.schema import Kind, TableName, TableSpec
from sqltransport_schema.versions import profile

from .support.seeds import FIXTURES

HERE = Path(__file__).resolve().parent
MATRIX = FIXTURES / "upstream_conformance_s2.md"
DIGESTS = HERE / "conformance" / "digests.json"
ENGINE = MSSQL()

# upstream-conformance §0, "Release order": every SQL Server transport tag from 3.1.0 on.
RELEASES = (
    [f"3.1.{p}" for p in range(7)] + ["4.0.0"] + [f"4.1.{p}" for p in range(5)] + [f"4.3.{p}" for p in range(3)]
    + [f"5.0.{p}" for p in (1, 2, 3)] + ["6.0.0", "6.0.1", "6.1.1", "6.1.2", "6.2.0"] + [f"6.3.{p}" for p in range(1, 9)]
    + [f"7.0.{p}" for p in range(14)] + ["8.0.0"] + [f"8.1.{p}" for p in range(14)] + [f"9.0.{p}" for p in range(3)]
    + ["9.1.0"]
)  # fmt: skip

# matrix column -> the project's statement (DDL columns: the engine's creation method)
COLUMN_STATEMENT = {
    "send": "send",
    "send without Recoverable": "send_norec",
    "receive": "receive",
    "peek": "peek",
    "purge_expired": "purge_expired",
    "store_delayed": "store_delayed",
    "move_due_delayed": "move_due_delayed",
    "check_expires_index": "check_expires_index",
    "nonclustered RowVersion check": "check_rowversion_index",
    "check_recoverable_column": "check_recoverable_column",
}
DDL_COLUMNS = ("create_queue", "create_delayed", "create_subscriptions", "add_body_string")


def vkey(tag: str) -> tuple[int, ...]:
    return tuple(int(x) for x in tag.split("."))


def expand(cell: str) -> list[str]:
    """A matrix row's releases ("6.1.1-6.2.0", "3.1.6") as the tags they cover."""
    first, _, last = cell.partition("-")
    last = last or first
    return [r for r in RELEASES if vkey(first) <= vkey(r) <= vkey(last)]


def matrix() -> tuple[list[str], dict[str, dict[str, str]]]:
    rows = [line for line in MATRIX.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    out: dict[str, dict[str, str]] = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for release in expand(cells[0]):
            out[release] = dict(zip(header[1:], cells[1:]))
    return header[1:], out


def test_the_matrix_covers_every_release():
    assert MATRIX.read_text(encoding="utf-8").startswith("## 2. SQL Server release matrix\n")
    columns, by_release = matrix()
    assert sorted(by_release, key=vkey) == RELEASES
    assert set(columns) == set(COLUMN_STATEMENT) | set(DDL_COLUMNS)


def rendered(release: str) -> dict[str, str]:
    """Every text of one release, rendered with the checker's names; absent statements left out."""
    prof = profile(release)
    queue = TableName("Sales", "dbo", "nservicebus")
    statements = ENGINE.runtime_statements(
        prof, queue, delayed=TableName("Sales.Delayed", "dbo", "nservicebus"),
        subscriptions=TableName("SubscriptionRouting", "dbo", "nservicebus") if prof.subscriptions else None,
        peek_batch_size=1000,
    )  # fmt: skip
    out = {column: statements[name].sql for column, name in COLUMN_STATEMENT.items() if name in statements}

    out["create_queue"] = "\nGO\n".join(ENGINE.create_table(TableSpec(Kind.QUEUE, queue), prof))
    out["create_delayed"] = "\nGO\n".join(
        ENGINE.create_table(TableSpec(Kind.DELAYED, TableName("Sales.Delayed", "dbo", "nservicebus")), prof)
    )
    if prof.subscriptions:
        spec = TableSpec(Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting", "dbo", "nservicebus"))
        out["create_subscriptions"] = "\nGO\n".join(ENGINE.create_table(spec, prof))
    if prof.body_string:
        out["add_body_string"] = "\nGO\n".join(ENGINE.add_body_string(TableSpec(Kind.QUEUE, queue), prof))
    return out


@pytest.mark.parametrize("column", list(COLUMN_STATEMENT) + list(DDL_COLUMNS))
def test_every_release_has_the_matrix_variant(column):
    _, by_release = matrix()
    text_of: dict[str, str] = {}  # variant letter -> the text of its first release
    letter_of: dict[str, str] = {}  # text -> its letter
    for release in RELEASES:
        letter = by_release[release][column]
        text = rendered(release).get(column)
        if letter == "-":
            assert text is None, f"{column} {release}: upstream has none, the project prints\n{text}"
            continue
        assert text is not None, f"{column} {release}: variant {letter} missing"
        if letter in text_of:
            assert text == text_of[letter], f"{column} {release}: variant {letter} differs from its other releases"
        else:
            assert text not in letter_of, f"{column} {release}: variant {letter} is the text of {letter_of.get(text)}"
            text_of[letter], letter_of[text] = text, letter


TOKEN = re.compile(r"\w+|[^\w\s]")


def digest(sql: str) -> str:
    tokens = [t.lower() for t in TOKEN.findall(sql)]
    if tokens and tokens[-1] == ";":
        tokens.pop()
    return hashlib.sha256(" ".join(tokens).encode("utf-8")).hexdigest()


UNREACHED = {  # upstream constant -> project statement the checker cannot compare
    "SendText": "send_norec",  # 7.0.0-8.0.0: SendText is the send without Recoverable
    "SendTextWithoutRecoverable": "send_norec",
    "CheckIfNonClusteredRowVersionIndexIsPresent": "check_rowversion_index",
}


def unreached_cases() -> list[tuple[str, str, str]]:
    engines = json.loads(DIGESTS.read_text(encoding="utf-8"))["engines"]["mssql"]
    return [
        (release, constant, UNREACHED[constant])
        for release, constants in engines.items()
        for constant, entry in constants.items()
        if constant in UNREACHED and (constant != "SendText" or entry["project"] == "send_norec")
    ]


@pytest.mark.parametrize("release,constant,name", unreached_cases())
def test_statements_the_checker_cannot_reach_equal_upstream(release, constant, name):
    entry = json.loads(DIGESTS.read_text(encoding="utf-8"))["engines"]["mssql"][release][constant]
    statements = ENGINE.runtime_statements(profile(release), TableName("Sales", "dbo", "nservicebus"), peek_batch_size=1000)
    sql = statements[name].sql
    if name in NATIONAL_LITERAL:  # the documented deviation (docs/fidelity.md): N'...' where upstream writes '...'
        assert "OBJECT_ID(N'" in sql
        sql = sql.replace("OBJECT_ID(N'", "OBJECT_ID('")
    assert digest(sql) == entry["sha256"], f"{name} {release}:\n{statements[name].sql}"


# The start-up checks name the queue as N'...' where upstream writes '...' (docs/fidelity.md).
NATIONAL_LITERAL = {"check_expires_index", "check_rowversion_index", "check_headers_type"}


def test_start_up_checks_differ_from_upstream_only_by_the_national_literal():
    """conformance/check.py counts these as differing; each differs by the N of its one literal, nothing else."""
    digests = json.loads(DIGESTS.read_text(encoding="utf-8"))["engines"]["mssql"]
    constants = {"CheckIfExpiresIndexIsPresent": "check_expires_index", "CheckHeadersColumnType": "check_headers_type"}
    compared = 0
    for release, entries in digests.items():
        for constant, name in constants.items():
            if constant not in entries or entries[constant].get("project") != name:
                continue
            sql = ENGINE.runtime_statements(profile(release), TableName("Sales", "dbo", "nservicebus"), peek_batch_size=1000)[name].sql
            assert sql.count("OBJECT_ID(N'") == 1 and digest(sql) != entries[constant]["sha256"], (release, name)
            assert digest(sql.replace("OBJECT_ID(N'", "OBJECT_ID('")) == entries[constant]["sha256"], (release, name)
            compared += 1
    assert compared == 28  # 14 releases' Expires index checks and 14 Headers checks (and 11 RowVersion checks above)


class FakeConnection:
    """Answers the start-up checks: counts and the Headers type, by statement."""

    def __init__(self, expires: int, rowversion: int, headers: str):
        self.answers = {"Expires": expires, "Index_Expires": expires, "RowVersion": rowversion,
                        "Index_RowVersion": rowversion, "Headers": headers}  # fmt: skip
        self.executed: list[str] = []

    def exec_driver_sql(self, sql: str):
        self.executed.append(sql)
        for marker in ("Index_RowVersion", "'RowVersion'", "Index_Expires", "'Expires'", "'Headers'"):
            if marker in sql:
                value = self.answers[marker.strip("'")]
                return type("Result", (), {"scalar": lambda self, v=value: v})()
        raise AssertionError(f"unexpected start-up statement:\n{sql}")


@pytest.mark.parametrize(
    "release,expires,rowversion,headers,expected,purges",
    [
        # a queue of 3.1-4.3.1 (clustered RowVersion) under 4.3.2: the transport warns, by name
        ("4.3.2", 1, 0, "nvarchar", ["does not contain non-clustered index 'Index_RowVersion'"], True),
        ("5.0.2", 1, 0, "nvarchar", [], True),  # 5.0.1-5.0.2 do not check
        ("6.0.0", 1, 0, "nvarchar", [], True),
        ("6.3.8", 0, 1, "nvarchar", ["does not contain index 'Index_Expires'"], True),
        ("9.1", 0, 0, "varchar", [
            "does not contain an index for column 'Expires'",
            "does not contain a non-clustered index for column 'RowVersion'",
            "non Unicode-compatible column (varchar)",
        ], True),
        ("9.1", 1, 1, "nvarchar", [], True),
        # 6.1.2+ tie the Expires check to the purge of expired messages (upstream-conformance §3)
        ("6.1.1", 0, 1, "nvarchar", ["does not contain index 'Index_Expires'"], True),
        ("6.1.1", 0, 1, "nvarchar", ["does not contain index 'Index_Expires'"], False),
        ("6.1.2", 0, 1, "nvarchar", [], True),  # 6.1.2-6.3.1 read their setting the wrong way round
        ("6.3.1", 0, 1, "nvarchar", ["does not contain index 'Index_Expires'"], False),
        ("6.3.2", 0, 1, "nvarchar", [], False),
        ("7.0", 0, 1, "nvarchar", [], False),
    ],
)  # fmt: skip
def test_start_up_checks_warn_as_the_transport_does(release, expires, rowversion, headers, expected, purges):
    connection = FakeConnection(expires, rowversion, headers)
    warnings = ENGINE.catalog.warnings(connection, [TableName("Sales", "dbo", "nservicebus")], profile(release), purges)
    assert len(warnings) == len(expected), warnings
    for warning, phrase in zip(warnings, expected):
        assert phrase in warning and "[nservicebus].[dbo].[Sales]" in warning
    # the checks read the connection's own sys views, as the transport does
    assert all(".sys." not in sql and "OBJECT_ID(N'[nservicebus].[dbo].[Sales]')" in sql for sql in connection.executed)


def test_the_7_0_checks_find_indexes_by_their_key_column():
    statements = ENGINE.runtime_statements(profile("9.1"), TableName("Sales", "dbo", "nservicebus"))
    for name, column in (("check_expires_index", "Expires"), ("check_rowversion_index", "RowVersion")):
        sql = statements[name].sql
        assert "ic.key_ordinal = 1" in sql and f"c.name = '{column}'" in sql and "Index_" not in sql
    assert statements["check_rowversion_index"].sql.rstrip().endswith("AND i.type = 2")
