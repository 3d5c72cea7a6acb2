"""The one way a template is filled (statements.fill, Statement.of) and the one executor (run, run_many):
fragments and parameter lists go in, identifiers stay for the Statement, values are bound in the
driver's style, and a statement without parameters runs as the DBA reads it."""

from __future__ import annotations

from sqltransport_schema.statements import Statement, bind, fill, run, run_many


class Cursor:
    """Records what a DBAPI cursor was asked to run."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def execute(self, sql, *args, **options):
        self.calls.append(("execute", sql, *args, options))
        return self

    def executemany(self, sql, rows):
        self.calls.append(("executemany", sql, list(rows)))


def test_fill_puts_in_fragments_and_lists_and_keeps_identifiers_and_escapes():
    template = "SELECT {columns} FROM {table}{lock} WHERE Topic IN ({topics}) AND x = '{{literal}}'"
    text = fill(template, {"lock": " FOR UPDATE", "columns": "Id"}, {"topics": ["Topic0", "Topic1"]})
    assert text == "SELECT Id FROM {table} FOR UPDATE WHERE Topic IN (@Topic0, @Topic1) AND x = '{{literal}}'"


def test_a_fragment_is_not_filled_again():
    """A fragment's own {placeholder} is an identifier for the Statement, not another fragment."""
    assert fill("{where}", {"where": " WHERE {column} IS NULL", "column": "no"}) == " WHERE {column} IS NULL"


def test_statement_of_derives_its_parameters_from_the_filled_text():
    statement = Statement.of(
        "insert",
        "INSERT INTO {table} VALUES ({values}, {now})",
        {"table": '"q"'},
        fragments={"now": "now()"},
        lists={"values": ["Id", "Body"]},
    )
    assert statement.params == ("Id", "Body")
    assert statement.sql == 'INSERT INTO "q" VALUES (@Id, @Body, now())'


def test_run_binds_named_values_in_the_drivers_style():
    statement = Statement.of("s", "SELECT 1 FROM {table} WHERE b = @B AND a = @A AND c LIKE '5%'", {"table": "t"})
    positional = run(Cursor(), statement, "format", {"A": 1, "B": 2, "Other": 3})
    assert positional.calls == [("execute", "SELECT 1 FROM t WHERE b = %s AND a = %s AND c LIKE '5%%'", (2, 1), {})]
    values = {"A": 1, "B": 2}
    named = run(Cursor(), statement, "named", values, prepare=True)
    assert named.calls == [("execute", "SELECT 1 FROM t WHERE b = :B AND a = :A AND c LIKE '5%'", values, {"prepare": True})]


def test_a_statement_without_parameters_runs_as_the_dba_reads_it():
    statement = Statement.of("count", "SELECT count(*) FROM {table} WHERE x LIKE '5%'", {"table": '"a%b"'})
    assert bind(statement, "pyformat") == (statement.sql, None)
    assert run(Cursor(), statement, "pyformat").calls == [("execute", statement.sql, {})]


def test_run_many_takes_mappings_or_tuples_of_fields():
    statement = Statement.of("s", "INSERT INTO t VALUES (@B, @A)")
    cursor = Cursor()
    run_many(cursor, statement, "qmark", [{"A": 1, "B": 2}])
    run_many(cursor, statement, "qmark", [(1, 2)], ("A", "B"))
    rows = [(2, 1)]
    run_many(cursor, statement, "qmark", rows, ("B", "A"))
    run_many(cursor, statement, "named", [(1, 2)], ("A", "B"))
    run_many(cursor, statement, "qmark", [])
    text = "INSERT INTO t VALUES (?, ?)"
    assert cursor.calls == [
        ("executemany", text, [(2, 1)]),
        ("executemany", text, [(2, 1)]),
        ("executemany", text, rows),
        ("executemany", "INSERT INTO t VALUES (:B, :A)", [{"A": 1, "B": 2}]),
    ]
