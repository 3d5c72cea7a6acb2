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

    PARTS_DDL = (
        "CREATE TABLE IF NOT EXISTS {table} (\n"
        "    deployment VARCHAR(100) NOT NULL,\n"
        "    part VARCHAR(200) NOT NULL,\n"
        "    PRIMARY KEY (deployment, part)\n"
        ");\n"
    )
    PART_DONE = (
        "-- This part completed: the last file of the deployment stamps only when every part did.\n"
        + PARTS_DDL
        + "INSERT INTO {table} (deployment, part) VALUES ({deployment}, {part}) ON CONFLICT DO NOTHING;\n\n"
    )
    PARTS_CHECK = (
        "-- Stamp only if every part of this deployment completed (each recorded it as its last statement).\n"
        + PARTS_DDL
        + """DO $sqltransport$
DECLARE
    missing text;
BEGIN
    SELECT string_agg(expected.part, ', ' ORDER BY expected.part) INTO missing
    FROM unnest(ARRAY[{parts}]::text[]) AS expected(part)
    WHERE NOT EXISTS (
        SELECT 1 FROM {table} done WHERE done.deployment = {deployment} AND done.part = expected.part);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'not stamped: % of this deployment did not complete; run it, then this file again', missing;
    END IF;
    DELETE FROM {table} WHERE deployment = {deployment};
    IF NOT EXISTS (SELECT 1 FROM {table}) THEN
        DROP TABLE {table};
    END IF;
END
$sqltransport$;

"""
    )

    def _literal(self, text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    def part_done(self, deployment: str, part: str) -> str:
        return self.PART_DONE.format(table=self.PARTS_TABLE, deployment=self._literal(deployment), part=self._literal(part))

    def parts_check(self, deployment: str, parts: list[str]) -> str:
        listed = ", ".join(self._literal(part) for part in parts)
        return self.PARTS_CHECK.format(table=self.PARTS_TABLE, deployment=self._literal(deployment), parts=listed)

    def guard_version_table(self, ddl: str) -> str:
        return ddl.replace("CREATE TABLE alembic_version", "CREATE TABLE IF NOT EXISTS alembic_version", 1)
