"""The data pipeline's side of an engine: the neutral base of each engine's nested `Pipeline`.

An engine's pipeline section (`PostgreSQL.Pipeline`, `SQLite.Pipeline`, `MSSQL.Pipeline`; the
instance is `dialect.pipeline`) says how the pipeline connects (DBAPI and Spark's JDBC reader),
which table layout the engine's own DDL gives, and holds the statements: the ledger tables,
partition reads, writes and deletes, the reservation of destination order values. It lives with
the engine, so an engine's SQL is in one module, and the pipeline package stays engine-neutral.

Statements follow the project's one convention: templates filled by `statements.fill`, @Name
parameters in a `Statement`, run by `statements.run` in the driver's style (identifiers filled in
last, so quoting never meets parameter conversion). Values are always bound; table names reach the text only through the dialect's
`qualified`. Column names are the layout's, unquoted, as the transports write them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .. import errors
from ..schema import TableName
from ..statements import Statement, bind, run, run_many
from ..versions import LATEST, profile

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.engine import URL

    from .base import Dialect

MOVES = "sqltransport_pipeline_moves"
LEDGER = "sqltransport_pipeline_ledger"


class ClaimBusy(errors.Refused):
    """A partition's claim met a row a receiver holds (its batch in flight): claim it again passing over
    held rows."""


class Table(NamedTuple):
    """A table as the pipeline reads or writes it: its name, its layout's columns, the FIFO order
    column and the unique key source rows are deleted by (None: none), and where it is, described
    without credentials for messages."""

    name: TableName
    columns: tuple[str, ...]
    order: str | None
    key: str | None
    where: str


class MoveRow(NamedTuple):
    """A move's row in the ledger, as prepare() reserves it: the source snapshot's low and high order,
    the destination's reserved base, the partition and row counts."""

    move_id: str
    source: str
    destination: str
    kind: str
    low: int | None
    high: int | None
    base: int | None
    partitions: int
    rows: int
    state: str = "running"


class LedgerRow(NamedTuple):
    """A partition's row in the ledger, written in the destination's transaction with its rows."""

    move_id: str
    part: int
    lo: int | None
    hi: int | None
    rows: int
    checksum: str
    keys: bytes


class Route(NamedTuple):
    """Where a partition streams from and to: `source` (the queue, or the claim an earlier step
    committed), `dest`, the claim the rows go into as they stream (None: none), the partition's
    order range lo..hi, the source snapshot's low and high, the destination's reserved base."""

    source: Table
    dest: Table
    claim: Table | None
    lo: int
    hi: int
    low: int
    high: int
    base: int


def _parameters(row: MoveRow | LedgerRow) -> dict[str, Any]:
    """A ledger row's fields as its statement's named parameters (move_id -> MoveId)."""
    return {"".join(word.title() for word in name.split("_")): value for name, value in row._asdict().items()}


