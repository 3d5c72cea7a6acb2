"""The deployment-script side of an engine: the neutral base of each engine's nested `Script`.

An engine's script section (`PostgreSQL.Script`, `MSSQL.Script`, `MySQL.Script`; the instance is
`dialect.script`) says how an offline script (alembic --sql, `sqltransport-schema script`) writes
a statement, and how Alembic's version stamping is made repeatable: the first stamp Alembic
writes (`ALEMBIC_FIRST_STAMP`, a pattern with {rev}), its guarded form (`FIRST_STAMP`), the
guarded restamp (`RESTAMP`), the guarded creation of alembic_version (`guard_version_table`) and
how each file of a split script opens and closes its transaction. Engines without repeatable
scripts keep None there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import errors

if TYPE_CHECKING:
    from .base import Dialect


class Script:
    """What every engine's script section provides."""

    # Alembic's offline text for its version table and its restamp, exactly as it prints them on
    # both script engines: the text make_idempotent recognises and rewrites.
    ALEMBIC_VERSION_TABLE = (
        "CREATE TABLE alembic_version (\n"
        "    version_num VARCHAR(32) NOT NULL, \n"
        "    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n"
        ");"
    )
    ALEMBIC_VERSION_TABLE_START = "CREATE TABLE alembic_version"
    ALEMBIC_RESTAMP = "UPDATE alembic_version SET version_num={new} WHERE alembic_version.version_num = {old};"
    ALEMBIC_FIRST_STAMP: str | None = None
    FIRST_STAMP: str | None = None
    RESTAMP: str | None = None
    # How each file of a split script opens and closes its transaction (as Alembic's offline output does).
    SCRIPT_BEGIN: str | None = None
    SCRIPT_COMMIT: str | None = None
    # How a DBA runs a script so that it stops at the first error (a lock wait given up, say).
    RUN_STOPPING: str | None = None
    # The encoding of the script files `script` writes (-o, --split).
    FILE_ENCODING = "utf-8"
    # How an upgrade script stops at its first error under any client, where the engine needs telling
    # (SQL Server): the statement it opens with, the batch written after each batch of its
    # transaction, the statement it closes with, and the header line that says so.
    OPENING: str | None = None
    BATCH_GUARD: str | None = None
    CLOSING: str | None = None
    STOPPING_NOTE: str | None = None
    # The batch that moves a script into another catalog of the server and says so in its output
    # ({catalog} quoted, {message} a string literal): a script per stage of catalogs (fleet script).
    USE_CATALOG: str | None = None

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def statement(self, statement: str, terminator: str) -> str:
        """A statement as an offline script (alembic --sql) writes it, where batches have no separator."""
        return statement + terminator

    def lock_timeout(self, milliseconds: int) -> str | None:
        """The statement an offline script opens with so that each statement waits at most
        `milliseconds` for a lock (docs/live-migrations.md); None where the engine sets it per batch."""
        return None

    def bounded(self, batch: str, milliseconds: int) -> str:
        """A batch that locks an existing table, as a script writes it with the lock timeout."""
        return batch

    def around(self, batch: str, bounded_ms: int, wait_ms: int) -> list[str]:
        """A batch as a script writes it, with the batches it needs around it: bounded to
        `bounded_ms` when it locks an existing table; `wait_ms` is the script's lock timeout."""
        return [self.bounded(batch, bounded_ms)]

    def use_catalog(self, catalog: str, message: str) -> str:
        """The batch that runs what follows in `catalog`, printing `message` as it does."""
        if self.USE_CATALOG is None:
            raise errors.Unsupported(f"a script that moves between catalogs is SQL Server's, not {self.dialect.name}'s")
        return self.USE_CATALOG.format(catalog=self.dialect.quote(catalog), message=self.dialect.literal(message))

    def guard_version_table(self, ddl: str) -> str:
        """alembic_version's CREATE TABLE, made to do nothing when the table exists."""
        raise errors.Unsupported(f"repeatable scripts are not supported on {self.dialect.name}")

    # A split deployment's parts each record, as the last statement of their transaction, that they
    # completed (a row of PARTS_TABLE, committed with the part or not at all); its last file stamps
    # only when every part's row is there (docs/live-migrations.md, "Split scripts").
    PARTS_TABLE = "sqltransport_script_parts"

    def part_done(self, deployment: str, part: str) -> str:
        """The statements a split file ends its transaction with: its completion marker."""
        raise errors.Unsupported(f"split scripts are not supported on {self.dialect.name}")

    def parts_check(self, deployment: str, parts: list[str]) -> str:
        """The statements the last split file ends its transaction with: one error naming the parts
        whose marker is missing (the transaction, and so the stamp, rolls back), else the markers
        removed (and their table, once empty)."""
        raise errors.Unsupported(f"split scripts are not supported on {self.dialect.name}")
