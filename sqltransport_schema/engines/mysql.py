"""MySQL and MariaDB: saga tables of SQL persistence only (upstream-conformance §7).

There is no SQL transport layout for MySQL, so queue, delayed and subscription tables
are not deployed here (`saga_only`). A schema is a database: a table's schema, when
given, qualifies it as `database`.`table`; otherwise it lives in the connection's
database. MySQL commits DDL as it runs: a failed revision leaves the steps before the
failure applied (each step is idempotent or guarded, so running it again continues).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .. import errors
from ..schema import Correlation, Kind, TableName, TableSpec
from ..shapes import IndexShape, TableShape, normalise_type, outbox_columns, saga_shape_columns, shape_columns
from ..versions import Profile
from .base import Dialect

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.engine import Connection

MAX_IDENTIFIER = 64
MAX_SIGNAL_MESSAGE = 128  # MySQL's MESSAGE_TEXT limit (MariaDB allows 512)


class MySQL(Dialect):
    name = "mysql"
    sqlalchemy_name = "mysql"
    drivers = ("pymysql", "MySQLdb", "mariadb")
    default_schema = None
    saga_only = True
    GUARD_ERROR_CODES = frozenset({1644})  # ER_SIGNAL_EXCEPTION: the guards' SIGNAL SQLSTATE '45000'
    PERMISSION_DENIED_CODES = frozenset({1142, 1143})  # ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR

    def bounded_connect(self, cparams: dict[str, Any], seconds: float) -> None:
        """PyMySQL: the connection, and every answer on it, within the bound (read_timeout: the
        socket's, MariaDB and MySQL alike, where their statement timeouts differ)."""
        cparams["connect_timeout"] = cparams["read_timeout"] = max(int(seconds + 0.999), 1)

    # =====================================================================================
    # -- identifiers and names ------------------------------------------------------------
    # =====================================================================================
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

    def name_problems(self, name: TableName) -> list[tuple[str, str]]:
        return [
            (part, f"is {len(value)} characters long; MySQL names hold at most {MAX_IDENTIFIER}")
            for part, value in (("table", name.table), ("schema", name.schema))
            if value is not None and len(value) > MAX_IDENTIFIER
        ]

    # =====================================================================================
    # -- columns: the saga tables' shapes our DDL gives them (check, the connection's database) ---
    # =====================================================================================
    # Types as information_schema.columns.column_type spells them, without integer display widths
    # (MariaDB prints int(11), MySQL 8 int); MariaDB's json is longtext with a json_valid CHECK.
    SAGA_SHAPE_COLUMNS = saga_shape_columns("varchar(38)", "json", "json", "varchar(23)", "varchar(23)", "int")

    def expected_shape(self, spec: TableSpec, profile: Profile) -> TableShape:
        if not self.holds(spec.kind):
            raise errors.Unsupported(f"{self.name} holds saga tables only")
        if spec.kind is Kind.OUTBOX:
            indexes = [IndexShape(("messageid",), unique=True)]
            indexes += [IndexShape((column.lower(),), name=index) for index, column in self.OUTBOX_INDEXES.items()]
            return TableShape(shape_columns(self.OUTBOX_COLUMNS), indexes, defaults=dict(self.OUTBOX_DEFAULTS))
        columns = dict(self.SAGA_SHAPE_COLUMNS)
        indexes = [IndexShape(("id",), unique=True)]
        for c in spec.correlations:
            column = self.correlation_column(c.name).lower()
            columns[column] = (self.Catalog.shape_type(self.CORRELATION_TYPES[c.type].split(" character set")[0]), True)
            indexes.append(IndexShape((column,), unique=True, name=self.correlation_index(spec, c.name)))
        return TableShape(columns, indexes)

    # =====================================================================================
    # -- DDL (saga tables only: queue, delayed and subscription operations emit nothing) ---
    # =====================================================================================
    def create_table(self, spec: TableSpec, profile: Profile) -> list[str]:
        return super().create_table(spec, profile) if self.holds(spec.kind) else []

    RENAME_INDEX = "ALTER TABLE {table} RENAME INDEX {old} TO {new}"

    def rename_index(self, table: TableName, old: str, new: str) -> list[str] | None:
        return [self.RENAME_INDEX.format(table=self.qualified(table), old=self.quote(old), new=self.quote(new))]

    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        if not self.holds(spec.kind):
            return []
        fields = self._saga_fields(spec)
        guard = ""
        if not discard_messages:
            refusal = self.refusal(spec)
            if len(refusal) > MAX_SIGNAL_MESSAGE:
                refusal = self.SHORT_DROP_REFUSALS[spec.kind].format(table=spec.name.table)
            guard = self._refuse_if(fields["table"], self.drop_guard_where(spec), refusal)
        return self._step(self.DROP_TABLE.format(guard=guard, **fields))

    # =====================================================================================
    # -- runtime statements ---------------------------------------------------------------
    # =====================================================================================
    # None of the transport's (saga-only); a saga table's statements are Dialect.saga_statements'.

    # =====================================================================================
    # -- sagas ----------------------------------------------------------------------------
    # =====================================================================================
    CORRELATION_TYPES = {
        "string": "varchar(200) character set utf8mb4",
        "datetime": "datetime",
        "int": "bigint(20)",
        "guid": "varchar(38) character set ascii",
    }
    # As SQL persistence's installer makes it: the whole table ascii (Id and the version columns);
    # string correlation columns carry utf8mb4 themselves.
    CREATE_SAGA = """\
CREATE TABLE IF NOT EXISTS {table} (
    Id varchar(38) NOT NULL,
    Metadata json NOT NULL,
    Data json NOT NULL,
    PersistenceVersion varchar(23) NOT NULL,
    SagaTypeVersion varchar(23) NOT NULL,
    Concurrency int NOT NULL,
    PRIMARY KEY (Id)
) DEFAULT CHARSET=ascii"""
    # Every step after CREATE TABLE IF NOT EXISTS runs in a procedure that is created, called and
    # dropped (dropped first too, should an earlier run have stopped at its CALL): MySQL allows
    # IF and SIGNAL only in routines, and its ALTER TABLE has no IF [NOT] EXISTS. The catalog
    # checks make each step skip what is done, so a revision stopped half way runs again.
    PROCEDURE = "sqltransport_saga_step"
    DROP_PROCEDURE = "DROP PROCEDURE IF EXISTS {procedure}"
    CREATE_PROCEDURE = "CREATE PROCEDURE {procedure}()\nBEGIN\n{body}\nEND"
    CALL_PROCEDURE = "CALL {procedure}()"
    COLUMN_EXISTS = (
        "SELECT 1 FROM information_schema.columns WHERE table_schema = {database} AND table_name = {table_literal} "
        "AND column_name = {column_literal}"
    )
    TABLE_EXISTS = "SELECT 1 FROM information_schema.tables WHERE table_schema = {database} AND table_name = {table_literal}"
    # The installer's steps: the column if missing, its type checked, the index if missing. It
    # compares column_type plus character set, so only the types with a character set (string,
    # guid) are ever refused; the same here. A unique index admits any number of NULLs on MySQL.
    ADD_CORRELATION = """\
    IF NOT EXISTS ({column_exists}) THEN
        ALTER TABLE {table} ADD COLUMN {column} {column_type};
    END IF;{verify}
    IF NOT EXISTS ({index_exists}) THEN
        CREATE UNIQUE INDEX {index} ON {table} ({column});
    END IF;"""
    VERIFY_CORRELATION_TYPE = """
    SET @found = ({column_charset_type});
    IF @found <> {column_type_literal} THEN
        SET @refusal = LEFT(CONCAT({message_head}, @found, {message_tail}), {max_message});
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = @refusal;
    END IF;"""
    COLUMN_CHARSET_TYPE = (
        "SELECT CONCAT(column_type, ' character set ', character_set_name) FROM information_schema.columns "
        "WHERE table_schema = {database} AND table_name = {table_literal} AND column_name = {column_literal}"
    )
    INDEX_EXISTS = (
        "SELECT 1 FROM information_schema.statistics WHERE table_schema = {database} AND table_name = {table_literal} "
        "AND index_name = {index_literal}"
    )
    # SQL persistence's runtime locks what it reads with FOR UPDATE.
    SAGA_GET_BY_ID = Dialect.SAGA_GET_BY_ID + "\nFOR UPDATE"
    SAGA_FIND = Dialect.SAGA_FIND + "\nFOR UPDATE"
    SAGA_FIND_BY_TRANSITIONAL = Dialect.SAGA_FIND_BY_TRANSITIONAL + "\nFOR UPDATE"
    DROP_CORRELATION = """\
    IF EXISTS ({column_exists}) THEN{guard}
        ALTER TABLE {table} DROP INDEX {index}, DROP COLUMN {column};
    END IF;"""
    REFUSE_IF = """
        IF EXISTS (SELECT 1 FROM {table}{where}) THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = {message};
        END IF;"""
    DROP_TABLE = """\
    IF EXISTS ({table_exists}) THEN{guard}
        DROP TABLE {table};
    END IF;"""

    # The refusal of a drop where the full one is over MESSAGE_TEXT's 128 characters.
    SHORT_DROP_REFUSALS = {
        Kind.SAGA: "refusing to drop saga table {table}: it still holds sagas (see docs/sagas.md)",
        Kind.OUTBOX: "refusing to drop outbox table {table}: it holds undispatched messages (see docs/outbox.md)",
    }

    # -- outbox tables (upstream-conformance §8): the whole table ascii, MessageId national ------
    OUTBOX_COLUMNS = outbox_columns("varchar(200)", "bit(1)", "datetime", "varchar(23)", "json")
    OUTBOX_DEFAULTS = {"dispatched": "b'0'"}  # CREATE_OUTBOX's DEFAULT 0 on a bit column, as column_default prints it
    CREATE_OUTBOX = """\
CREATE TABLE IF NOT EXISTS {table} (
    MessageId nvarchar(200) NOT NULL,
    Dispatched bit NOT NULL DEFAULT 0,
    DispatchedAt datetime,
    PersistenceVersion varchar(23) NOT NULL,
    Operations json NOT NULL,
    PRIMARY KEY (MessageId)
) DEFAULT CHARSET=ascii"""
    # The outbox's cleanup: MySQL's DELETE takes the batch as its LIMIT.
    OUTBOX_CLEANUP = """\
DELETE FROM {table}
WHERE Dispatched = true AND DispatchedAt < @DispatchedBefore
LIMIT @BatchSize"""
    CREATE_OUTBOX_INDEX = """\
    IF NOT EXISTS ({index_exists}) THEN
        CREATE INDEX {index} ON {table} ({column});
    END IF;"""

    def create_outbox(self, spec: TableSpec, profile: Profile | None = None) -> list[str]:
        """The table, then its indexes in one procedure step (MySQL's CREATE INDEX has no IF NOT EXISTS)."""
        fields = self._saga_fields(spec)
        steps = []
        for index, column in self.OUTBOX_INDEXES.items():
            index_exists = self.INDEX_EXISTS.format(index_literal=self.literal(index), **fields)
            quoted = {"index": self.quote(index), "column": self.quote(column)}
            steps.append(self.CREATE_OUTBOX_INDEX.format(index_exists=index_exists, **quoted, **fields))
        return [self.CREATE_OUTBOX.format(**fields)] + self._step("\n".join(steps))

    def saga_name_problems(self, spec: TableSpec) -> list[str]:
        problems = super().saga_name_problems(spec)
        for c in spec.correlations:
            for what, value in (("column", self.correlation_column(c.name)), ("index", self.correlation_index(spec, c.name))):
                if len(value) > MAX_IDENTIFIER:
                    problems.append(f"{what} {value!r} is {len(value)} characters long; MySQL names hold at most {MAX_IDENTIFIER}")
        return problems

    def _saga_fields(self, spec: TableSpec, correlation: Correlation | None = None) -> dict:
        database = self.literal(spec.name.schema) if spec.name.schema is not None else "DATABASE()"
        fields = {"table": self.qualified(spec.name), "database": database, "table_literal": self.literal(spec.name.table)}
        fields["table_exists"] = self.TABLE_EXISTS.format(**fields)
        if correlation is not None:
            column = self.correlation_column(correlation.name)
            fields.update(
                column=self.quote(column),
                column_type=self.CORRELATION_TYPES[correlation.type],
                index=self.quote(self.correlation_index(spec, correlation.name)),
            )
            literals = {
                "column_literal": self.literal(column),
                "index_literal": self.literal(self.correlation_index(spec, correlation.name)),
            }
            fields["column_exists"] = self.COLUMN_EXISTS.format(**literals, **fields)
            fields["index_exists"] = self.INDEX_EXISTS.format(**literals, **fields)
            fields["column_charset_type"] = self.COLUMN_CHARSET_TYPE.format(**literals, **fields)
        return fields

    def _step(self, body: str) -> list[str]:
        procedure = self.quote(self.PROCEDURE)
        return [
            self.DROP_PROCEDURE.format(procedure=procedure),
            self.CREATE_PROCEDURE.format(procedure=procedure, body=body),
            self.CALL_PROCEDURE.format(procedure=procedure),
            self.DROP_PROCEDURE.format(procedure=procedure),
        ]

    def _refuse_if(self, table: str, where: str, message: str) -> str:
        if len(message) > MAX_SIGNAL_MESSAGE:
            message = message[: MAX_SIGNAL_MESSAGE - 3] + "..."
        return self.REFUSE_IF.format(table=table, where=where, message=self.literal(message))

    def add_saga_correlation(self, spec: TableSpec, correlation: Correlation) -> list[str]:
        fields = self._saga_fields(spec, correlation)
        column_type = fields["column_type"]
        verify = ""
        if " character set " in column_type:
            # the short form of wrong_type_message: MESSAGE_TEXT holds 128 characters (see docs/sagas.md)
            head = f"saga table {spec.name.table}: {self.correlation_column(correlation.name)} is "
            tail = f", not {column_type}; see docs/sagas.md"
            verify = self.VERIFY_CORRELATION_TYPE.format(
                column_type_literal=self.literal(column_type),
                message_head=self.literal(head),
                message_tail=self.literal(tail),
                max_message=MAX_SIGNAL_MESSAGE,
                **fields,
            )
        return self._step(self.ADD_CORRELATION.format(verify=verify, **fields))

    def backfill_message(self, spec: TableSpec, old: Correlation, new: Correlation) -> str:
        """The refusal, short enough for MESSAGE_TEXT (the full advice is in docs/sagas.md)."""
        full = self.backfill_refusal(spec, old, new)
        if len(full) <= MAX_SIGNAL_MESSAGE:
            return full
        return (
            f"backfill {self.correlation_column(new.name)} (NULL in some rows) before dropping "
            f"{self.correlation_column(old.name)} of {spec.name.table}; see docs/sagas.md"
        )

    def drop_saga_correlation(self, spec: TableSpec, correlation: Correlation, require: Correlation | None) -> list[str]:
        fields = self._saga_fields(spec, correlation)
        guard = ""
        if require is not None:
            where = f" WHERE {self.quote(self.correlation_column(require.name))} IS NULL"
            guard = self._refuse_if(fields["table"], where, self.backfill_message(spec, correlation, require))
        return self._step(self.DROP_CORRELATION.format(guard=guard, **fields))

    # =====================================================================================
    # -- catalog reads (check, adopt, autogenerate): information_schema of the connection's database ---
    # =====================================================================================
    class Catalog(Dialect.Catalog):
        EXISTING_COLUMNS = "SELECT table_schema, table_name, column_name FROM information_schema.columns WHERE table_schema = DATABASE()"

        SHAPE_TABLES = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'"
        # Rows: (table, column, type, nullable, default, extra (auto_increment, VIRTUAL/STORED GENERATED),
        # generation expression). Collations are not compared here: MariaDB's json is longtext with
        # utf8mb4_bin, MySQL's has none, and each server's utf8mb4 default differs.
        SHAPE_COLUMNS = (
            "SELECT table_name, column_name, column_type, is_nullable, column_default, extra, generation_expression "
            "FROM information_schema.columns WHERE table_schema = DATABASE() ORDER BY table_name, ordinal_position"
        )
        # Rows: (table, index, non_unique, column, collation (A, D), index type (BTREE, HASH, ...))
        SHAPE_INDEXES = (
            "SELECT table_name, index_name, non_unique, column_name, collation, index_type FROM information_schema.statistics "
            "WHERE table_schema = DATABASE() ORDER BY table_name, index_name, seq_in_index"
        )
        SHAPE_TRIGGERS = "SELECT event_object_table, trigger_name FROM information_schema.triggers WHERE event_object_schema = DATABASE()"
        AUTO_INCREMENT = "auto_increment"

        @staticmethod
        def shape_type(column_type: str) -> str:
            text = re.sub(r"^(tinyint|smallint|mediumint|int|bigint)\(\d+\)", r"\1", normalise_type(column_type))
            return "json" if text == "longtext" else text

        def read_shapes(self, connection: Connection, catalogs: Iterable[str] = ()) -> dict[tuple, tuple[TableName, TableShape]]:
            table_key, shape_type = self.dialect.table_key, self.shape_type
            out: dict[tuple, tuple[TableName, TableShape]] = {}
            for (table,) in connection.exec_driver_sql(self.SHAPE_TABLES):
                out[table_key(TableName(table))] = (TableName(table), TableShape())
            for table, column, column_type, nullable, default, extra, expression in connection.exec_driver_sql(self.SHAPE_COLUMNS):
                entry = out.get(table_key(TableName(table)))
                if entry is None:
                    continue
                shape, key, extra = entry[1], column.lower(), (extra or "").lower()
                shape.columns[key] = (shape_type(column_type), nullable == "YES")
                if "generated" in extra and expression:
                    shape.generated[key] = f"{expression} {'stored' if 'stored' in extra else 'virtual'}"
                elif default is not None and default.upper() != "NULL":  # MariaDB prints no default as NULL
                    shape.defaults[key] = default
                if self.AUTO_INCREMENT in extra:
                    shape.numbering[key] = self.AUTO_INCREMENT
            found: dict[tuple, dict] = {}
            for table, index, non_unique, column, collation, index_type in connection.exec_driver_sql(self.SHAPE_INDEXES):
                method = None if (index_type or "BTREE").upper() == "BTREE" else index_type.lower()
                parts = found.setdefault(
                    (table_key(TableName(table)), index), {"unique": not int(non_unique), "columns": [], "method": method}
                )
                parts["columns"].append(column.lower() + (" desc" if collation == "D" else ""))
            for (key, index), parts in found.items():
                if key in out:
                    out[key][1].indexes.append(IndexShape(tuple(parts["columns"]), parts["unique"], None, index, method=parts["method"]))
            for table, trigger in connection.exec_driver_sql(self.SHAPE_TRIGGERS):
                entry = out.get(table_key(TableName(table)))
                if entry is not None:
                    entry[1].triggers = tuple(sorted((*entry[1].triggers, trigger)))
            return out

        def existing_columns(self, connection: Connection) -> dict[tuple, set[str]]:
            table_key = self.dialect.table_key
            out: dict[tuple, set[str]] = {}
            for _schema, table, column in connection.exec_driver_sql(self.EXISTING_COLUMNS):
                out.setdefault(table_key(TableName(table)), set()).add(column.lower())
            return out

    # =====================================================================================
    # -- grants (sqltransport-schema grants) ----------------------------------------------
    # =====================================================================================
    class Grants(Dialect.Grants):
        unsupported = "grants are not generated for MySQL; grant SELECT, INSERT, UPDATE, DELETE on the saga tables"
        unsupported_monitor = "grants are not generated for MySQL; a monitoring login needs SELECT on the saga tables, nothing more"

    # =====================================================================================
    # -- deployment scripts (alembic --sql) -----------------------------------------------
    # =====================================================================================
    class Script(Dialect.Script):
        def statement(self, statement: str, terminator: str) -> str:
            # the mysql client splits on ';': a procedure's body needs another delimiter
            if statement.startswith("CREATE PROCEDURE"):
                return f"DELIMITER //\n{statement} //\nDELIMITER {terminator.strip() or ';'}"
            return statement + terminator
