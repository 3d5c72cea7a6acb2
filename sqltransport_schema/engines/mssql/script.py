"""SQL Server's deployment scripts: repeatable version stamps, GO-separated batches that stop at
the first error (the nested `MSSQL.Script`)."""

from __future__ import annotations

import re

from ..base import Dialect
from .grants import Grants

# How a DBA runs a script: -b ends sqlcmd at the first error with a failing exit code, -x leaves
# `$(...)` in the text alone (sqlcmd would substitute its variables even inside names and literals),
# -f 65001 reads the file as UTF-8 whatever the machine's code page (the files `script` writes also
# open with a UTF-8 byte-order mark; `alembic --sql` output has none). -I is not needed: the script
# sets QUOTED_IDENTIFIER itself.
RUN = "sqlcmd -b -x -f 65001 -i FILE"


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
    # The session options SQL Server's DDL needs, whatever the client connected with (SSDT's scripts
    # open the same way): classic sqlcmd connects with QUOTED_IDENTIFIER OFF unless given -I, and a
    # filtered index (Index_Expires, the saga and outbox indexes) cannot be created then (error 1934).
    # QUOTED_IDENTIFIER is set when a batch is parsed: the options are a batch of their own.
    SESSION_OPTIONS = (
        "SET ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS, ARITHABORT, CONCAT_NULL_YIELDS_NULL, QUOTED_IDENTIFIER ON;\n"
        "SET NUMERIC_ROUNDABORT OFF;\n"
    )
    OPENING = SESSION_OPTIONS + "SET XACT_ABORT ON;\n\nGO"
    BATCH_GUARD = "IF @@ERROR <> 0 OR @@TRANCOUNT = 0\nBEGIN\n    IF @@TRANCOUNT > 0 ROLLBACK;\n    SET NOEXEC ON;\nEND;\n\nGO\n\n"
    CLOSING = "SET NOEXEC OFF;\n\nGO\n\n"
    STOPPING_NOTE = (
        "It sets the session options its DDL needs (QUOTED_IDENTIFIER ON and the rest, as SSDT's scripts do) and stops at "
        "its first error under any client (SET XACT_ABORT ON rolls its transaction back; SET NOEXEC ON after each batch "
        f"skips the rest). Run it with {RUN}."
    )
    # How each file of a split script opens and closes its transaction (as Alembic's offline output does).
    SCRIPT_BEGIN = OPENING + "\n\nBEGIN TRANSACTION;\n\nGO\n\n" + BATCH_GUARD
    SCRIPT_COMMIT = "COMMIT;\n\nGO\n\n" + CLOSING
    # A stage's script of catalogs on one server (fleet script --per-stage): each target's section
    # opens with its catalog's USE, and its PRINT names the target in sqlcmd's output.
    USE_CATALOG = Grants.USE_CATALOG + "\nPRINT N{message};\n\nGO\n\n"

    # A batch that locks an existing table waits at most this long for it (error 1222); sqlcmd -b
    # stops there and the open transaction rolls back with the session: run the script again.
    LOCK_TIMEOUT = "SET LOCK_TIMEOUT {milliseconds};\n{batch}"
    RUN_STOPPING = RUN
    # UTF-8 with a byte-order mark: ODBC sqlcmd reads a file without one in the machine's code page
    # (unless given -f 65001), and a non-ASCII name would create a garbled table; with the mark,
    # sqlcmd, go-sqlcmd and SSMS all read it as UTF-8.
    FILE_ENCODING = "utf-8-sig"

    PARTS_DDL = (
        "IF OBJECT_ID(N'{table}', N'U') IS NULL\n"
        "    CREATE TABLE {table} (\n"
        "        deployment nvarchar(100) NOT NULL,\n"
        "        part nvarchar(200) NOT NULL,\n"
        "        CONSTRAINT {table}_pk PRIMARY KEY (deployment, part)\n"
        "    );\n"
    )
    PART_DONE = (
        "-- This part completed: the last file of the deployment stamps only when every part did.\n"
        + PARTS_DDL
        + "IF NOT EXISTS (SELECT 1 FROM {table} WHERE deployment = {deployment} AND part = {part})\n"
        "    INSERT INTO {table} (deployment, part) VALUES ({deployment}, {part});\n\nGO\n\n"
    )
    # RAISERROR after ROLLBACK (not THROW, which needs SQL Server 2012): the transaction and its
    # stamps are gone; the guard batch after it then skips the rest (COMMIT included).
    PART_MISSING = (
        "IF NOT EXISTS (SELECT 1 FROM {table} WHERE deployment = {deployment} AND part = {part})\n"
        "BEGIN\n"
        "    ROLLBACK;\n"
        "    RAISERROR(N'not stamped: %s of this deployment did not complete; run it, then this file again', 16, 1, {part});\n"
        "END\n"
    )
    PARTS_DONE = (
        "BEGIN\n"
        "    DELETE FROM {table} WHERE deployment = {deployment};\n"
        "    IF NOT EXISTS (SELECT 1 FROM {table})\n"
        "        DROP TABLE {table};\n"
        "END;\n\nGO\n\n"
    )
    PARTS_CHECK = "-- Stamp only if every part of this deployment completed (each recorded it as its last batch).\n" + PARTS_DDL

    def _literal(self, text: str) -> str:
        return "N'" + text.replace("'", "''") + "'"

    def part_done(self, deployment: str, part: str) -> str:
        fields = {"table": self.PARTS_TABLE, "deployment": self._literal(deployment), "part": self._literal(part)}
        return self.PART_DONE.format(**fields) + self.BATCH_GUARD

    def parts_check(self, deployment: str, parts: list[str]) -> str:
        fields = {"table": self.PARTS_TABLE, "deployment": self._literal(deployment)}
        missing = "ELSE ".join(self.PART_MISSING.format(part=self._literal(part), **fields) for part in parts)
        return self.PARTS_CHECK.format(**fields) + missing + "ELSE " + self.PARTS_DONE.format(**fields) + self.BATCH_GUARD

    def guard_version_table(self, ddl: str) -> str:
        return self.GUARDED_VERSION_TABLE.format(ddl=ddl)

    # The installer's applock (the transport's own batches take it with sp_getapplock and no
    # @LockTimeout: they would inherit the session's LOCK_TIMEOUT, and when the wait gives up
    # sp_getapplock returns a negative result without raising, so the batch went on without the lock).
    # A script takes it first, in a batch of its own, with its own timeout and its result checked;
    # the transport's batch then gets it at once (same owner, the transaction), unchanged; the
    # script releases its hold after it. The resource is the transport's literal, as it writes it.
    APPLOCK = re.compile(r"^\s*EXEC sp_getapplock @Resource = ('(?:[^']|'')*'), @LockMode = 'Exclusive'$", re.M)
    TAKE_APPLOCK = """\
DECLARE @lock int;
EXEC @lock = sp_getapplock @Resource = {resource}, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = {timeout};
IF @lock < 0
BEGIN
    ROLLBACK;
    RAISERROR(N'sqltransport-schema: gave up waiting for the installer lock %s (result %d after waiting at most %d ms: another installer holds it); this script rolled back, run it again', 16, 1, {resource}, @lock, {timeout});
END"""
    RELEASE_APPLOCK = "EXEC sp_releaseapplock @Resource = {resource}, @LockOwner = 'Transaction';"
    # SET LOCK_TIMEOUT lasts for the session: after a bounded batch, back to the server's default (no limit).
    RESET_LOCK_TIMEOUT = "SET LOCK_TIMEOUT -1;"

    def around(self, batch: str, bounded_ms: int, wait_ms: int) -> list[str]:
        found = self.APPLOCK.search(batch)
        before, after = [], []
        if found is not None:
            resource, timeout = found.group(1), int(wait_ms) if wait_ms else -1
            before.append(self.TAKE_APPLOCK.format(resource=resource, timeout=timeout))
            after.append(self.RELEASE_APPLOCK.format(resource=resource))
        if bounded_ms:
            after.append(self.RESET_LOCK_TIMEOUT)
        return [*before, self.bounded(batch, bounded_ms), *after]

    def bounded(self, batch: str, milliseconds: int) -> str:
        return self.LOCK_TIMEOUT.format(milliseconds=int(milliseconds), batch=batch) if milliseconds else batch