class Pipeline:
    """What every engine's pipeline section provides; engines without transport tables (saga-only)
    keep this base, which has no connection."""

    layout: str | None = None  # the pipeline layout this engine's own DDL gives its tables
    jdbc_jar: str | None = None  # the JDBC driver's jar (in Debian's /usr/share/java) and class
    jdbc_driver: str | None = None
    paramstyle = "qmark"  # the DBAPI driver's parameter style (Statement.native)
    # Capabilities the pipeline asks of an engine:
    takes_explicit_order = False  # the order column takes explicit values (reserve); else partitions run in order
    stream_layout: str | None = None  # queue partitions of this layout move server to server (stream_partition)
    backfills_sagas = False  # backfill of a saga's correlation column (saga_backfill)
    text_times = False  # times are stored as SQLite's text

    # Engine SQL fragments the templates name: column types of the ledger tables, the current time,
    # the row lock of a partition read, and how Spark's JDBC reader should see Id and Expires.
    FRAGMENTS = {
        "text": "text",
        "time": "timestamp",
        "blob": "bytea",
        "now": "CURRENT_TIMESTAMP",
        "lock": "",
        "range_lock": "",
        "id_text": "Id",
        "expires_read": "Expires",
    }

    # -- the ledger (destination database, default schema) -----------------------------------
    CREATE_MOVES = (
        "CREATE TABLE IF NOT EXISTS {moves} (move_id varchar(64) NOT NULL PRIMARY KEY, source {text} NOT NULL, "
        "destination {text} NOT NULL, kind varchar(20) NOT NULL, src_low bigint, src_high bigint, base bigint, "
        "partitions integer NOT NULL, rows_expected bigint NOT NULL, state varchar(20) NOT NULL, "
        "created_at {time} NOT NULL, finished_at {time})"
    )
    CREATE_LEDGER = (
        "CREATE TABLE IF NOT EXISTS {ledger} (move_id varchar(64) NOT NULL, part integer NOT NULL, "
        "lo bigint, hi bigint, rows integer NOT NULL, checksum varchar(64) NOT NULL, keys {blob}, "
        "source_deleted integer NOT NULL, committed_at {time} NOT NULL, PRIMARY KEY (move_id, part))"
    )
    FIND_OPEN_MOVE = (
        "SELECT move_id FROM {moves} WHERE source = @Source AND destination = @Destination AND state <> 'done' ORDER BY created_at"
    )
    GET_MOVE = "SELECT move_id, kind, src_low, src_high, base, partitions, rows_expected, state FROM {moves} WHERE move_id = @MoveId"
    INSERT_MOVE = (
        "INSERT INTO {moves} (move_id, source, destination, kind, src_low, src_high, base, partitions, rows_expected, state, "
        "created_at) VALUES (@MoveId, @Source, @Destination, @Kind, @Low, @High, @Base, @Partitions, @Rows, @State, {now})"
    )
    FINISH_MOVE = "UPDATE {moves} SET state = 'done', finished_at = {now} WHERE move_id = @MoveId"
    LEDGER_ROW = "SELECT rows, checksum, keys, source_deleted FROM {ledger} WHERE move_id = @MoveId AND part = @Part"
    INSERT_LEDGER = (
        "INSERT INTO {ledger} (move_id, part, lo, hi, rows, checksum, keys, source_deleted, committed_at) "
        "VALUES (@MoveId, @Part, @Lo, @Hi, @Rows, @Checksum, @Keys, 0, {now})"
    )
    MARK_DELETED = "UPDATE {ledger} SET source_deleted = 1 WHERE move_id = @MoveId AND part = @Part"
    LEDGER_TOTALS = "SELECT count(*), coalesce(sum(rows), 0), coalesce(sum(source_deleted), 0) FROM {ledger} WHERE move_id = @MoveId"
    LEDGER_CHECKSUMS = "SELECT part, rows, checksum FROM {ledger} WHERE move_id = @MoveId ORDER BY part"

    # -- source and destination tables ------------------------------------------------------
    BOUNDS = "SELECT min({order}), max({order}), count(*) FROM {table}"
    COUNT = "SELECT count(*) FROM {table}"
    EXISTS = "SELECT 1 FROM {table} WHERE 1 = 0"
    # a partition's rows, locked; rows a receiver holds are passed over ({range_lock}), left to it
    READ_RANGE = "SELECT {columns} FROM {table} WHERE {order} >= @Low AND {order} < @High AND {order} <= @Last ORDER BY {order}{range_lock}"
    READ_ALL = "SELECT {columns} FROM {table}{range_lock}"
    DELETE_KEY = "DELETE FROM {table} WHERE {key} = @Key"
    INSERT = "INSERT INTO {table} ({columns}) VALUES ({values})"  # {values}: @<column> for each column
    # archive: the read Spark's JDBC reader runs, one column list for every layout
    ARCHIVE_READ = "SELECT {id_text} AS id, {expires_read} AS expires, Headers AS headers, Body AS body, {order} AS seq FROM {table}"

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        moves, ledger = dialect.qualified(TableName(MOVES)), dialect.qualified(TableName(LEDGER))
        self._ledger_names = {
            "moves": moves,
            "ledger": ledger,
            "moves_literal": dialect.literal(moves),
            "ledger_literal": dialect.literal(ledger),
        }
        self._ledger: dict[str, Statement] = {}

    # -- statements -------------------------------------------------------------------------
    def statement(
        self,
        attribute: str,
        template: str | None = None,
        lists: dict[str, tuple[str, ...]] | None = None,
        fragments: dict[str, str] | None = None,
        **identifiers: str,
    ) -> Statement:
        """The class attribute's template (or `template`) as a Statement: the engine's fragments (and
        the caller's) and parameter `lists` filled in now (statements.fill), identifiers when the
        driver's text is made."""
        text = template if template is not None else getattr(self, attribute)
        return Statement.of(attribute.lower(), text, identifiers, fragments={**self.FRAGMENTS, **(fragments or {})}, lists=lists)

    def ledger_statement(self, attribute: str) -> Statement:
        found = self._ledger.get(attribute)
        if found is None:
            found = self._ledger[attribute] = self.statement(attribute, **self._ledger_names)
        return found

    def bind(self, statement: Statement, values: dict[str, Any] | None = None) -> tuple[str, tuple | None]:
        """(driver text, parameters in its order), or (text, None) for a statement without parameters
        (then the text is the DBA's: a driver parses placeholders only where parameters are given)."""
        return bind(statement, self.paramstyle, values)

    def execute(self, cursor: Any, statement: Statement, **values: Any) -> Any:
        return run(cursor, statement, self.paramstyle, values)

    def executemany(self, cursor: Any, statement: Statement, rows: list[tuple], fields: tuple[str, ...]) -> None:
        """Rows of values in `fields` order, in one executemany (statements.run_many)."""
        run_many(cursor, statement, self.paramstyle, rows, fields)

    def columns_text(self, columns: Iterable[str]) -> str:
        return ", ".join(columns)

    # -- connections ------------------------------------------------------------------------
    def connect_arguments(self, url: URL, timeout: float) -> tuple[Any, list, dict]:
        """(the DBAPI module, its connect's arguments and keywords) of a connection with explicit transaction
        control (`url`: a SQLAlchemy URL object), opened within `timeout` seconds where the driver can
        bound it: db.pipeline_connection opens it (the one way to a database)."""
        raise errors.UsageError(f"no pipeline connection for {url.get_backend_name()!r}")

    def opened(self, connection: Any) -> None:
        """A connection db.pipeline_connection has just opened, set up for the pipeline's statements."""

    def jdbc_url(self, url: URL) -> str:
        """The JDBC URL Spark reads this database through."""
        raise errors.UsageError(f"no JDBC driver for {self.dialect.name!r}")

    def database_key(self, url: URL) -> tuple:
        """Two URLs of this engine with the same key name one database."""
        return (url.host, url.port, url.database, url.username)

    # -- transactions -----------------------------------------------------------------------
    def begin(self, conn: Any, write: bool = False) -> None:
        """psycopg and pyodbc open transactions implicitly."""

    def commit(self, conn: Any) -> None:
        conn.commit()

    def rollback(self, conn: Any) -> None:
        conn.rollback()

    # -- the ledger --------------------------------------------------------------------------
    def ensure_ledger(self, conn: Any) -> None:
        self.begin(conn, write=True)
        cur = conn.cursor()
        self.execute(cur, self.ledger_statement("CREATE_MOVES"))
        self.execute(cur, self.ledger_statement("CREATE_LEDGER"))
        self.commit(conn)

    def blob(self, data: bytes) -> Any:
        return data

    def find_open_move(self, conn: Any, source: str, destination: str) -> str | None:
        found = self.execute(conn.cursor(), self.ledger_statement("FIND_OPEN_MOVE"), Source=source, Destination=destination).fetchone()
        return found[0] if found else None

    def get_move(self, conn: Any, move_id: str) -> tuple | None:
        return self.execute(conn.cursor(), self.ledger_statement("GET_MOVE"), MoveId=move_id).fetchone()

    def insert_move(self, conn: Any, move: MoveRow) -> None:
        self.execute(conn.cursor(), self.ledger_statement("INSERT_MOVE"), **_parameters(move))

    def finish_move(self, conn: Any, move_id: str) -> None:
        self.execute(conn.cursor(), self.ledger_statement("FINISH_MOVE"), MoveId=move_id)

    def ledger_row(self, conn: Any, move_id: str, part: int) -> tuple | None:
        """(rows, checksum, keys, source_deleted) of a committed partition, or None."""
        return self.execute(conn.cursor(), self.ledger_statement("LEDGER_ROW"), MoveId=move_id, Part=part).fetchone()

    def insert_ledger(self, conn: Any, row: LedgerRow) -> None:
        self.execute(conn.cursor(), self.ledger_statement("INSERT_LEDGER"), **_parameters(row._replace(keys=self.blob(row.keys))))

    def mark_deleted(self, conn: Any, move_id: str, part: int) -> None:
        self.execute(conn.cursor(), self.ledger_statement("MARK_DELETED"), MoveId=move_id, Part=part)

    def ledger_totals(self, conn: Any, move_id: str) -> tuple:
        """(partitions committed, rows, partitions whose source rows are deleted)."""
        return self.execute(conn.cursor(), self.ledger_statement("LEDGER_TOTALS"), MoveId=move_id).fetchone()

    def ledger_checksums(self, conn: Any, move_id: str) -> list[tuple]:
        return self.execute(conn.cursor(), self.ledger_statement("LEDGER_CHECKSUMS"), MoveId=move_id).fetchall()

    # -- source -------------------------------------------------------------------------------
    def _table(self, attribute: str, table: Table, template: str | None = None, lists: dict | None = None, **identifiers: str) -> Statement:
        return self.statement(attribute, template, lists, table=self.dialect.qualified(table.name), **identifiers)

    def bounds(self, conn: Any, table: Table) -> tuple:
        """(min, max) of the order column and the row count."""
        return self.execute(conn.cursor(), self._table("BOUNDS", table, order=table.order)).fetchone()

    def count(self, conn: Any, table: Table) -> int:
        return self.execute(conn.cursor(), self._table("COUNT", table)).fetchone()[0]

    def exists(self, conn: Any, table: Table) -> bool:
        """Whether the table exists (the caller rolls back: a failed statement spoils a transaction)."""
        try:
            self.execute(conn.cursor(), self._table("EXISTS", table))
            return True
        except Exception:
            return False

    def read_range(self, conn: Any, table: Table, lo: int, hi: int, high: int) -> Any:
        """A cursor over the rows with lo <= order < hi (and <= high, the snapshot's max), in order, locked."""
        statement = self._table("READ_RANGE", table, columns=self.columns_text(table.columns), order=table.order)
        return self.execute(conn.cursor(), statement, Low=lo, High=hi, Last=high)

    def read_all(self, conn: Any, table: Table) -> Any:
        return self.execute(conn.cursor(), self._table("READ_ALL", table, columns=self.columns_text(table.columns)))

    def delete_keys(self, conn: Any, table: Table, keys: list) -> int:
        if not keys:
            return 0
        statement = self._table("DELETE_KEY", table, key=table.key)
        cur = conn.cursor()
        self.executemany(cur, statement, [(k,) for k in keys], ("Key",))
        return int(cur.rowcount)  # the rows deleted (sqlite3 and pyodbc sum executemany's)

    # -- claims: a partition's rows taken out of the source into a table of their own ----------------
    # (pipeline/move.py) In the transaction that locks them, so no receiver sees them again, and
    # durably: a claim commits before the destination does, and is dropped after it.
    CLAIM_CREATE = "CREATE TABLE IF NOT EXISTS {claim} AS SELECT {columns} FROM {table} WHERE 1 = 0"
    CLAIM_COPY = "INSERT INTO {claim} ({columns}) SELECT {columns} FROM {table}{where}"
    CLAIM_DELETE = "DELETE FROM {table}{where}"
    CLAIM_RANGE = " WHERE {order} >= @Low AND {order} < @High AND {order} <= @Last"
    CLAIM_KEYS = "SELECT {key} FROM {table}"
    CLAIM_DROP = "DROP TABLE IF EXISTS {table}"

    def _claim_names(self, source: Table, claim: Table) -> dict[str, str]:
        return {
            "table": self.dialect.qualified(source.name),
            "claim": self.dialect.qualified(claim.name),
            "claim_literal": self.dialect.literal(self.dialect.qualified(claim.name)),
            "columns": self.columns_text(source.columns),
            "order": source.order or "",
        }

    def _claim_where(self, source: Table, lo: int | None) -> dict[str, str]:
        return {"where": self.CLAIM_RANGE if (source.order is not None and lo is not None) else ""}

    def claim(self, conn: Any, source: Table, claim: Table, lo: int | None, hi: int | None, high: int | None) -> int:
        """Take a partition's rows (lo <= order < hi, <= high; every row without a range) out of the
        source into `claim` (made with the source's columns when missing), in the caller's open write
        transaction; returns how many. Here: a copy, then the delete of the same range, exact under
        the write lock the caller's transaction holds (SQLite's BEGIN IMMEDIATE); engines whose
        receivers write concurrently claim in one statement."""
        names, fragments = self._claim_names(source, claim), self._claim_where(source, lo)
        cur = conn.cursor()
        self.execute(cur, self.statement("CLAIM_CREATE", **names))
        values = {"Low": lo, "High": hi, "Last": high}
        copied = self.execute(cur, self.statement("CLAIM_COPY", fragments=fragments, **names), **values).rowcount
        self.execute(cur, self.statement("CLAIM_DELETE", fragments=fragments, **names), **values)
        return int(copied)

    def claim_keys(self, conn: Any, claim: Table) -> list | None:
        """The keys a claim holds, or None when there is no such claim (the caller then rolls back)."""
        try:
            cur = self.execute(conn.cursor(), self._table("CLAIM_KEYS", claim, key=claim.key))
        except Exception:
            return None
        return [row[0] for row in cur.fetchall()]

    def drop_claim(self, conn: Any, claim: Table) -> None:
        self.execute(conn.cursor(), self._table("CLAIM_DROP", claim))

    def archive_read(self, table: Table) -> Statement:
        """The SELECT that archives a queue, without parameters: Spark's JDBC reader runs its `sql`
        as a subquery."""
        return self._table("ARCHIVE_READ", table, order=table.order)

    # -- destination ----------------------------------------------------------------------------
    def write_rows(self, conn: Any, table: Table, columns: tuple[str, ...], rows: list[tuple]) -> None:
        """Rows of values in `columns` order, in one executemany."""
        if not rows:
            return
        statement = self._table("INSERT", table, lists={"values": columns}, columns=self.columns_text(columns))
        self.executemany(conn.cursor(), statement, rows, tuple(columns))

    def reserve(self, conn: Any, table: Table, span: int) -> int:
        """Reserve `span` consecutive order values past everything the table holds or will be given."""
        raise errors.Unsupported(f"{self.dialect.name}: explicit order values are not supported; partitions run in order")

    # -- subscriptions: the runtime's own statements ---------------------------------------------
    def _subscription(self, name: str, table: Table) -> Statement:
        return self.dialect.runtime_statements(profile(LATEST), table.name, subscriptions=table.name)[name]

    def upsert_subscriptions(self, conn: Any, table: Table, rows: list[tuple]) -> None:
        """(QueueAddress, Endpoint, Topic) rows, through the runtime's subscribe (rerunning is harmless)."""
        self.executemany(conn.cursor(), self._subscription("subscribe", table), rows, ("QueueAddress", "Endpoint", "Topic"))

    def delete_subscriptions(self, conn: Any, table: Table, rows: list[tuple]) -> None:
        """(Endpoint, Topic) rows, through the runtime's unsubscribe."""
        self.executemany(conn.cursor(), self._subscription("unsubscribe", table), rows, ("Endpoint", "Topic"))

    # -- tenant placement: a shared saga/outbox table's rows carried to tenant databases (pipeline/tenants.py)
    # Persistence tables keep their quoted, case-kept column names and are keyed by one column (Id,
    # MessageId); rows are read and written by key, as they are (json columns read as their text).
    COLUMN_NAMES = "SELECT * FROM {table} WHERE 1 = 0"
    KEYED_SOURCE = "SELECT {key}, {source} FROM {table}"
    READ_KEY = "SELECT {columns} FROM {table} WHERE {key} = @Key{lock}"

    def column_names(self, conn: Any, table: TableName) -> tuple[str, ...]:
        """The table's columns as the catalog keeps them."""
        cur = self.execute(conn.cursor(), self.statement("COLUMN_NAMES", table=self.dialect.qualified(table)))
        return tuple(column[0] for column in cur.description)

    def keyed_sources(self, conn: Any, table: TableName, key: str, source: str) -> Any:
        """A cursor over (key, source column) of every row: what a row's tenant is read from."""
        q = self.dialect.quote
        statement = self.statement("KEYED_SOURCE", table=self.dialect.qualified(table), key=q(key), source=q(source))
        return self.execute(conn.cursor(), statement)

    def read_keyed(self, conn: Any, table: TableName, columns: tuple[str, ...], key: str, keys: list[str], lock: bool) -> dict[str, tuple]:
        """str(key) -> the row (`columns` order) for each key the table holds; lock: hold them until the
        transaction ends (SQLite: the write lock the caller's BEGIN IMMEDIATE took)."""
        q = self.dialect.quote
        names = {"table": self.dialect.qualified(table), "columns": ", ".join(map(q, columns)), "key": q(key)}
        statement = self.statement("READ_KEY", fragments=None if lock else {"lock": ""}, **names)
        cur = conn.cursor()
        found = {}
        for value in keys:
            row = self.execute(cur, statement, Key=value).fetchone()
            if row is not None:
                found[str(row[columns.index(key)])] = tuple(row)
        return found

    def insert_keyed(self, conn: Any, table: TableName, columns: tuple[str, ...], rows: list[tuple]) -> None:
        if rows:
            names = {"table": self.dialect.qualified(table), "columns": ", ".join(map(self.dialect.quote, columns))}
            fields = tuple(f"C{i}" for i in range(len(columns)))  # parameter names: a column name may not be one
            self.executemany(conn.cursor(), self.statement("INSERT", lists={"values": fields}, **names), rows, fields)

    def delete_keyed(self, conn: Any, table: TableName, key: str, keys: list[str]) -> None:
        if keys:
            statement = self.statement("DELETE_KEY", table=self.dialect.qualified(table), key=self.dialect.quote(key))
            self.executemany(conn.cursor(), statement, [(k,) for k in keys], ("Key",))

    def json_as_text(self, conn: Any) -> None:
        """Have the connection read json columns as their text, so a row is written back as it was read."""

    # -- backfill of a saga's correlation column (engines with backfills_sagas) --------------------
    # The read of the rows to fill, (id, data, concurrency), {where} its filter; the guarded update of
    # one row, @Value, @Id, @Concurrency, {guard} its guard: filled by `backfill_statements`.
    BACKFILL_READ: str | None = None
    BACKFILL_UPDATE: str | None = None
    BACKFILL_NULL = "{column} IS NULL"  # the guard (and the read's filter) unless overwriting
    BACKFILL_EVERY = "TRUE"  # the guard when overwriting

    def saga_column_type(self, conn: Any, table: TableName, column: str) -> str | None:
        """The column's type as the catalog prints it, or None when the table has no such column."""
        raise errors.Unsupported(f"backfill is not supported on {self.dialect.name}")

    def backfill_statements(self, table: TableName, column: str, column_type: str, overwrite: bool) -> tuple[Statement, Statement]:
        """(the read of the rows to fill, a subquery for Spark's JDBC reader without parameters; the
        update of one row, which leaves a saga an endpoint changed meanwhile, and unless overwriting
        a filled one, alone)."""
        if not self.backfills_sagas:
            raise errors.Unsupported(f"backfill is not supported on {self.dialect.name}")
        q = self.dialect.quote
        names = {"table": self.dialect.qualified(table), "column": q(column), "id": q("Id"), "data": q("Data")}
        names.update(concurrency=q("Concurrency"), type=column_type)
        where = {"where": "" if overwrite else " WHERE " + self.BACKFILL_NULL}
        guard = {"guard": self.BACKFILL_EVERY if overwrite else self.BACKFILL_NULL}
        read = self.statement("BACKFILL_READ", fragments=where, **names)
        return read, self.statement("BACKFILL_UPDATE", fragments=guard, **names)
