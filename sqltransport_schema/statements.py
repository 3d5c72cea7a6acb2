"""Statements: readable SQL with @Name parameters, filled one way, turned into driver SQL once, run one way.

Each engine class holds its statement templates (every statement of an engine in
one place, SqlConstants-style); a template has {placeholders} for quoted
identifiers and @Name parameters, as the transport writes them. `fill` puts in what
an engine adds to a template (SQL fragments, lists of parameters) and keeps the
identifiers; `Statement.of` derives the parameters from the filled text. A
Statement keeps the template and the identifiers apart, so converting parameters
to a driver's style can never touch a table name. `run` and `run_many` are the one
executor: a Statement and named values on a DBAPI cursor, in the driver's style.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

# Result layouts of the statements that return messages; "Order" restores FIFO after a batch.
MESSAGE = ("Id", "Expired", "Headers", "Body")
MESSAGE_WITH_CORRELATION = ("Id", "CorrelationId", "ReplyToAddress", "Expired", "Headers", "Body")

_PARAM = re.compile(r"(?<![\w@])@([A-Za-z_]\w*)")
_DECLARED = re.compile(r"\bDECLARE\s+@(\w+)", re.IGNORECASE)
_FIELD = re.compile(r"\{\{|\}\}|\{(\w+)\}")  # a {name} placeholder; {{ and }} stay for the identifiers' fill
_NAMED = frozenset({"pyformat", "named"})  # driver styles that take the values as a mapping


@dataclass(frozen=True)
class Statement:
    name: str
    template: str
    identifiers: Mapping[str, str] = field(default_factory=dict)
    params: tuple[str, ...] = ()
    doc: str = ""
    columns: tuple[str, ...] = ()  # what each result column is, for statements that return messages
    # How the driver binds a parameter where its default would not do: (name, the driver's input size,
    # e.g. pyodbc's (SQL type, column size, digits)); `run` sets them (setinputsizes) around the statement.
    binds: tuple[tuple[str, Any], ...] = ()

    @cached_property
    def positions(self) -> dict[str, int]:
        """Result column name -> index (cached beside the frozen fields)."""
        return {name: i for i, name in enumerate(self.columns)}

    @classmethod
    def of(
        cls,
        name: str,
        template: str,
        identifiers: Mapping[str, str] | None = None,
        *,
        fragments: Mapping[str, str] | None = None,
        lists: Mapping[str, Iterable[str]] | None = None,
        doc: str = "",
        columns: tuple[str, ...] = (),
    ) -> Statement:
        """The template filled (`fill`) as a Statement whose parameters are the @Names of its text."""
        text = fill(template, fragments, lists)
        return cls(name, text, identifiers if identifiers is not None else {}, parameters_of(text), doc, columns)

    @cached_property
    def sql(self) -> str:
        """The statement as a DBA reads it: identifiers filled in, @Name parameters (made once)."""
        return self.template.format(**self.identifiers)

    def written(self, values: Mapping[str, str]) -> str:
        """The statement as an offline script writes it: each @Name parameter replaced by the SQL
        text of its value (a literal the engine made), identifiers filled in last."""
        known = set(self.params)
        text = _PARAM.sub(
            lambda m: values[m.group(1)].replace("{", "{{").replace("}", "}}") if m.group(1) in known else m.group(0), self.template
        )
        return text.format(**self.identifiers)

    def input_sizes(self, paramstyle: str) -> list | None:
        """The driver's input sizes in the order it takes the parameters (None: no binds declared)."""
        if not self.binds:
            return None
        cache = self.__dict__.setdefault("_sizes", {})
        found = cache.get(paramstyle)
        if found is None:
            binds = dict(self.binds)
            found = cache[paramstyle] = [binds.get(name) for name in self.native(paramstyle)[1]]
        return found

    def native(self, paramstyle: str) -> tuple[str, tuple[str, ...]]:
        """(driver SQL, parameter names in the order a positional driver wants them), made once."""
        cache = self.__dict__.setdefault("_native", {})  # beside the frozen fields; on the hot path
        found = cache.get(paramstyle)
        if found is None:
            found = cache[paramstyle] = _native(self, paramstyle)
        return found


def fill(template: str, fragments: Mapping[str, str] | None = None, lists: Mapping[str, Iterable[str]] | None = None) -> str:
    """The one way a template is filled before it becomes a Statement: each {fragment} by its SQL text
    (an engine's `{now}`, a read's `{lock}`), each {list} by its parameters (`{topics}` ->
    `@Topic0, @Topic1`); every other {identifier} is kept, for the Statement to fill last."""
    texts = dict(fragments or {})
    texts.update((key, ", ".join("@" + name for name in names)) for key, names in (lists or {}).items())
    return _FIELD.sub(lambda m: texts.get(m.group(1), m.group(0)) if m.group(1) else m.group(0), template)


