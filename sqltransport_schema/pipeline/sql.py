"""The pipeline's SQL, one class per engine: the ledger tables, partition reads, writes, deletes and
the reservation of destination order values. Identifiers reach SQL text only through the engine's
quoting (sqltransport_schema.engines); values are always bound parameters (`?`, turned into `%s` for
psycopg).
"""

from __future__ import annotations

import uuid
from datetime import timezone

from .. import engines
from ..schema import TableName
from .connect import Endpoint

MOVES = "sqltransport_pipeline_moves"
LEDGER = "sqltransport_pipeline_ledger"


class PipelineSQL:
    engine_name = ""
    # Ledger tables live in the destination database (default schema); same text on every engine
    # except the types, filled in per engine.
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
    TYPES = {"text": "text", "time": "timestamp", "blob": "bytea"}
    NOW = "CURRENT_TIMESTAMP"
    FIND_OPEN_MOVE = "SELECT move_id FROM {moves} WHERE source = ? AND destination = ? AND state <> 'done' ORDER BY created_at"
    GET_MOVE = "SELECT move_id, kind, src_low, src_high, base, partitions, rows_expected, state FROM {moves} WHERE move_id = ?"
    INSERT_MOVE = (
        "INSERT INTO {moves} (move_id, source, destination, kind, src_low, src_high, base, partitions, rows_expected, state, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', {now})"
    )
    FINISH_MOVE = "UPDATE {moves} SET state = 'done', finished_at = {now} WHERE move_id = ?"
    LEDGER_ROW = "SELECT rows, checksum, keys, source_deleted FROM {ledger} WHERE move_id = ? AND part = ?"
    INSERT_LEDGER = (
        "INSERT INTO {ledger} (move_id, part, lo, hi, rows, checksum, keys, source_deleted, committed_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, 0, {now})"
    )
    MARK_DELETED = "UPDATE {ledger} SET source_deleted = 1 WHERE move_id = ? AND part = ?"
    LEDGER_TOTALS = "SELECT count(*), coalesce(sum(rows), 0), coalesce(sum(source_deleted), 0) FROM {ledger} WHERE move_id = ?"
    LEDGER_CHECKSUMS = "SELECT part, rows, checksum FROM {ledger} WHERE move_id = ? ORDER BY part"
    BOUNDS = "SELECT min({order}), max({order}), count(*) FROM {table}"
    COUNT = "SELECT count(*) FROM {table}"
    READ_RANGE = "SELECT {columns} FROM {table} WHERE {order} >= ? AND {order} < ? AND {order} <= ? ORDER BY {order}{lock}"
    READ_ALL = "SELECT {columns} FROM {table}{lock}"
    LOCK = ""
    DELETE_KEY = "DELETE FROM {table} WHERE {key} = ?"
    INSERT = "INSERT INTO {table} ({columns}) VALUES ({marks})"
    UPSERT_SUBSCRIPTION = "INSERT INTO {table} (QueueAddress, Endpoint, Topic) VALUES (?, ?, ?)"
    text_times = False  # store times as SQLite's text
    ID_TEXT = "Id"  # the message id as text, for Spark's JDBC reader
    EXPIRES_READ = "Expires"  # Expires as Spark's JDBC reader should see it

    def __init__(self) -> None:
        self.engine = engines.get(self.engine_name)

    # -- text -----------------------------------------------------------------------------
    def sql(self, template: str, bound: bool | None = None, **names) -> str:
        """The template with `?` as the driver's placeholder, then the (quoted) names filled in: a name
        holding `?` or `%` stays a name. `bound`: the text runs with parameters (default: it has `?`)."""
        fields = {"moves": self.engine.qualified(TableName(MOVES)), "ledger": self.engine.qualified(TableName(LEDGER)),
                  "now": self.NOW, **self.TYPES, **names}
        bound = "?" in template if bound is None else bound
        return self.params(template).format(**{k: self.name_text(v) if bound else v for k, v in fields.items()})

    def params(self, text: str) -> str:
        return text

    def name_text(self, text: str) -> str:
        return text

    def columns(self, names) -> str:
        return ", ".join(names)

    # -- transactions -----------------------------------------------------------------------
    def begin(self, conn, write: bool = False) -> None:
        """psycopg and pyodbc open transactions implicitly."""

    def commit(self, conn) -> None:
        conn.commit()

    def rollback(self, conn) -> None:
        conn.rollback()

    # -- ledger ------------------------------------------------------------------------------
    def ensure_ledger(self, conn) -> None:
        self.begin(conn, write=True)
        cur = conn.cursor()
        cur.execute(self.sql(self.CREATE_MOVES))
        cur.execute(self.sql(self.CREATE_LEDGER))
        self.commit(conn)

    def blob(self, data: bytes):
        return data

    # -- source ------------------------------------------------------------------------------
    def read_range(self, conn, ep: Endpoint, lo: int, hi: int, high: int):
        lay = ep.layout
        text = self.sql(self.READ_RANGE, columns=self.columns(lay.columns), table=ep.qualified, order=lay.order, lock=self.LOCK)
        cur = conn.cursor()
        cur.execute(text, (lo, hi, high))
        return cur

    def read_all(self, conn, ep: Endpoint):
        cur = conn.cursor()
        cur.execute(self.sql(self.READ_ALL, columns=self.columns(ep.layout.columns), table=ep.qualified, lock=self.LOCK))
        return cur

    def delete_keys(self, conn, ep: Endpoint, keys: list) -> int:
        if not keys:
            return 0
        cur = conn.cursor()
        cur.executemany(self.sql(self.DELETE_KEY, table=ep.qualified, key=ep.layout.key), [(k,) for k in keys])
        return len(keys)

    # -- destination ------------------------------------------------------------------------
    def write_rows(self, conn, ep: Endpoint, columns: tuple[str, ...], rows: list[tuple]) -> None:
        if not rows:
            return
        text = self.sql(self.INSERT.replace("{marks}", ", ".join("?" * len(columns))), table=ep.qualified,
                        columns=self.columns(columns))
        conn.cursor().executemany(text, rows)

    def reserve(self, conn, ep: Endpoint, span: int) -> int:
        """Reserve `span` consecutive order values past everything the table holds or will be given."""
        raise NotImplementedError(f"{self.engine_name}: explicit order values are not supported; partitions run in order")


