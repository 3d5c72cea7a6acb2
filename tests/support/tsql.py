"""T-SQL as the tests read it: a tokenizer, sqlfluff's tsql parser, and the hostile-name quoting checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import pytest

from sqltransport_schema.schema import TableName


# =========================================================================== tokenizer
class SqlTokenError(AssertionError):
    pass


@dataclass(frozen=True)
class Tok:
    kind: str  # ident ([bracketed]), string ('...' or N'...'), word, number, comment, punct
    value: str  # ident/string: the unescaped content; otherwise the raw text
    raw: str


_WORD = re.compile(r"[^\W\d][\w@#$]*|[@#][\w@#$]*")


_NUMBER = re.compile(r"\d+")


def _delimited(sql: str, start: int, close: str) -> tuple[str, int]:
    """Content of a delimited token whose opening delimiter ends before `start`; doubling escapes `close`."""
    parts, j = [], start
    while True:
        k = sql.find(close, j)
        if k < 0:
            raise SqlTokenError(f"unterminated {close!r}-delimited token at {start}: {sql[start - 1 : start + 60]!r}")
        if sql.startswith(close * 2, k):
            parts.append(sql[j:k] + close)
            j = k + 2
            continue
        parts.append(sql[j:k])
        return "".join(parts), k + 1


def tokenize(sql: str) -> list[Tok]:
    """A small T-SQL tokenizer: bracketed identifiers and string literals with their doubling escapes."""
    out, i, n = [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif c == "[":
            value, j = _delimited(sql, i + 1, "]")
            out.append(Tok("ident", value, sql[i:j]))
            i = j
        elif c == "'" or (c in "nN" and sql.startswith("'", i + 1)):
            opening = i + (1 if c == "'" else 2)
            value, j = _delimited(sql, opening, "'")
            out.append(Tok("string", value, sql[i:j]))
            i = j
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(Tok("comment", sql[i:j], sql[i:j]))
            i = j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                raise SqlTokenError(f"unterminated /* comment at {i}")
            out.append(Tok("comment", sql[i : j + 2], sql[i : j + 2]))
            i = j + 2
        elif (m := _WORD.match(sql, i)) or (m := _NUMBER.match(sql, i)):
            out.append(Tok("word" if not m.group().isdigit() else "number", m.group(), m.group()))
            i = m.end()
        else:
            out.append(Tok("punct", c, c))
            i += 1
    return out


def residue(sql: str, comments: bool = True) -> str:
    """The text left once every quoted identifier and every string literal (and comment, unless asked) is taken out."""
    dropped = ("ident", "string") if comments else ("ident", "string", "comment")
    return " ".join(t.raw for t in tokenize(sql) if t.kind not in dropped)


# Words that begin a new statement at parenthesis depth 0 in the creation scripts.
_STATEMENT_START = {"if", "return", "exec", "begin", "end", "create", "alter", "drop", "throw", "insert", "set", "declare"}


def normalized_tokens(sql: str) -> list[str]:
    """Whitespace collapsed, case-folded, brackets removed ([x] -> x); literals kept (case-folded)."""
    return [(t.value if t.kind == "ident" else t.raw).casefold() for t in tokenize(sql) if t.kind != "comment"]


def normalized(sql: str) -> str:
    return " ".join(normalized_tokens(sql))


def statements(sql: str) -> list[str]:
    """Normalised statements; a `;` ends a statement and is dropped (so trailing semicolons never matter)."""
    result, current, depth = [], [], 0
    for token in normalized_tokens(sql):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        if token == ";" and depth == 0:
            if current:
                result.append(" ".join(current))
            current = []
            continue
        if depth == 0 and token in _STATEMENT_START and current:
            result.append(" ".join(current))
            current = []
        current.append(token)
    if current:
        result.append(" ".join(current))
    return result


# =========================================================================== sqlfluff (tsql)
# Constructs of valid T-SQL that sqlfluff's tsql dialect cannot parse: substring of the
# batch -> reason. Empty: with sqlfluff 4.5 every batch the engine emits parses.
SQLFLUFF_GAPS: dict[str, str] = {}


@cache
def _linter():
    from sqlfluff.core import FluffConfig, Linter

    return Linter(config=FluffConfig(overrides={"dialect": "tsql"}))


def parse_problems(sql: str) -> list[str]:
    return list(_parse_problems(sql))


@cache  # the same batch recurs across versions and script kinds; parsing is most of these tests' time
def _parse_problems(sql: str) -> tuple[str, ...]:
    parsed = _linter().parse_string(sql)
    if parsed.tree is None:
        return ("no parse tree", *(str(v) for v in parsed.violations))
    problems = [f"unparsable: {seg.raw[:120]!r}" for seg in parsed.tree.recursive_crawl("unparsable")]
    return (*problems, *(str(v) for v in parsed.violations))


def assert_parses(
    sql: str, label: str, gaps_of: dict[str, str] = SQLFLUFF_GAPS, problems_of: Callable[[str], list[str]] = parse_problems
) -> None:
    """sqlfluff parses `sql`, or it holds a construct of `gaps_of` (an xfail that fails once sqlfluff learns it)."""
    problems = problems_of(sql)
    gaps = [reason for construct, reason in gaps_of.items() if construct in sql]
    if gaps:
        if not problems:
            pytest.fail(f"{label}: allow-listed sqlfluff gap no longer fails; remove it from the gaps: {gaps}")
        pytest.xfail(f"{label}: known sqlfluff gap: {'; '.join(gaps)}")
    assert not problems, f"{label}: sqlfluff (tsql) cannot parse:\n" + "\n".join(problems) + "\n---\n" + sql


GO_LINE = re.compile(r"^GO[ \t]*$", re.M)


# =========================================================================== hostile names
HOSTILE_FRAGMENTS = [".", " ", "]", '"', "'", ";", "ä", "--", "/*", "*/", "{table}", "]]'; DROP TABLE x --"]


HOSTILE = [f"Alpha{fragment}Omega" for fragment in HOSTILE_FRAGMENTS] + ["Fäktura"]


MARKERS = ("alpha", "omega", "fäktura", "ä")


LEAKS = ("[", "]", "'", '"', "--", "/*", "*/", "{", "}")


def placements(name: str) -> list[TableName]:
    return [TableName(name, "dbo", "nsb"), TableName("T", name, "nsb"), TableName("T", "dbo", name), TableName(name, name, name)]


def check_no_escape(sql: str, label: str, allowed_identifiers: set, allowed_literals: set) -> None:
    left = residue(sql).casefold()
    for marker in MARKERS:
        assert marker not in left, f"{label}: {marker!r} escaped quoting: {left}"
    for leak in LEAKS:
        assert leak not in left, f"{label}: {leak!r} outside any identifier or literal: {left}"
    for token in tokenize(sql):
        assert token.kind != "comment", f"{label}: comment in emitted SQL: {token.raw!r}"
        if token.kind == "ident":
            assert token.value in allowed_identifiers, f"{label}: identifier {token.value!r} is no name part"
        elif token.kind == "string":
            assert token.value in allowed_literals, f"{label}: literal {token.value!r} is unexpected"
