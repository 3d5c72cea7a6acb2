"""MySQL and MariaDB: saga tables of SQL persistence only (seed 002, transport-facts §8).

There is no SQL transport layout for MySQL, so queue, delayed and subscription tables
are not deployed here (`saga_only`). A schema is a database: a table's schema, when
given, qualifies it as `database`.`table`; otherwise it lives in the connection's
database. MySQL commits DDL as it runs: a failed revision leaves the steps before the
failure applied (each step is idempotent or guarded, so running it again continues).
"""

from __future__ import annotations

from ..schema import Correlation, TableName, TableSpec
from ..versions import Profile
from .base import Engine

MAX_IDENTIFIER = 64
MAX_SIGNAL_MESSAGE = 128  # MySQL's MESSAGE_TEXT limit (MariaDB allows 512)


class MySQL(Engine):
    name = "mysql"
    dialect = "mysql"
    default_schema = None
    saga_only = True
    grants_unsupported = "grants are not generated for MySQL; grant SELECT, INSERT, UPDATE, DELETE on the saga tables"

    CORRELATION_TYPES = {
        "string": "varchar(200) character set utf8mb4",
        "datetime": "datetime",
        "int": "bigint(20)",
        "guid": "varchar(38) character set ascii",
    }
    CREATE_SAGA = """\
CREATE TABLE IF NOT EXISTS {table} (
    Id varchar(38) character set ascii NOT NULL,
    Metadata json NOT NULL,
    Data json NOT NULL,
    PersistenceVersion varchar(23) NOT NULL,
    SagaTypeVersion varchar(23) NOT NULL,
    Concurrency int NOT NULL,
    PRIMARY KEY (Id)
) DEFAULT CHARSET=utf8mb4"""
    # A unique index admits any number of NULLs on MySQL: sagas without a value never collide.
    ADD_CORRELATION = "ALTER TABLE {table} ADD COLUMN {column} {column_type}, ADD UNIQUE INDEX {index} ({column})"
    # SIGNAL needs a compound statement, which MySQL allows only in a routine: one is created,
    # called and dropped (dropped first too, should an earlier run have stopped at the CALL).
    GUARD_DROP = "DROP PROCEDURE IF EXISTS {procedure}"
    GUARD_CREATE = """\
CREATE PROCEDURE {procedure}()
BEGIN
    IF EXISTS (SELECT 1 FROM {table} WHERE {condition}) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = {message};
    END IF;
END"""
    GUARD_CALL = "CALL {procedure}()"
    GUARD_PROCEDURE = "sqltransport_saga_guard"
    DROP_CORRELATION = "ALTER TABLE {table} DROP INDEX {index}, DROP COLUMN {column}"
    DROP_TABLE = "DROP TABLE IF EXISTS {table}"
    EXISTING_COLUMNS = (
        "SELECT table_schema, table_name, column_name FROM information_schema.columns WHERE table_schema = DATABASE()"
    )

    def quote(self, identifier: str) -> str:
        return "`" + identifier.replace("`", "``") + "`"

    def literal(self, text: str) -> str:
        # backslash escapes in MySQL string literals (unless NO_BACKSLASH_ESCAPES): double them too
        return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        if name.schema is not None:
            return f"{self.quote(name.schema)}.{self.quote(name.table)}"
        return self.quote(name.table)

    def table_key(self, name: TableName) -> tuple:
        return (name.schema, name.table)  # catalogs do not apply

    def existing_columns(self, connection) -> dict[tuple, set[str]]:
        out: dict[tuple, set[str]] = {}
        for _schema, table, column in connection.exec_driver_sql(self.EXISTING_COLUMNS):
            out.setdefault(self.table_key(TableName(table)), set()).add(column.lower())
        return out

    def name_problems(self, name: TableName) -> list[tuple[str, str]]:
        return [
            (part, f"is {len(value)} characters long; MySQL names hold at most {MAX_IDENTIFIER}")
            for part, value in (("table", name.table), ("schema", name.schema))
            if value is not None and len(value) > MAX_IDENTIFIER
        ]

    def saga_name_problems(self, spec: TableSpec) -> list[str]:
        problems = super().saga_name_problems(spec)
        for c in spec.correlations:
            for what, value in (("column", self.correlation_column(c.name)), ("index", self.correlation_index(spec, c.name))):
                if len(value) > MAX_IDENTIFIER:
                    problems.append(f"{what} {value!r} is {len(value)} characters long; MySQL names hold at most {MAX_IDENTIFIER}")
        return problems

    def _saga_fields(self, spec: TableSpec, correlation: Correlation) -> dict:
        return {
            "table": self.qualified(spec.name),
            "column": self.quote(self.correlation_column(correlation.name)),
            "column_type": self.CORRELATION_TYPES[correlation.type],
            "index": self.quote(self.correlation_index(spec, correlation.name)),
        }

    # -- DDL ---------------------------------------------------------------------------
    def create_table(self, spec: TableSpec, profile: Profile) -> list[str]:
        return super().create_table(spec, profile) if self.holds(spec.kind) else []

    def create_saga(self, spec: TableSpec, profile: Profile | None = None) -> list[str]:
        batches = [self.CREATE_SAGA.format(table=self.qualified(spec.name))]
        for correlation in spec.correlations:
            batches += self.add_saga_correlation(spec, correlation)
        return batches

    def add_saga_correlation(self, spec: TableSpec, correlation: Correlation) -> list[str]:
        return [self.ADD_CORRELATION.format(**self._saga_fields(spec, correlation))]

    def backfill_message(self, spec: TableSpec, old: Correlation, new: Correlation) -> str:
        """The refusal, short enough for MESSAGE_TEXT (the full advice is in docs/sagas.md)."""
        full = self.backfill_refusal(spec, old, new)
        if len(full) <= MAX_SIGNAL_MESSAGE:
            return full
        short = (
            f"backfill {self.correlation_column(new.name)} (NULL in some rows) before dropping "
            f"{self.correlation_column(old.name)} of {spec.name.table}; see docs/sagas.md"
        )
        return short if len(short) <= MAX_SIGNAL_MESSAGE else short[: MAX_SIGNAL_MESSAGE - 3] + "..."

    def _guard(self, table: str, condition: str, message: str) -> list[str]:
        procedure = self.quote(self.GUARD_PROCEDURE)
        return [
            self.GUARD_DROP.format(procedure=procedure),
            self.GUARD_CREATE.format(procedure=procedure, table=table, condition=condition, message=self.literal(message)),
            self.GUARD_CALL.format(procedure=procedure),
            self.GUARD_DROP.format(procedure=procedure),
        ]

    def drop_saga_correlation(self, spec: TableSpec, correlation: Correlation, require: Correlation | None) -> list[str]:
        fields = self._saga_fields(spec, correlation)
        batches = []
        if require is not None:
            required = self.quote(self.correlation_column(require.name))
            batches += self._guard(fields["table"], f"{required} IS NULL", self.backfill_message(spec, correlation, require))
        return batches + [self.DROP_CORRELATION.format(**fields)]

    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        if not self.holds(spec.kind):
            return []
        table = self.qualified(spec.name)
        batches = []
        if not discard_messages:
            refusal = self.refusal(spec)
            if len(refusal) > MAX_SIGNAL_MESSAGE:
                refusal = f"refusing to drop saga table {spec.name.table}: it still holds sagas (see docs/sagas.md)"[:MAX_SIGNAL_MESSAGE]
            batches += self._guard(table, "TRUE", refusal)
        return batches + [self.DROP_TABLE.format(table=table)]