class PostgreSQLPipeline(PipelineSQL):
    engine_name = "postgresql"
    ID_TEXT = "CAST(Id AS text)"
    LOCK = " FOR UPDATE"
    DELETE_KEYS = "DELETE FROM {table} WHERE {key} = ANY(?)"
    COPY = "COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)"
    COLUMN_TYPES = (
        "SELECT lower(a.attname), a.atttypid::int, format_type(a.atttypid, NULL) FROM pg_attribute a "
        "WHERE a.attrelid = ?::regclass AND a.attnum > 0 AND NOT a.attisdropped"
    )
    # Senders take ROW EXCLUSIVE on the table before drawing a Seq: SHARE ROW EXCLUSIVE holds them off
    # for the instant the range is reserved, so no sender can be given a value inside it.
    RESERVE_LOCK = "LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"
    RESERVE_SEQUENCE = "SELECT pg_get_serial_sequence(?, ?)"
    RESERVE_NEXT = "SELECT nextval(?::regclass), (SELECT coalesce(max({order}), 0) FROM {table})"
    RESERVE_SET = "SELECT setval(?::regclass, ?)"
    INT4_MAX = 2**31 - 1
    # backfill of a saga's correlation column (psycopg's %s placeholders: filled in as they are)
    BACKFILL_COLUMN_TYPE = (
        "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = %s::regclass AND a.attname = %s AND NOT a.attisdropped"
    )
    BACKFILL_READ = "SELECT CAST({id} AS text) AS id, CAST({data} AS text) AS data, {concurrency} AS concurrency FROM {table}{where}"
    BACKFILL_UPDATE = (
        "UPDATE {table} SET {column} = CAST(%s AS {type}) "
        "WHERE {id} = CAST(%s AS uuid) AND {concurrency} = %s AND {guard}"
    )

    def params(self, text: str) -> str:
        return text.replace("?", "%s")

    def name_text(self, text: str) -> str:
        return text.replace("%", "%%")  # psycopg reads % in the statement text as a placeholder

    def delete_keys(self, conn, ep: Endpoint, keys: list) -> int:
        if not keys:
            return 0
        if isinstance(keys[0], str):
            keys = [uuid.UUID(k) for k in keys]
        cur = conn.cursor()
        cur.execute(self.sql(self.DELETE_KEYS, table=ep.qualified, key=ep.layout.key), (keys,))
        return cur.rowcount

    def read_range(self, conn, ep: Endpoint, lo: int, hi: int, high: int):
        lay = ep.layout
        text = self.sql(self.READ_RANGE, columns=self.columns(lay.columns), table=ep.qualified, order=lay.order, lock=self.LOCK)
        cur = conn.cursor()
        cur.execute(text, (lo, hi, high), binary=True)
        return cur

    # The fast path between two PostgreSQL-layout queues: the partition is deleted from the source in
    # the source's open transaction and its rows streamed, as binary COPY, into the destination, the
    # destination Seq computed by the source's statement. The delete commits only after the destination
    # (rows + ledger row) has; until then the rows are locked, so consumers (SKIP LOCKED) pass over them.
    DELETE_MOVED = (
        "WITH moved AS (DELETE FROM {table} WHERE {order} >= ? AND {order} < ? AND {order} <= ? "
        "RETURNING Id, Expires, Headers, Body, {order}) "
    )
    SELECT_MOVED = "SELECT Id, Expires, Headers, Body, CAST({order} - ? + ? AS {order_type}) FROM moved ORDER BY {order}"
    COPY_OUT = "COPY ({statement}) TO STDOUT (FORMAT BINARY)"
    INSERT_INTO = "INSERT INTO {dest} ({columns}) "
    # what the destination transaction holds in the partition's reserved slot = the source keys moved
    MOVED_KEYS = "SELECT {order} - ? + ? FROM {dest} WHERE {order} >= ? AND {order} < ? ORDER BY {order}"
    STREAM_CHUNK = 1 << 20

    def stream_partition(self, src, dst, source: Endpoint, dest: Endpoint, lo: int, hi: int, high: int, low: int,
                         base: int, checksum) -> list[int]:
        """Move one partition's rows PostgreSQL -> PostgreSQL without Python per row; returns the source keys.

        The source's DELETE ... RETURNING is left uncommitted (the caller commits it after the
        destination). The keys are read back from the partition's reserved slot in the destination,
        inside the destination's transaction: nobody else can write there. `checksum` receives the
        binary stream (a hash of exactly what was written).
        """
        order, dest_order = source.layout.order, dest.layout.order
        order_type = self.column_types(dst, dest)[dest_order.lower()][1]
        columns = self.columns(dest.layout.columns)
        moved = self.sql(self.DELETE_MOVED, table=source.qualified, order=order)
        select = self.sql(self.SELECT_MOVED, order=order, order_type=order_type)
        params = (lo, hi, high, low, base)
        if src is dst:  # one database: the server moves the rows inside the partition's one transaction
            insert = self.sql(self.INSERT_INTO, bound=True, dest=dest.qualified, columns=columns)
            src.cursor().execute(moved + insert + select, params)
        else:
            with src.cursor().copy(self.COPY_OUT.format(statement=moved + select), params) as reader, \
                    dst.cursor().copy(self.sql(self.COPY, table=dest.qualified, columns=columns)) as writer:
                buffer, size = [], 0
                for data in reader:  # one message per row: hand the writer ~1 MB at a time
                    buffer.append(data)
                    size += len(data)
                    if size >= self.STREAM_CHUNK:
                        chunk = b"".join(buffer)
                        checksum.update(chunk)
                        writer.write(chunk)
                        buffer, size = [], 0
                if buffer:
                    chunk = b"".join(buffer)
                    checksum.update(chunk)
                    writer.write(chunk)
        cur = dst.cursor()
        cur.execute(self.sql(self.MOVED_KEYS, order=dest_order, dest=dest.qualified),
                    (base, low, base + lo - low, base + hi - low))
        keys = [row[0] for row in cur.fetchall()]
        if src is dst:
            checksum.update(b"".join(k.to_bytes(8, "little", signed=True) for k in keys))
        return keys

    def column_types(self, conn, ep: Endpoint) -> dict[str, tuple[int, str]]:
        cur = conn.cursor()
        cur.execute(self.sql(self.COLUMN_TYPES), (ep.qualified,))
        return {name: (oid, text) for name, oid, text in cur.fetchall()}

    @staticmethod
    def _converter(type_name: str):
        if type_name == "uuid":
            return lambda v: uuid.UUID(v) if isinstance(v, str) else v
        if type_name == "timestamp with time zone":
            return lambda v: v.replace(tzinfo=timezone.utc) if v is not None and v.tzinfo is None else v
        return None

    def write_rows(self, conn, ep: Endpoint, columns: tuple[str, ...], rows: list[tuple]) -> None:
        """Binary COPY: the fastest way into PostgreSQL (values converted where the column needs it)."""
        if not rows:
            return
        types = self.column_types(conn, ep)
        wanted = [types[c.lower()] for c in columns]
        converters = [(i, f) for i, f in enumerate(self._converter(t[1]) for t in wanted) if f is not None]
        with conn.cursor().copy(self.sql(self.COPY, table=ep.qualified, columns=self.columns(columns))) as copy:
            copy.set_types([t[0] for t in wanted])
            write = copy.write_row
            if not converters:
                for row in rows:
                    write(row)
                return
            for row in rows:
                row = list(row)
                for i, f in converters:
                    row[i] = f(row[i])
                write(row)

    def reserve(self, conn, ep: Endpoint, span: int) -> int:
        order = ep.layout.order
        cur = conn.cursor()
        cur.execute(self.sql(self.RESERVE_LOCK, table=ep.qualified))
        cur.execute(self.sql(self.RESERVE_SEQUENCE), (ep.qualified, order.lower()))
        sequence = cur.fetchone()[0]
        if sequence is None:
            raise ValueError(f"{ep.describe()}: column {order} has no sequence (not serial/bigserial)")
        cur.execute(self.sql(self.RESERVE_NEXT, table=ep.qualified, order=order), (sequence,))
        nextval, current_max = cur.fetchone()
        base = max(nextval, current_max + 1)
        last = base + max(span, 1) - 1
        if self.column_types(conn, ep)[order.lower()][1] == "integer" and last > self.INT4_MAX:
            raise ValueError(
                f"{ep.describe()}: {order} is integer (serial) and the move needs values up to {last}; "
                "switch the topology to postgresql: {seq_type: bigserial} first")
        cur.execute(self.sql(self.RESERVE_SET), (sequence, last))
        return base


