"""SQL Server's deployment scripts: repeatable version stamps, GO-separated batches that stop at
the first error (the nested `MSSQL.Script`)."""

from __future__ import annotations

from ..base import Dialect


class Script(Dialect.Script):
    """Alembic's version stamping made repeatable: IF-guarded stamps and version table; GO-separated files."""

    ALEMBIC_FIRST_STAMP = r"^INSERT INTO alembic_version \(version_num\) OUTPUT inserted\.version_num VALUES \({rev}\);$"
    FIRST_STAMP = "IF NOT EXISTS (SELECT 1 FROM alembic_version)\n    INSERT INTO alembic_version (version_num) VALUES ('{rev}');"
    RESTAMP = (
        "IF EXISTS (SELECT 1 FROM alembic_version WHERE version_num = '{old}')\n"
        "    UPDATE alembic_version SET version_num = '{new}' WHERE version_num = '{old}';"
    )
    GUARDED_VERSION_TABLE = "IF OBJECT_ID(N'alembic_version', N'U') IS NULL\nBEGIN\n{ddl}\nEND;"
    # A failure stops the script under any client, not only `sqlcmd -b`: XACT_ABORT rolls the whole
    # transaction back at the first error; the batch after each batch then finds no transaction (or
    # the error) and turns execution off, so no later batch runs outside it; the script's last batch
    # turns it on again (SET NOEXEC OFF runs even while it is off) for the session's next queries.
    OPENING = "SET XACT_ABORT ON;"
    BATCH_GUARD = "IF @@ERROR <> 0 OR @@TRANCOUNT = 0 SET NOEXEC ON;\n\nGO\n\n"
    CLOSING = "SET NOEXEC OFF;\n\nGO\n\n"
    STOPPING_NOTE = (
        "It stops at its first error under any client (SET XACT_ABORT ON rolls its transaction back; "
        "SET NOEXEC ON after each batch skips the rest)."
    )
    # How each file of a split script opens and closes its transaction (as Alembic's offline output does).
    SCRIPT_BEGIN = OPENING + "\n\nBEGIN TRANSACTION;\n\nGO\n\n" + BATCH_GUARD
    SCRIPT_COMMIT = "COMMIT;\n\nGO\n\n" + CLOSING

    # A batch that locks an existing table waits at most this long for it (error 1222); sqlcmd -b
    # stops there and the open transaction rolls back with the session: run the script again.
    LOCK_TIMEOUT = "SET LOCK_TIMEOUT {milliseconds};\n{batch}"
    RUN_STOPPING = "sqlcmd -b -i FILE"

    def guard_version_table(self, ddl: str) -> str:
        return self.GUARDED_VERSION_TABLE.format(ddl=ddl)

    def bounded(self, batch: str, milliseconds: int) -> str:
        return self.LOCK_TIMEOUT.format(milliseconds=int(milliseconds), batch=batch) if milliseconds else batch
