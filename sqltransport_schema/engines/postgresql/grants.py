"""PostgreSQL's GRANT statements (sqltransport-schema grants): `PostgreSQL.Grants`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...revisions import BLUEPRINT_TABLE
from ...schema import SchemaName, TableName
from ..base import Dialect

if TYPE_CHECKING:
    from ...grants import GrantPlan


class Grants(Dialect.Grants):
    """Schema usage, table privileges per need and the serial columns' sequences."""

    # Privileges per need, verified against the statements above on a real server:
    # receive/receive_batch/peek/purge_expired and next_due lock rows with SELECT ... FOR UPDATE
    # SKIP LOCKED, which needs UPDATE on at least one column (UPDATE (id) is enough, and lets no
    # payload change); DELETE ... WHERE/RETURNING needs SELECT; every INSERT into a queue draws
    # Seq from its serial sequence, which needs USAGE on that sequence.
    GRANT_PRIVILEGES = {
        "receive": "SELECT, INSERT, UPDATE (id), DELETE",
        "send": "INSERT",
        "delayed": "SELECT, INSERT, UPDATE (id), DELETE",
        "subscriptions": "SELECT, INSERT, UPDATE, DELETE",
        "saga": "SELECT, INSERT, UPDATE, DELETE",  # subscribe is INSERT ... ON CONFLICT DO UPDATE
        "outbox": "SELECT, INSERT, UPDATE, DELETE",  # get, store, set as dispatched, cleanup
    }
    GRANT_TABLE = "GRANT {privileges} ON TABLE {table} TO {role};"
    GRANT_SEQUENCE = "GRANT USAGE ON SEQUENCE {sequence} TO {role};"
    GRANT_SCHEMA_USAGE = "GRANT USAGE ON SCHEMA {schema} TO {role};"
    # The serial Seq column's sequence: <table>_seq_seq (table names stop at 55 bytes so this fits).
    SEQUENCE_NAME = "{table}_seq_seq"
    INSTALLER_DATABASE = (
        "DO {tag} BEGIN EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO %I', current_database(), {role_literal}); END {tag};"
    )
    GRANT_SCHEMA_CREATE = "GRANT USAGE, CREATE ON SCHEMA {schema} TO {role};"
    INSTALLER_NOTES = (
        "-- Ownership: ALTER TABLE, DROP TABLE and the queue upgrades need the tables' owner. The installer",
        "-- owns what it creates; tables created by another login must be handed over first:",
        "--   ALTER TABLE <table> OWNER TO {role};  (and ALTER SCHEMA <schema> OWNER TO {role})",
        "-- Runtime grants (sqltransport-schema grants --login ...) must be run by the owner (or a superuser)",
        "-- after each upgrade that creates tables.",
    )

    # A monitoring login reads every table, and each queue's sequence (status's high water reads the
    # last value it gave: SELECT on a sequence allows no nextval). The estimate and check read pg_class,
    # the statistics functions and the system catalogs, which every login may read.
    GRANT_SEQUENCE_READ = "GRANT SELECT ON SEQUENCE {sequence} TO {role};"
    MONITOR_NOTES = (
        "-- status --estimate reads pg_class and the statistics functions (pg_stat_get_live_tuples), and check reads",
        "-- the system catalogs: every login may read them. Nothing here lets the login write, lock or delete.",
    )

    def _schema_of(self, schema: SchemaName | None) -> str:
        return self.dialect.quote(schema.schema if schema is not None else self.dialect.default_schema)

    def runtime(self, plan: GrantPlan, role: str) -> list[str]:
        role_q = self.dialect.quote(role)
        lines = [self.GRANT_SCHEMA_USAGE.format(schema=self._schema_of(s), role=role_q) for s in plan.schemas]
        lines += self._read_blueprint(role_q)
        for grant in plan.tables:
            name = grant.table._replace(catalog=None)  # PostgreSQL does not qualify with a catalog
            lines.append(
                self.GRANT_TABLE.format(privileges=self.GRANT_PRIVILEGES[grant.need], table=self.dialect.qualified(name), role=role_q)
            )
            if grant.serial:
                sequence = name._replace(table=self.SEQUENCE_NAME.format(table=name.table))
                lines.append(self.GRANT_SEQUENCE.format(sequence=self.dialect.qualified(sequence), role=role_q))
        return lines

    def _read_blueprint(self, role_q: str) -> list[str]:
        """Transport.from_database reads which revision is deployed, and the blueprint the migrations stored."""
        return [
            self.GRANT_TABLE.format(privileges="SELECT", table=self.dialect.qualified(TableName(t)), role=role_q)
            for t in ("alembic_version", BLUEPRINT_TABLE)
        ]

    def monitor(self, plan: GrantPlan, role: str) -> list[str]:
        role_q = self.dialect.quote(role)
        lines = [self.GRANT_SCHEMA_USAGE.format(schema=self._schema_of(s), role=role_q) for s in plan.schemas]
        lines += self._read_blueprint(role_q)
        for grant in plan.tables:
            name = grant.table._replace(catalog=None)
            lines.append(self.GRANT_TABLE.format(privileges="SELECT", table=self.dialect.qualified(name), role=role_q))
            if grant.serial:
                sequence = name._replace(table=self.SEQUENCE_NAME.format(table=name.table))
                lines.append(self.GRANT_SEQUENCE_READ.format(sequence=self.dialect.qualified(sequence), role=role_q))
        return lines + list(self.MONITOR_NOTES)

    def installer(self, plan: GrantPlan, role: str) -> list[str]:
        role_q = self.dialect.quote(role)
        role_literal = self.dialect.literal(role)
        lines = [self.INSTALLER_DATABASE.format(role_literal=role_literal, tag=self.dialect.dollar_tag(role_literal))]
        schemas = [self.dialect.default_schema] + [
            s.schema for s in plan.schemas if s is not None and s.schema != self.dialect.default_schema
        ]
        lines.append(self.GRANT_SCHEMA_CREATE.format(schema=self.dialect.quote(self.dialect.default_schema), role=role_q))
        for schema in schemas[1:]:
            lines.append(f"-- schema {self.dialect.quote(schema)}: created (and owned) by the installer; if it exists already:")
            lines.append("-- " + self.GRANT_SCHEMA_CREATE.format(schema=self.dialect.quote(schema), role=role_q))
        lines.extend(note.format(role=role_q) for note in self.INSTALLER_NOTES)
        return lines
