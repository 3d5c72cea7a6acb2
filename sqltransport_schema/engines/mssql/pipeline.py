"""SQL Server in the data pipeline (engines/pipeline.py): pyodbc, Spark through jTDS (the nested `MSSQL.Pipeline`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import Unavailable
from ..base import Dialect

if TYPE_CHECKING:
    from sqlalchemy.engine import URL


class Pipeline(Dialect.Pipeline):  # pragma: no cover - no SQL Server here
    """SQL Server (pyodbc). IDENTITY columns take no explicit values without IDENTITY_INSERT (ALTER
    permission), so partitions into SQL Server run one after the other, in order. Spark reads through
    jTDS (`jdbc:jtds:sqlserver://`), which it handles with its generic dialect, so the pipeline always
    reads SQL Server through an explicit query naming the columns."""

    layout = "mssql"
    jdbc_jar, jdbc_driver = "jtds.jar", "net.sourceforge.jtds.jdbc.Driver"
    FRAGMENTS = {
        **Dialect.Pipeline.FRAGMENTS,
        "text": "nvarchar(max)",
        "time": "datetime2",
        "blob": "varbinary(max)",
        "now": "SYSUTCDATETIME()",
        "id_text": "LOWER(CONVERT(varchar(36), Id))",
    }
    CREATE_MOVES = "IF OBJECT_ID(N{moves_literal}) IS NULL " + Dialect.Pipeline.CREATE_MOVES.replace("IF NOT EXISTS ", "")
    CREATE_LEDGER = "IF OBJECT_ID(N{ledger_literal}) IS NULL " + Dialect.Pipeline.CREATE_LEDGER.replace("IF NOT EXISTS ", "")
    READ_RANGE = (
        "SELECT {columns} FROM {table} WITH (UPDLOCK, ROWLOCK, READPAST) WHERE {order} >= @Low AND {order} < @High "
        "AND {order} <= @Last ORDER BY {order}"
    )
    READ_ALL = "SELECT {columns} FROM {table} WITH (UPDLOCK, ROWLOCK, READPAST)"
    # the claim: made empty with the source's columns (UNION ALL leaves the IDENTITY property behind, so
    # the claim takes the source's RowVersion values), filled by the DELETE's OUTPUT in one statement
    CLAIM_CREATE = (
        "IF OBJECT_ID(N{claim_literal}) IS NULL SELECT {columns} INTO {claim} FROM {table} WHERE 1 = 0 "
        "UNION ALL SELECT {columns} FROM {table} WHERE 1 = 0"
    )
    CLAIM_MOVE = "DELETE FROM {table} WITH (ROWLOCK, READPAST) OUTPUT {deleted} INTO {claim} ({columns}){where}"

    def claim(self, conn: Any, source: Any, claim: Any, lo: int | None, hi: int | None, high: int | None) -> int:
        names, fragments = self._claim_names(source, claim), self._claim_where(source, lo)
        fragments["deleted"] = ", ".join(f"deleted.{column}" for column in source.columns)
        cur = conn.cursor()
        self.execute(cur, self.statement("CLAIM_CREATE", **names))
        return int(self.execute(cur, self.statement("CLAIM_MOVE", fragments=fragments, **names), Low=lo, High=hi, Last=high).rowcount)

    def connect_arguments(self, url: URL, timeout: float) -> tuple[Any, list, dict]:
        """pyodbc's login timeout bounds the connection."""
        try:
            import pyodbc
        except ImportError as exc:
            raise Unavailable("writing to SQL Server needs pyodbc: pip install -e '.[mssql]'") from exc
        return pyodbc, [self.odbc_connection_string(url)], {"autocommit": False, "timeout": max(int(timeout + 0.999), 1)}

    @staticmethod
    def odbc_connection_string(url: URL) -> str:
        driver = url.query.get("driver", "ODBC Driver 18 for SQL Server")
        server = url.host + (f",{url.port}" if url.port else "")
        text = f"DRIVER={{{driver}}};SERVER={server};DATABASE={url.database or ''};"
        if url.username:
            text += f"UID={url.username};PWD={url.password or ''};"
        else:
            text += "Trusted_Connection=yes;"
        return text + "TrustServerCertificate=yes;"

    def jdbc_url(self, url: URL) -> str:
        props = f";user={url.username};password={url.password or ''}" if url.username else ";useNTLMv2=true"
        from ...defaults import DEFAULT_READ_TIMEOUT

        props += f";loginTimeout={DEFAULT_READ_TIMEOUT:g}"  # seconds, as the pipeline's DBAPI connections wait
        return f"jdbc:jtds:sqlserver://{url.host}:{url.port or 1433}/{url.database or ''}{props}"