def parameters_of(template: str) -> tuple[str, ...]:
    """The @Name parameters of a template, in order of first use; the T-SQL variables it
    DECLAREs (@NOCOUNT, @DueAfter, @batch) are not parameters."""
    declared = set(_DECLARED.findall(template))
    return tuple(name for name in dict.fromkeys(_PARAM.findall(template)) if name not in declared)


def _convert(template: str, params: tuple[str, ...], paramstyle: str) -> tuple[str, list[str]]:
    order: list[str] = []
    known = set(params)

    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in known:
            return match.group(0)  # a T-SQL variable such as @NOCOUNT, not a parameter
        order.append(name)
        if paramstyle == "pyformat":
            return f"%({name})s"
        if paramstyle == "named":
            return f":{name}"
        if paramstyle in ("qmark", "format"):
            return "?" if paramstyle == "qmark" else "%s"
        raise ValueError(f"unsupported paramstyle {paramstyle!r}")

    pieces = []
    last = 0
    for match in _PARAM.finditer(template):
        text = template[last : match.start()]
        pieces.append(_escape(text, paramstyle))
        pieces.append(replace(match))
        last = match.end()
    pieces.append(_escape(template[last:], paramstyle))
    return "".join(pieces), order


def _escape(text: str, paramstyle: str) -> str:
    return text.replace("%", "%%") if paramstyle in ("pyformat", "format") else text


def _native(statement: Statement, paramstyle: str) -> tuple[str, tuple[str, ...]]:
    template, order = _convert(statement.template, statement.params, paramstyle)
    identifiers = {k: _escape(v, paramstyle) for k, v in statement.identifiers.items()}
    # identifiers go in last, so parameter conversion never touches a table name
    return template.format(**identifiers), tuple(order)


# -- the one executor ------------------------------------------------------------------------
def bind(statement: Statement, paramstyle: str, values: Mapping[str, Any] | None = None) -> tuple[str, Any]:
    """(driver text, its values): the named values as they are for a driver that takes a mapping,
    else a tuple in the text's order; (the DBA's text, None) for a statement without parameters,
    which runs as it reads (a driver parses placeholders, and %%, only where values are given)."""
    sql, order = statement.native(paramstyle)
    if not order:
        return statement.sql, None
    if paramstyle in _NAMED:
        return sql, values if values is not None else {}
    return sql, tuple(values[name] for name in order)


def run(cursor: Any, statement: Statement, paramstyle: str, values: Mapping[str, Any] | None = None, **options: Any) -> Any:
    """Run a statement on a DBAPI cursor with its named values (`options`: the driver's own, such as
    psycopg's prepare); the cursor, for its rows."""
    sql, bound = bind(statement, paramstyle, values)
    if bound is None:
        cursor.execute(sql, **options)
        return cursor
    sizes = statement.input_sizes(paramstyle)
    if sizes is None:
        cursor.execute(sql, bound, **options)
        return cursor
    cursor.setinputsizes(sizes)  # kept by the cursor (pyodbc) until changed: cleared after this statement
    try:
        cursor.execute(sql, bound, **options)
    finally:
        cursor.setinputsizes(None)
    return cursor


def run_on(connection: Any, statement: Statement, values: Mapping[str, Any] | None = None) -> Any:
    """`run` on a SQLAlchemy connection (a migration's), through its driver: the same binding."""
    sql, bound = bind(statement, connection.dialect.paramstyle, values)
    return connection.exec_driver_sql(sql) if bound is None else connection.exec_driver_sql(sql, bound)


def run_many(cursor: Any, statement: Statement, paramstyle: str, rows: Sequence, fields: tuple[str, ...] | None = None) -> None:
    """Run a statement once per row in one executemany: rows of named values (mappings), or tuples
    of the values of `fields` in that order, passed on untouched where the driver's order is the
    same (no Python per row)."""
    if not rows:
        return
    sql, order = statement.native(paramstyle)
    if fields is not None:
        if paramstyle in _NAMED:
            rows = [dict(zip(fields, row)) for row in rows]
        elif order != fields:
            at = [fields.index(name) for name in order]
            rows = [tuple(row[i] for i in at) for row in rows]
    elif paramstyle not in _NAMED:
        rows = [tuple(row[name] for name in order) for row in rows]
    sizes = statement.input_sizes(paramstyle)
    if sizes is None:
        cursor.executemany(sql, rows)
        return
    cursor.setinputsizes(sizes)
    try:
        cursor.executemany(sql, rows)
    finally:
        cursor.setinputsizes(None)