class SQLitePipeline(PipelineSQL):
    engine_name = "sqlite"
    TYPES = {"text": "TEXT", "time": "DATETIME", "blob": "BLOB"}
    text_times = True
    EXPIRES_READ = "CAST(Expires AS TEXT)"  # the JDBC driver would read DATETIME as a date only
    RESERVE_MAX = "SELECT coalesce(max({order}), 0) FROM {table}"
    RESERVE_SEQUENCE = "SELECT seq FROM sqlite_sequence WHERE name = ? COLLATE NOCASE"
    RESERVE_UPDATE = "UPDATE sqlite_sequence SET seq = ? WHERE name = ? COLLATE NOCASE"
    RESERVE_INSERT = "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)"

    def begin(self, conn, write: bool = False) -> None:
        if not conn.in_transaction:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def reserve(self, conn, ep: Endpoint, span: int) -> int:
        # The caller holds BEGIN IMMEDIATE: no other writer can insert meanwhile.
        cur = conn.cursor()
        cur.execute(self.sql(self.RESERVE_MAX, table=ep.qualified, order=ep.layout.order))
        current_max = cur.fetchone()[0]
        cur.execute(self.RESERVE_SEQUENCE, (ep.table.table,))
        found = cur.fetchone()
        base = max(current_max, found[0] if found else 0) + 1
        last = base + max(span, 1) - 1
        if found:
            cur.execute(self.RESERVE_UPDATE, (last, ep.table.table))
        else:
            cur.execute(self.RESERVE_INSERT, (ep.table.table, last))
        return base


