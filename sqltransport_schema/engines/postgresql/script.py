"""PostgreSQL's deployment scripts (sqltransport-schema script): `PostgreSQL.Script`."""

from __future__ import annotations

from ..base import Dialect


class Script(Dialect.Script):
    """Alembic's version stamping made repeatable: guarded stamps, CREATE TABLE IF NOT EXISTS."""

    ALEMBIC_FIRST_STAMP = r"^INSERT INTO alembic_version \(version_num\) VALUES \({rev}\) RETURNING alembic_version\.version_num;$"
    FIRST_STAMP = "INSERT INTO alembic_version (version_num) SELECT '{rev}'\n    WHERE NOT EXISTS (SELECT 1 FROM alembic_version);"
    RESTAMP = "UPDATE alembic_version SET version_num = '{new}' WHERE version_num = '{old}';"
    # How each file of a split script opens and closes its transaction (as Alembic's offline output does).
    SCRIPT_BEGIN = "BEGIN;\n\n"
    SCRIPT_COMMIT = "COMMIT;\n"
    # Each statement of the script waits at most this long for a lock; psql stops at the error
    # (ON_ERROR_STOP) and the transaction rolls back: run the script again (docs/live-migrations.md).
    LOCK_TIMEOUT = "SET lock_timeout = '{setting}';"
    RUN_STOPPING = "psql -v ON_ERROR_STOP=1 -f FILE"

    def lock_timeout(self, milliseconds: int) -> str | None:
        return self.LOCK_TIMEOUT.format(setting=self.dialect.lock_timeout_setting(milliseconds)) if milliseconds else None

    def guard_version_table(self, ddl: str) -> str:
        return ddl.replace("CREATE TABLE alembic_version", "CREATE TABLE IF NOT EXISTS alembic_version", 1)
