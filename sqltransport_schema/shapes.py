"""Engine-neutral shapes of tables: what a table should look like, or what the catalog says it looks like.

Engines build the expected shape of a table spec (`Dialect.expected_shape`) and read the live
shapes of every table from the catalog (`dialect.catalog.read_shapes`); `check.diff` compares the two.
Everything here is plain data: no database, no engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple


class Column(NamedTuple):
    """One column of a table kind as an engine's DDL creates it: the one source of an engine's
    columns, read by `check` (expected_shape), adoption (expected) and the pipeline's layouts.

    `name` is spelled as the DDL writes it; `type` as the catalog reads it back (normalised), or
    None where it varies by table or version (the engine's expected_shape supplies it)."""

    name: str
    type: str | None
    nullable: bool


def shape_columns(columns: tuple[Column, ...], **varying: str) -> dict[str, tuple[str, bool]]:
    """lower-case name -> (type, nullable), as a TableShape holds them: the columns of fixed type
    in DDL order, then those whose type varies, typed by `varying` (lower-case name -> type), in
    that order (the order `check` reports findings in)."""
    by_name = {c.name.lower(): c for c in columns}
    unset = {name for name, c in by_name.items() if c.type is None} - set(varying)
    if unset:
        raise ValueError(f"no type given for {', '.join(sorted(unset))}")
    out = {name: (c.type, c.nullable) for name, c in by_name.items() if c.type is not None}
    out.update((name, (type_, by_name[name].nullable)) for name, type_ in varying.items())
    return out


# SQL persistence's own tables, their columns named once in DDL order: each engine gives only the
# types (as its catalog reads them back), so a renamed column is renamed everywhere.
SAGA_COLUMN_NAMES = ("id", "metadata", "data", "persistenceversion", "sagatypeversion", "concurrency")
OUTBOX_COLUMN_NAMES = ("MessageId", "Dispatched", "DispatchedAt", "PersistenceVersion", "Operations")


def saga_shape_columns(*types: str, nullable: frozenset[str] = frozenset()) -> dict[str, tuple[str, bool]]:
    """A saga table's fixed columns as a TableShape holds them, typed in SAGA_COLUMN_NAMES order;
    the correlation columns vary by saga and are added per table."""
    if len(types) != len(SAGA_COLUMN_NAMES):
        raise ValueError(f"{len(SAGA_COLUMN_NAMES)} saga column types expected")
    return {name: (type_, name in nullable) for name, type_ in zip(SAGA_COLUMN_NAMES, types)}


def outbox_columns(*types: str, nullable: frozenset[str] = frozenset({"DispatchedAt"})) -> tuple[Column, ...]:
    """An outbox table's columns, typed in OUTBOX_COLUMN_NAMES order."""
    if len(types) != len(OUTBOX_COLUMN_NAMES):
        raise ValueError(f"{len(OUTBOX_COLUMN_NAMES)} outbox column types expected")
    return tuple(Column(name, type_, name in nullable) for name, type_ in zip(OUTBOX_COLUMN_NAMES, types))


@dataclass(frozen=True)
class IndexShape:
    """An index by structure. `name` is set only where our DDL names the index explicitly
    (`<table>_Due`, `<table>_Expires`); implicit indexes (primary keys, UNIQUE) are named by
    the engine and compared by structure alone. In a live shape, `name` is the index's name.

    `clustered` and `include` exist for engines that have them (SQL Server); their defaults
    (None: the engine has no such notion; no included columns) leave the other engines'
    comparisons and descriptions as they were."""

    columns: tuple[str, ...]  # lower case, in key order
    unique: bool = False
    predicate: str | None = None  # normalised with normalise_predicate
    name: str | None = None
    clustered: bool | None = None  # SQL Server: CLUSTERED (True) or NONCLUSTERED (False)
    include: tuple[str, ...] = ()  # SQL Server: INCLUDE columns, lower case, sorted
    # Only what differs from the engine's default, so expected shapes leave them unset: the access
    # method (None: btree), and options (SQL Server: "ignore_dup_key", "fillfactor 80", "disabled").
    # A descending key column is spelled "<column> desc" in `columns`.
    method: str | None = None
    options: tuple[str, ...] = ()

    def structure(self) -> tuple:
        return (self.columns, self.unique, self.predicate, self.clustered, self.include, self.method, self.options)

    def keys(self) -> tuple:
        """Everything but the predicate: what `index_columns` compares."""
        return (self.columns, self.unique, self.clustered, self.include, self.method, self.options)

    def describe(self) -> str:
        text = "unique " if self.unique else ""
        if self.clustered is not None:
            text += "clustered " if self.clustered else "nonclustered "
        text += "index"
        if self.name:
            text += f" {self.name}"
        if self.method:
            text += f" using {self.method}"
        text += " on (" + ", ".join(self.columns) + ")"
        if self.include:
            text += " include (" + ", ".join(self.include) + ")"
        if self.options:
            text += " with (" + ", ".join(self.options) + ")"
        if self.predicate:
            text += f" where {self.predicate}"
        return text


@dataclass
class TableShape:
    columns: dict[str, tuple[str, bool]] = field(default_factory=dict)  # lower-case name -> (normalised type, nullable)
    indexes: list[IndexShape] = field(default_factory=list)
    # Lower-case names of IDENTITY and computed columns (SQL Server); empty on the other engines.
    identity: set[str] = field(default_factory=set)
    computed: set[str] = field(default_factory=set)
    # What each column carries beyond its type (lower-case name -> text as the engine's catalog prints
    # it; a column without one is absent). An engine's expected shape and its catalog reader fill the
    # same ones, so engines that read none compare empty with empty.
    defaults: dict[str, str] = field(default_factory=dict)  # DEFAULT expression
    numbering: dict[str, str] = field(default_factory=dict)  # owned sequence, identity, AUTOINCREMENT
    generated: dict[str, str] = field(default_factory=dict)  # generated/computed expression
    collations: dict[str, str] = field(default_factory=dict)  # only a collation other than the default
    # Exact identifiers, where the engine's statements quote them so case matters (PostgreSQL);
    # empty where names compare without case. Compared for the columns the expected shape names.
    names: dict[str, str] = field(default_factory=dict)
    triggers: tuple[str, ...] = ()  # names, sorted; our DDL creates none

    def column_flags(self, column: str) -> tuple[str, ...]:
        return tuple(flag for flag, names in (("identity", self.identity), ("computed", self.computed)) if column in names)


_STRIP = re.compile(r"[\s\"'`\[\]()]+")

# The predicate of an index the catalog says is filtered but whose filter it does not show: SQL
# Server's sys.indexes.filter_definition is NULL to a login without VIEW DEFINITION (a monitoring
# login's), has_filter still 1. Not a normalised predicate (those hold no spaces), so it equals none;
# `check` compares such an index as filtered and says what it could not read.
UNKNOWN_PREDICATE = "(a filter this login cannot read: needs VIEW DEFINITION)"
# The same for a DEFAULT's or a computed column's definition (sys.default_constraints',
# sys.computed_columns' definition, NULL without VIEW DEFINITION): there, but not readable.
UNKNOWN_EXPRESSION = "(a definition this login cannot read: needs VIEW DEFINITION)"


def normalise_predicate(text: str | None) -> str | None:
    """`(expires IS NOT NULL)` and `Expires IS NOT NULL` both become `expiresisnotnull`."""
    if text is None:
        return None
    text = text.strip()
    if text[:5].lower() == "where" and (len(text) == 5 or not text[5].isalnum()):
        text = text[5:]
    return _STRIP.sub("", text.lower()) or None


def normalise_expression(text: str | None) -> str | None:
    """Expressions (defaults, generated columns) compare as predicates do: lower case, without
    quotes, brackets, parentheses or whitespace (`((0))` = `0`). None is no expression; one of
    nothing but those (the empty string: SQLite's and MySQL's `''`, SQL Server's `('')`) is `''`,
    an expression still: a DEFAULT '' added to a column is a difference."""
    if text is None:
        return None
    return normalise_predicate(text) or "''"


def normalise_type(text: str) -> str:
    """Lower case, single spaces, no space before a parenthesis."""
    return re.sub(r"\s+", " ", text.strip().lower()).replace(" (", "(")


def where_clause(create_index_sql: str | None) -> str | None:
    """The predicate of a CREATE INDEX statement (text after a top-level WHERE), or None.

    Quoted identifiers and strings are skipped, so a table named "a where b" is no WHERE."""
    if not create_index_sql:
        return None
    sql = create_index_sql
    closers = {'"': '"', "'": "'", "`": "`", "[": "]"}
    i, depth, n = 0, 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in closers:
            end = closers[ch]
            i += 1
            while i < n:
                if sql[i] == end:
                    if end != "]" and i + 1 < n and sql[i + 1] == end:  # doubled quote
                        i += 2
                        continue
                    break
                i += 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and sql[i : i + 5].lower() == "where" and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            after = sql[i + 5 : i + 6]
            if not after or not (after.isalnum() or after == "_"):
                return sql[i + 5 :].strip() or None
        i += 1
    return None