class MSSQLPipeline(PipelineSQL):  # pragma: no cover - no SQL Server here
    """SQL Server (pyodbc). IDENTITY columns take no explicit values without IDENTITY_INSERT (ALTER
    permission), so partitions into SQL Server run one after the other, in order."""

    engine_name = "mssql"
    TYPES = {"text": "nvarchar(max)", "time": "datetime2", "blob": "varbinary(max)"}
    NOW = "SYSUTCDATETIME()"
    ID_TEXT = "LOWER(CONVERT(varchar(36), Id))"
    CREATE_MOVES = "IF OBJECT_ID(N'{moves_literal}') IS NULL " + PipelineSQL.CREATE_MOVES.replace("IF NOT EXISTS ", "")
    CREATE_LEDGER = "IF OBJECT_ID(N'{ledger_literal}') IS NULL " + PipelineSQL.CREATE_LEDGER.replace("IF NOT EXISTS ", "")
    READ_RANGE = "SELECT {columns} FROM {table} WITH (UPDLOCK, ROWLOCK) WHERE {order} >= ? AND {order} < ? AND {order} <= ? ORDER BY {order}"
    READ_ALL = "SELECT {columns} FROM {table} WITH (UPDLOCK, ROWLOCK)"
    UPSERT_SUBSCRIPTION = (
        "MERGE {table} WITH (HOLDLOCK, TABLOCK) AS target USING (SELECT ? AS QueueAddress, ? AS Endpoint, ? AS Topic) AS source "
        "ON target.Endpoint = source.Endpoint AND target.Topic = source.Topic "
        "WHEN MATCHED THEN UPDATE SET QueueAddress = source.QueueAddress "
        "WHEN NOT MATCHED THEN INSERT (QueueAddress, Endpoint, Topic) VALUES (source.QueueAddress, source.Endpoint, source.Topic);"
    )

    def sql(self, template: str, **names) -> str:
        moves = self.engine.qualified(TableName(MOVES))
        ledger = self.engine.qualified(TableName(LEDGER))
        return super().sql(template, moves_literal=moves.replace("'", "''"), ledger_literal=ledger.replace("'", "''"), **names)


PostgreSQLPipeline.UPSERT_SUBSCRIPTION = (
    "INSERT INTO {table} (QueueAddress, Endpoint, Topic) VALUES (?, ?, ?) "
    "ON CONFLICT (Endpoint, Topic) DO UPDATE SET QueueAddress = excluded.QueueAddress"
)
SQLitePipeline.UPSERT_SUBSCRIPTION = PostgreSQLPipeline.UPSERT_SUBSCRIPTION

_BY_ENGINE = {cls.engine_name: cls for cls in (PostgreSQLPipeline, SQLitePipeline, MSSQLPipeline)}


def for_endpoint(ep: Endpoint) -> PipelineSQL:
    return _BY_ENGINE[ep.dialect.name]()
