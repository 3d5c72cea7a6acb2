"""PostgreSQL's part of the data pipeline (engines/pipeline.py): psycopg 3, binary COPY:
`PostgreSQL.Pipeline`."""

from __future__ import annotations

import uuid
from datetime import timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import quote as urlquote

from ...errors import UsageError
from ...schema import TableName
from ..base import Dialect
from ..pipeline import ClaimBusy

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.engine import URL

    from ..pipeline import Route, Table


class Pipeline(Dialect.Pipeline):
    """psycopg 3 (%s placeholders). Queue partitions between PostgreSQL-layout tables stream
    server to server as binary COPY; other writes are binary COPY too; Seq values are reserved
    from the serial sequence, so partitions may commit in any order."""

    layout = "postgresql"
    jdbc_jar, jdbc_driver = "postgresql.jar", "org.postgresql.Driver"
    paramstyle = "format"
    takes_explicit_order = True
    stream_layout = "postgresql"
    backfills_sagas = True
    FRAGMENTS = {
        **Dialect.Pipeline.FRAGMENTS,
        "lock": " FOR UPDATE",
        "range_lock": " FOR UPDATE SKIP LOCKED",
        "id_text": "CAST(Id AS text)",
    }

    DELETE_KEYS = "DELETE FROM {table} WHERE {key} = ANY(@Keys)"
    COPY = "COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)"
    COLUMN_TYPES = (
        "SELECT lower(a.attname), a.atttypid::int, format_type(a.atttypid, NULL) FROM pg_attribute a "
        "WHERE a.attrelid = @Table::regclass AND a.attnum > 0 AND NOT a.attisdropped"
    )
    # Senders take ROW EXCLUSIVE on the table before drawing a Seq: SHARE ROW EXCLUSIVE holds them off
    # for the instant the range is reserved, so no sender can be given a value inside it.
    RESERVE_LOCK = "LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"
    RESERVE_SEQUENCE = "SELECT pg_get_serial_sequence(@Table, @Column)"
    RESERVE_NEXT = "SELECT nextval(@Sequence::regclass), (SELECT coalesce(max({order}), 0) FROM {table})"
    RESERVE_SET = "SELECT setval(@Sequence::regclass, @Last)"
    INT4_MAX = 2**31 - 1
    # The fast path between two PostgreSQL-layout queues: the partition is deleted from the source in
    # the source's open transaction and its rows streamed, as binary COPY, into the destination, the
    # destination Seq computed by the source's statement. The delete commits only after the destination
    # (rows + ledger row) has; until then the rows are locked, so consumers (SKIP LOCKED) pass over them.
    # Rows a receiver holds (its batch in flight) are passed over, as receivers pass over the move's:
    # they stay the receiver's, and the move never waits behind a pump working at the queue's head.
    DELETE_MOVED = (
        "WITH moved AS (DELETE FROM {table} WHERE {order} IN (SELECT {order} FROM {table} WHERE {order} >= @Low AND {order} < @High "
        "AND {order} <= @Last FOR UPDATE SKIP LOCKED) RETURNING Id, Expires, Headers, Body, {order}) "
    )
    # a partition claimed before (pipeline/move.py): the rows are read from its claim, which stays
    SELECT_CLAIMED = (
        "WITH moved AS (SELECT Id, Expires, Headers, Body, {order} FROM {table} "
        "WHERE {order} >= @Low AND {order} < @High AND {order} <= @Last) "
    )
    # A partition's first pass between two databases (pipeline/move.py): the claim and the stream in one
    # pass over the rows, the DELETE plain (no lock pass): it waits at most CLAIM_WAIT for a row a
    # receiver holds, and then the move claims the partition passing over held rows (CLAIM_MOVE). Each
    # row is streamed as the claim's INSERT takes it (its RETURNING), so the destination loads while the
    # source deletes and claims; no sort (the destination's order is the Seq each row is given, not the
    # order rows arrive in).
    CLAIM_STREAM = (
        "WITH moved AS (DELETE FROM {table} WHERE {order} >= @Low AND {order} < @High AND {order} <= @Last "
        "RETURNING Id, Expires, Headers, Body, {order}) INSERT INTO {claim} (Id, Expires, Headers, Body, {order}) "
        "SELECT Id, Expires, Headers, Body, {order} FROM moved "
        "RETURNING Id, Expires, Headers, Body, CAST({order} - @SourceLow + @Base AS {order_type})"
    )
    CLAIM_WAIT = "SET LOCAL lock_timeout = '200ms'"
    # the claim: receivers delete concurrently (SKIP LOCKED), so the rows claimed are exactly those the
    # DELETE took (a row a receiver deleted first is not copied)
    CLAIM_CREATE = "CREATE TABLE IF NOT EXISTS {claim} (LIKE {table})"
    CLAIM_MOVE = (
        "WITH moved AS (DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {table}{where} FOR UPDATE SKIP LOCKED) "
        "RETURNING {columns}) INSERT INTO {claim} ({columns}) SELECT {columns} FROM moved"
    )
    SELECT_MOVED = "SELECT Id, Expires, Headers, Body, CAST({order} - @SourceLow + @Base AS {order_type}) FROM moved ORDER BY {order}"
    SELECT_CLAIM = "SELECT Id, Expires, Headers, Body, CAST({order} - @SourceLow + @Base AS {order_type}) FROM moved"  # no sort
    COPY_OUT = "COPY ({statement}) TO STDOUT (FORMAT BINARY)"
    INSERT_INTO = "INSERT INTO {dest} ({columns}) "
    # what the destination transaction holds in the partition's reserved slot = the source keys moved
    MOVED_KEYS = "SELECT {order} - @Base + @SourceLow FROM {dest} WHERE {order} >= @From AND {order} < @To ORDER BY {order}"
    STREAM_CHUNK = 1 << 20
    # backfill of a saga's correlation column
    BACKFILL_COLUMN_TYPE = (
        "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = @Table::regclass AND a.attname = @Column AND NOT a.attisdropped"
    )
    BACKFILL_READ = "SELECT CAST({id} AS text) AS id, CAST({data} AS text) AS data, {concurrency} AS concurrency FROM {table}{where}"
    BACKFILL_UPDATE = (
        "UPDATE {table} SET {column} = CAST(@Value AS {type}) WHERE {id} = CAST(@Id AS uuid) AND {concurrency} = @Concurrency AND {guard}"
    )

    # -- connections ----------------------------------------------------------------------
    def connect_arguments(self, url: URL, timeout: float) -> tuple[Any, list, dict]:
        """libpq's connect_timeout bounds the connection (a URL's own connect_timeout kept); no statement
        timeout: a move's statements are as long as its partitions."""
        import psycopg
        from psycopg.conninfo import make_conninfo

        parameters = {"connect_timeout": str(max(int(timeout + 0.999), 1)), **self.libpq_parameters(url)}
        return psycopg, [make_conninfo(**parameters)], {}

    @staticmethod
    def libpq_parameters(url: URL) -> dict:
        """libpq connection parameters (make_conninfo quotes them: a password may hold ' or \\)."""
        parts = {
            "host": url.host or "127.0.0.1",
            "port": url.port or 5432,
            "dbname": url.database,
            "user": url.username,
            "password": url.password,
        }
        parts.update({k: v for k, v in url.query.items() if isinstance(v, str)})
        return {k: str(v) for k, v in parts.items() if v is not None}

    def jdbc_url(self, url: URL) -> str:
        """`stringtype=unspecified` (uuid columns), `reWriteBatchedInserts=true`, and `connectTimeout` (seconds:
        the pipeline's connect timeout, DEFAULT_READ_TIMEOUT, as its DBAPI connections have)."""
        from ...defaults import DEFAULT_READ_TIMEOUT

        query = {"stringtype": "unspecified", "reWriteBatchedInserts": "true", "connectTimeout": f"{DEFAULT_READ_TIMEOUT:g}"}
        if url.username:
            query["user"] = url.username
        if url.password:
            query["password"] = url.password
        return f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/{url.database}?" + "&".join(
            f"{k}={urlquote(str(v))}" for k, v in query.items()
        )

    def json_as_text(self, conn: Any) -> None:
        """psycopg parses json/jsonb; the text is what a copied row is written back with (a str is sent untyped)."""
        from psycopg.types.string import TextLoader

        for name in ("json", "jsonb"):
            conn.adapters.register_loader(name, TextLoader)

    # -- source -----------------------------------------------------------------------------
    def delete_keys(self, conn: Any, table: Table, keys: list) -> int:
        if not keys:
            return 0
        if isinstance(keys[0], str):
            keys = [uuid.UUID(k) for k in keys]
        cur = self.execute(conn.cursor(), self._table("DELETE_KEYS", table, key=table.key), Keys=keys)
        return cur.rowcount

    def read_range(self, conn: Any, table: Table, lo: int, hi: int, high: int) -> Any:
        statement = self._table("READ_RANGE", table, columns=self.columns_text(table.columns), order=table.order)
        cur = conn.cursor()
        cur.execute(*self.bind(statement, {"Low": lo, "High": hi, "Last": high}), binary=True)
        return cur

    def claim(self, conn: Any, source: Table, claim: Table, lo: int | None, hi: int | None, high: int | None) -> int:
        names, fragments = self._claim_names(source, claim), self._claim_where(source, lo)
        cur = conn.cursor()
        self.execute(cur, self.statement("CLAIM_CREATE", **names))
        moved = self.statement("CLAIM_MOVE", fragments=fragments, key=source.key, **names)
        return int(self.execute(cur, moved, Low=lo, High=hi, Last=high).rowcount)

    def stream_partition(self, src: Any, dst: Any, route: Route, checksum: Any, claimed: bool = False) -> list[int]:
        """Move one partition's rows PostgreSQL -> PostgreSQL without Python per row; returns the source keys.

        Between two databases: with `claimed`, `source` is the partition's claim (committed already),
        read, not deleted; else the rows are deleted from `source` into `claim` as they stream, left
        uncommitted (the caller commits the claim, then the destination), and ClaimBusy says a receiver
        held one of them (the caller rolls both back and claims passing over held rows). One database:
        the source's DELETE ... RETURNING is left uncommitted (the caller commits it with the
        destination). The keys are read back from the partition's reserved slot in the destination,
        inside the destination's transaction: nobody else can write there. `checksum` receives the
        binary stream (a hash of exactly what was written).
        """
        source, dest, claim, lo, hi, low, high, base = route
        order, dest_order = source.order, dest.order
        names = {
            "table": self.dialect.qualified(source.name),
            "dest": self.dialect.qualified(dest.name),
            "order": order,
            "columns": self.columns_text(dest.columns),
            "order_type": self.column_types(dst, dest)[dest_order.lower()][1],
        }
        values = {"Low": lo, "High": hi, "Last": high, "SourceLow": low, "Base": base}
        if src is dst:  # one database: the server moves the rows inside the partition's one transaction
            moved = self.statement("MOVE", self.DELETE_MOVED + self.INSERT_INTO + self.SELECT_MOVED, **names)
            self.execute(src.cursor(), moved, **values)
        else:
            if not claimed and claim is not None:
                names["claim"] = self.dialect.qualified(claim.name)
                self.execute(src.cursor(), self.statement("CLAIM_CREATE", **names))
                self.execute(src.cursor(), self.statement("CLAIM_WAIT"))
            if claimed:
                rows = self.SELECT_CLAIMED + self.SELECT_CLAIM
            else:
                rows = self.DELETE_MOVED + self.SELECT_MOVED if claim is None else self.CLAIM_STREAM
            copy_out = self.statement("COPY_OUT", fragments={"statement": rows}, **names)
            copy_in = self._table("COPY", dest, columns=names["columns"])
            from psycopg.errors import LockNotAvailable

            try:
                self._pipe(src.cursor().copy(*self.bind(copy_out, values)), dst.cursor().copy(self.bind(copy_in)[0]), checksum)
            except LockNotAvailable as exc:
                raise ClaimBusy(f"{source.where}: a receiver holds a row of the partition") from exc
        keys_statement = self._table("MOVED_KEYS", dest, dest=names["dest"], order=dest_order)
        cur = self.execute(dst.cursor(), keys_statement, Base=base, SourceLow=low, From=base + lo - low, To=base + hi - low)
        keys = [row[0] for row in cur.fetchall()]
        if src is dst:
            checksum.update(b"".join(k.to_bytes(8, "little", signed=True) for k in keys))
        return keys

    def _pipe(self, copy_out: Any, copy_in: Any, checksum: Any) -> None:
        """The source's binary COPY into the destination's, ~1 MB at a time, hashed as written. A row
        libpq holds already is taken from it directly, psycopg's read (which waits for the socket) only
        used when it holds none: a million rows cost seconds of CPU in the waiting machinery."""
        with copy_out as reader, copy_in as writer:
            take = reader.connection.pgconn.get_copy_data
            buffer, size = [], 0
            while True:  # one message per row
                taken, data = take(1)
                if taken == 0:
                    data = reader.read()
                    if not data:
                        break  # psycopg read the COPY's result
                elif taken < 0:
                    self._copy_ended(reader.connection.pgconn)
                    break
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

    @staticmethod
    def _copy_ended(pgconn: Any) -> None:
        """The results of a COPY TO whose end libpq gave us: the error it failed with is raised (the
        connection is left able to roll back)."""
        import psycopg
        from psycopg import pq

        results = []
        while (result := pgconn.get_result()) is not None:
            results.append(result)
        for result in results:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                message = result.error_message.decode(errors="replace")
                try:
                    error = psycopg.errors.lookup(result.error_field(pq.DiagnosticField.SQLSTATE).decode())
                except (KeyError, AttributeError):
                    error = psycopg.DatabaseError
                raise error(message)
        if not results:
            raise psycopg.OperationalError(pgconn.error_message.decode(errors="replace") or "the COPY ended without a result")

    # -- destination --------------------------------------------------------------------------
    def column_types(self, conn: Any, table: Table) -> dict[str, tuple[int, str]]:
        """lower-case column -> (type oid, type name)."""
        cur = self.execute(conn.cursor(), self.statement("COLUMN_TYPES"), Table=self.dialect.qualified(table.name))
        return {name: (oid, text) for name, oid, text in cur.fetchall()}

    @staticmethod
    def _converter(type_name: str) -> Callable[[Any], Any] | None:
        if type_name == "uuid":
            return lambda v: uuid.UUID(v) if isinstance(v, str) else v
        if type_name == "timestamp with time zone":
            return lambda v: v.replace(tzinfo=timezone.utc) if v is not None and v.tzinfo is None else v
        return None

    def write_rows(self, conn: Any, table: Table, columns: tuple[str, ...], rows: list[tuple]) -> None:
        """Binary COPY: the fastest way into PostgreSQL (values converted where the column needs it)."""
        if not rows:
            return
        types = self.column_types(conn, table)
        wanted = [types[c.lower()] for c in columns]
        converters = [(i, f) for i, f in enumerate(self._converter(t[1]) for t in wanted) if f is not None]
        copy_in = self._table("COPY", table, columns=self.columns_text(columns))
        with conn.cursor().copy(self.bind(copy_in)[0]) as copy:
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

    def reserve(self, conn: Any, table: Table, span: int) -> int:
        order, qualified = table.order, self.dialect.qualified(table.name)
        cur = conn.cursor()
        self.execute(cur, self._table("RESERVE_LOCK", table))
        sequence = self.execute(cur, self.statement("RESERVE_SEQUENCE"), Table=qualified, Column=order.lower()).fetchone()[0]
        if sequence is None:
            raise UsageError(f"{table.where}: column {order} has no sequence (not serial/bigserial)")
        nextval, current_max = self.execute(cur, self._table("RESERVE_NEXT", table, order=order), Sequence=sequence).fetchone()
        base = max(nextval, current_max + 1)
        last = base + max(span, 1) - 1
        if self.column_types(conn, table)[order.lower()][1] == "integer" and last > self.INT4_MAX:
            raise UsageError(
                f"{table.where}: {order} is integer (serial) and the move needs values up to {last}; "
                "switch the topology to postgresql: {seq_type: bigserial} first"
            )
        self.execute(cur, self.statement("RESERVE_SET"), Sequence=sequence, Last=last)
        return base

    # -- backfill of a saga's correlation column ---------------------------------------------------
    def saga_column_type(self, conn: Any, table: TableName, column: str) -> str | None:
        found = self.execute(
            conn.cursor(), self.statement("BACKFILL_COLUMN_TYPE"), Table=self.dialect.qualified(table), Column=column
        ).fetchone()
        return None if found is None else found[0]
