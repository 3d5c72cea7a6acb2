"""SQL Server's GRANT statements for `sqltransport-schema grants` (the nested `MSSQL.Grants`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...revisions import BLUEPRINT_TABLE
from ...schema import TableName
from ..base import Dialect

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ...grants import GrantPlan, TableGrant


class Grants(Dialect.Grants):
    """Table grants per need; grants in another catalog follow a USE of it."""

    # Privileges per need, from the statements above: receive/receive_batch are DELETE ... OUTPUT
    # deleted.* with a WHERE (SELECT, DELETE); peek and the start-up checks read (SELECT, which
    # also makes the table's metadata visible in sys.columns/sys.indexes); move_due inserts into
    # the input queue; subscribe is a MERGE (SELECT, INSERT, UPDATE). RowVersion is an IDENTITY:
    # no sequence to grant. GRANT cannot name another database, so grants for tables in another
    # catalog follow a USE of it (the login needs a user in each such database).
    GRANT_PRIVILEGES = {
        "receive": "SELECT, INSERT, DELETE",
        "send": "INSERT",
        "delayed": "SELECT, INSERT, DELETE",
        "subscriptions": "SELECT, INSERT, UPDATE, DELETE",
        "saga": "SELECT, INSERT, UPDATE, DELETE",
        "outbox": "SELECT, INSERT, UPDATE, DELETE",  # get, store, set as dispatched, cleanup
    }
    GRANT_TABLE = "GRANT {privileges} ON {table} TO {role};"
    USE_CATALOG = "USE {catalog};"
    # Seed 003: the installer creates tables and reads the catalog views for its guards.
    INSTALLER_DATABASE = ("GRANT CREATE TABLE TO {role};", "GRANT VIEW DEFINITION TO {role};")
    INSTALLER_CREATE_SCHEMA = "GRANT CREATE SCHEMA TO {role};"
    # ALTER on the schema: create, alter and drop its tables; the drop guards and alembic_version
    # read and write rows, which ALTER alone does not allow.
    INSTALLER_SCHEMA = (
        "GRANT ALTER ON SCHEMA::{schema} TO {role};",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON SCHEMA::{schema} TO {role};",
    )

    # A monitoring login reads every table: SELECT also makes a table's metadata visible in the
    # catalog views status (sys.partitions: --estimate's rows), its high water (IDENT_CURRENT) and
    # check read. Nothing else: no INSERT, UPDATE, DELETE, ALTER or VIEW DEFINITION.
    # Without VIEW DEFINITION sys.indexes.filter_definition reads NULL (has_filter does not): check then
    # compares a filtered index as filtered only, and its report says so (check.unread_filters).
    MONITOR_NOTES = (
        "-- status (--estimate: sys.partitions) and check read the catalog views, which show what SELECT is granted on.",
        "-- filters, defaults and computed columns need VIEW DEFINITION (not granted): check compares them as there, says so.",
    )

    @staticmethod
    def _by_catalog(items: Iterable[Any], catalog_of: Callable[[Any], str | None]) -> dict:
        groups: dict = {None: []}
        for item in items:
            groups.setdefault(catalog_of(item), []).append(item)
        return groups

    def _with_catalogs(self, groups: dict, render: Callable[[Any], list[str]]) -> list[str]:
        lines: list[str] = []
        for catalog, items in groups.items():
            if not items:
                continue
            if catalog is not None:
                lines.append(self.USE_CATALOG.format(catalog=self.dialect.quote(catalog)))
            for item in items:
                lines.extend(render(item))
        return lines

    def _table_grants(self, plan: GrantPlan, role: str, privileges: Callable[[TableGrant], str]) -> list[str]:
        role_q = self.dialect.quote(role)

        def render(grant: TableGrant) -> list[str]:
            table = self.dialect.qualified(grant.table._replace(catalog=None))
            return [self.GRANT_TABLE.format(privileges=privileges(grant), table=table, role=role_q)]

        # First, in the login's own database: Transport.from_database reads which revision is deployed,
        # and the blueprint the migrations stored.
        own = [
            self.GRANT_TABLE.format(privileges="SELECT", table=self.dialect.qualified(TableName(t)), role=role_q)
            for t in ("alembic_version", BLUEPRINT_TABLE)
        ]
        return own + self._with_catalogs(self._by_catalog(plan.tables, lambda g: g.table.catalog), render)

    def runtime(self, plan: GrantPlan, role: str) -> list[str]:
        return self._table_grants(plan, role, lambda grant: self.GRANT_PRIVILEGES[grant.need])

    def monitor(self, plan: GrantPlan, role: str) -> list[str]:
        return self._table_grants(plan, role, lambda grant: "SELECT") + list(self.MONITOR_NOTES)

    def installer(self, plan: GrantPlan, role: str) -> list[str]:
        role_q = self.dialect.quote(role)
        per_catalog: dict = {}
        for grant in plan.tables:
            per_catalog.setdefault(grant.table.catalog, {}).setdefault(grant.table.schema or self.dialect.default_schema, None)
        per_catalog.setdefault(None, {}).setdefault(self.dialect.default_schema, None)  # alembic_version lives here
        lines: list[str] = []
        for catalog in sorted(per_catalog, key=lambda c: (c is not None, c or "")):
            if catalog is not None:
                lines.append(self.USE_CATALOG.format(catalog=self.dialect.quote(catalog)))
            schemas = list(per_catalog[catalog])
            lines.extend(line.format(role=role_q) for line in self.INSTALLER_DATABASE)
            if any(schema != self.dialect.default_schema for schema in schemas):
                lines.append(self.INSTALLER_CREATE_SCHEMA.format(role=role_q))
            for schema in schemas:
                grants = [line.format(schema=self.dialect.quote(schema), role=role_q) for line in self.INSTALLER_SCHEMA]
                if schema == self.dialect.default_schema:
                    lines.extend(grants)
                else:
                    lines.append(f"-- schema {self.dialect.quote(schema)}: created (and owned) by the installer; if it exists already:")
                    lines.extend("-- " + line for line in grants)
        return lines
