"""PostgreSQL's online rewrites of queue tables (engines/online.py, migrate/online.py):
`PostgreSQL.Online`."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ...schema import Kind, TableName, TableSpec
from ...statements import Statement, parameters_of
from ...versions import Profile
from ..base import Dialect
from ..online import OnlineNames

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


class Online(Dialect.Online):
    """A queue rewritten beside the live table: the shadow gets the changed DDL (the transport's
    own CREATE_QUEUE and BodyString script), a row trigger on the live table repeats every
    insert and delete there, and the backlog is copied newest first in batches that lock no row
    of the live table (a row lock there would make receivers, FOR UPDATE SKIP LOCKED, pass over
    the head of the queue). A message received while its batch was being copied can be left
    behind in the shadow (the trigger's delete ran before the copy committed); once every
    writer of that moment has ended, such copies are deleted (SETTLE). The swap locks both
    tables, repairs any difference (none is expected), carries the sequence over, drops the live
    table and gives the shadow its name, index names, owner and grants.
    {table}, {shadow}, {mirror} are quoted qualified names; @Table and @Shadow the same as text."""

    supported = True
    SHADOW_SUFFIX = "__online"
    MIRROR_SUFFIX = "__online_mirror"
    TRIGGER = "sqltransport_online_mirror"
    TRUNCATE_TRIGGER = "sqltransport_online_truncate"
    SEQ_TYPES = {"integer": "serial", "bigint": "bigserial"}

    # -- reading the live table ------------------------------------------------------
    CURRENT = """\
SELECT format_type(seq.atttypid, seq.atttypmod),
    EXISTS (SELECT FROM pg_attribute b WHERE b.attrelid = c.oid AND b.attname = 'bodystring' AND NOT b.attisdropped)
FROM pg_class AS c
JOIN pg_attribute AS seq ON seq.attrelid = c.oid AND seq.attname = 'seq' AND NOT seq.attisdropped
WHERE c.oid = to_regclass(@Table)"""
    ROWS_ESTIMATED = "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass(@Table)"

    # -- step 1, one short transaction: the shadow, its mirror function, the triggers -------
    MIRROR = """\
CREATE OR REPLACE FUNCTION {mirror}() RETURNS trigger LANGUAGE plpgsql AS {tag}
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE {shadow};
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        DELETE FROM {shadow} WHERE Seq = OLD.Seq;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO {shadow} (Id, Expires, Headers, Body, Seq)
        VALUES (NEW.Id, NEW.Expires, NEW.Headers, NEW.Body, NEW.Seq)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
{tag}"""
    DROP_SHADOW = "DROP TABLE IF EXISTS {shadow}"  # one a killed run left for another change
    DROP_TRIGGER = "DROP TRIGGER IF EXISTS {trigger} ON {table}"
    CREATE_TRIGGER = "CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION {mirror}()"
    CREATE_TRUNCATE_TRIGGER = "CREATE TRIGGER {trigger} AFTER TRUNCATE ON {table} FOR EACH STATEMENT EXECUTE FUNCTION {mirror}()"

    # -- step 2, many short transactions: the backlog, newest first ------------------------
    # Where the copy goes on from: everything below the lowest Seq the shadow holds is still
    # to copy (rows the trigger added are newer than every row of the backlog).
    COPY_FROM = "SELECT min(Seq) FROM {shadow}"
    COPY_BATCH = """\
WITH batch AS (
    SELECT Id, Expires, Headers, Body, Seq FROM {table}
    WHERE Seq < @Below
    ORDER BY Seq DESC
    LIMIT @BatchSize
), copied AS (
    INSERT INTO {shadow} (Id, Expires, Headers, Body, Seq)
    SELECT Id, Expires, Headers, Body, Seq FROM batch
    ON CONFLICT DO NOTHING
)
SELECT count(*), min(Seq) FROM batch"""

    # After the copy: the sessions writing to the live table now (a receiver's delete may have run
    # its trigger before a batch holding its row committed), waited for until they have ended;
    # then SETTLE deletes the copies of messages received meanwhile.
    WRITERS = """\
SELECT DISTINCT virtualtransaction FROM pg_locks
WHERE relation = to_regclass(@Table) AND granted AND pid <> pg_backend_pid()
    AND mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')"""
    WRITERS_LEFT = "SELECT count(DISTINCT virtualtransaction) FROM pg_locks WHERE virtualtransaction = ANY(@Writers)"
    SETTLE = "DELETE FROM {shadow} AS s WHERE NOT EXISTS (SELECT FROM {table} AS t WHERE t.Seq = s.Seq)"

    # -- step 3, one short transaction: the swap -------------------------------------------
    LOCK_BOTH = "LOCK TABLE {table}, {shadow} IN ACCESS EXCLUSIVE MODE"
    COUNTS = "SELECT (SELECT count(*) FROM {table}), (SELECT count(*) FROM {shadow})"
    REPAIR_MISSING = """\
INSERT INTO {shadow} (Id, Expires, Headers, Body, Seq)
SELECT Id, Expires, Headers, Body, Seq FROM {table} AS t
WHERE NOT EXISTS (SELECT FROM {shadow} AS s WHERE s.Seq = t.Seq)
ON CONFLICT DO NOTHING"""
    REPAIR_EXTRA = SETTLE
    # the shadow's sequence goes on from the live one's (the trigger wrote Seq as it came)
    CARRY_SEQUENCE = """\
SELECT setval(pg_get_serial_sequence(@Shadow, 'seq'), greatest(coalesce(last, 0), coalesce(top, 0), 1), last IS NOT NULL OR top IS NOT NULL)
FROM (
    SELECT pg_sequence_last_value(to_regclass(pg_get_serial_sequence(@Table, 'seq'))) AS last, (SELECT max(Seq) FROM {shadow}) AS top
) AS s"""
    SEQUENCE_NAME = "SELECT relname FROM pg_class WHERE oid = to_regclass(pg_get_serial_sequence(@Table, 'seq'))"
    INDEXES = """\
SELECT i.relname, string_agg(a.attname, ',' ORDER BY k.n)
FROM pg_index AS ix
JOIN pg_class AS i ON i.oid = ix.indexrelid
CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute AS a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum
WHERE ix.indrelid = to_regclass(@Table)
GROUP BY i.relname"""
    OWNER = "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass(@Table)"
    GRANTS = """\
SELECT CASE WHEN g.grantee = 0 THEN NULL ELSE pg_get_userbyid(g.grantee) END, g.privilege_type, g.is_grantable
FROM pg_class AS c, aclexplode(c.relacl) AS g
WHERE c.oid = to_regclass(@Table) AND g.grantee <> c.relowner
ORDER BY 1, 2"""
    DROP_LIVE = "DROP TABLE {table}"
    RENAME_TABLE = "ALTER TABLE {shadow} RENAME TO {name}"
    RENAME_SEQUENCE = "ALTER SEQUENCE {sequence} RENAME TO {new}"
    SET_OWNER = "ALTER TABLE {table} OWNER TO {role}"
    GRANT = "GRANT {privilege} ON {table} TO {role}{option}"
    DROP_MIRROR = "DROP FUNCTION IF EXISTS {mirror}()"
    ANALYZE = "ANALYZE {table}"  # the new table has no statistics yet (after the swap, outside its lock)
    PRIVILEGES = frozenset(("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER", "MAINTAIN"))

    def _fit(self, table: str, suffix: str) -> str:
        """table + suffix within PostgreSQL's 63 bytes (a long name is cut and told apart by a hash)."""
        name, limit = table + suffix, self.dialect.MAX_IDENTIFIER_BYTES
        if len(name.encode("utf-8")) <= limit:
            return name
        room = limit - len(suffix.encode("utf-8")) - 9
        cut = table.encode("utf-8")[:room].decode("utf-8", "ignore")
        return f"{cut}_{hashlib.sha256(table.encode('utf-8')).hexdigest()[:8]}{suffix}"

    def names(self, table: TableName) -> OnlineNames:
        return OnlineNames(
            TableName(self._fit(table.table, self.SHADOW_SUFFIX), table.schema, table.catalog),
            TableName(self._fit(table.table, self.MIRROR_SUFFIX), table.schema, table.catalog),
        )

    def _identifiers(self, table: TableName) -> dict[str, str]:
        names, q = self.names(table), self.dialect.qualified
        return {"table": q(table), "shadow": q(names.shadow), "mirror": q(names.mirror)}

    def run(self, connection: Connection, template: str, table: TableName, **values: Any) -> Any:
        """A statement of this section for one table's rewrite: names formatted in, values bound
        (@Table and @Shadow are the two tables' qualified names as text)."""
        identifiers = self._identifiers(table)
        params = parameters_of(template)
        if not params:  # the driver gets the text as is, so a '%' in a quoted name stays literal
            return connection.execution_options(no_parameters=True).exec_driver_sql(template.format(**identifiers))
        sql, order = Statement("online", template, identifiers, params).native("format")
        bound = {"Table": identifiers["table"], "Shadow": identifiers["shadow"], **values}
        return connection.exec_driver_sql(sql, tuple(bound[name] for name in order))

    def current_spec(self, connection: Connection, table: TableName) -> TableSpec | None:
        row = self.run(connection, self.CURRENT, table).first()
        if row is None or row[0] not in self.SEQ_TYPES:
            return None
        return TableSpec(Kind.QUEUE, table, body_string=bool(row[1]), seq_type=self.SEQ_TYPES[row[0]])

    def create_shadow(self, target: TableSpec, profile: Profile, stale: bool) -> list[str]:
        """The shadow's DDL: the transport's queue DDL of the changed table, under the shadow's name
        (after dropping a stale one)."""
        drop = [self.DROP_SHADOW.format(**self._identifiers(target.name))] if stale else []
        return drop + self.dialect.create_queue(target._replace(name=self.names(target.name).shadow), profile)

    def mirror(self, table: TableName) -> list[str]:
        """The mirror function and the live table's triggers (replaced if a killed run left them)."""
        fields = self._identifiers(table)
        tag = self.dialect.dollar_tag(*fields.values())
        trigger, truncate = self.dialect.quote(self.TRIGGER), self.dialect.quote(self.TRUNCATE_TRIGGER)
        return [
            self.MIRROR.format(tag=tag, **fields),
            self.DROP_TRIGGER.format(trigger=trigger, **fields),
            self.DROP_TRIGGER.format(trigger=truncate, **fields),
            self.CREATE_TRIGGER.format(trigger=trigger, **fields),
            self.CREATE_TRUNCATE_TRIGGER.format(trigger=truncate, **fields),
        ]

    def finish(self, connection: Connection, table: TableName) -> list[str]:
        """The swap's last statements, read from the catalog under the swap's lock: drop the live
        table, give the shadow its name, its indexes and sequence the live ones' names, the live
        table's owner and grants, and drop the mirror function."""
        d = self.dialect
        names = self.names(table)
        q = d.qualified
        schema = table.schema
        live_indexes = {cols: name for name, cols in self.run(connection, self.INDEXES, table)}
        shadow_indexes = {cols: name for name, cols in d._run(connection, self.INDEXES, Table=q(names.shadow))}
        live_sequence = self.run(connection, self.SEQUENCE_NAME, table).scalar()
        shadow_sequence = d._run(connection, self.SEQUENCE_NAME, Table=q(names.shadow)).scalar()
        owner = self.run(connection, self.OWNER, table).scalar()
        grants = list(self.run(connection, self.GRANTS, table))
        statements = [
            self.DROP_LIVE.format(table=q(table)),
            self.RENAME_TABLE.format(shadow=q(names.shadow), name=d.quote(table.table)),
        ]
        for cols, name in sorted(shadow_indexes.items()):
            new = live_indexes.get(cols)
            if new is not None and new != name:
                statements += d.rename_index(table, name, new)
        if live_sequence and shadow_sequence and live_sequence != shadow_sequence:
            statements.append(self.RENAME_SEQUENCE.format(sequence=q(TableName(shadow_sequence, schema)), new=d.quote(live_sequence)))
        if owner is not None:
            statements.append(self.SET_OWNER.format(table=q(table), role=d.quote(owner)))
        for role, privilege, grantable in grants:
            if privilege not in self.PRIVILEGES:
                continue  # a privilege this release does not know: not pasted into SQL
            grantee = "PUBLIC" if role is None else d.quote(role)
            option = " WITH GRANT OPTION" if grantable else ""
            statements.append(self.GRANT.format(privilege=privilege, table=q(table), role=grantee, option=option))
        statements.append(self.DROP_MIRROR.format(mirror=q(names.mirror)))
        return statements
