"""SQL Server: the transport's own DDL and statements for every version, in one package a DBA can read.

The class `MSSQL` holds identifiers, names and limits, and composes the sections, one module each:
`ddl` (columns, create, drop, upgrade, schemas), `runtime` (the runtime statements), `sagas`, and
the nested sections `catalog`, `grants`, `script`, `pipeline` and `operations`.

Placeholders: {table} is the bracket-quoted qualified name, {name} the same text
escaped for use inside an N'...' literal, {sys} the catalog's sys schema
(`[catalog].sys` or `sys`). Nothing else ever reaches the SQL text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base import Dialect
from . import catalog, grants, live_bus, pipeline, script
from .ddl import DDL
from .runtime import Runtime
from .sagas import Sagas

if TYPE_CHECKING:
    from ...schema import TableName, TableSpec
    from ...versions import Profile


class MSSQL(DDL, Runtime, Sagas, Dialect):
    name = "mssql"
    sqlalchemy_name = "mssql"
    drivers = ("pyodbc",)
    default_schema = "dbo"
    case_insensitive_names = True  # the default collation compares names without case
    GUARD_ERROR_CODES = frozenset({50000})  # the guards' THROW 50000 (pyodbc's native error, pymssql's number)
    PERMISSION_DENIED_CODES = frozenset({229, 230})  # permission denied on an object / on a column
    batch_separator = "GO"  # sqlcmd's and SSMS's batch separator
    columns_beside_headers = True
    MAX_IDENTIFIER = 128  # characters of a table, schema, catalog, column or index name

    # =====================================================================================
    # -- identifiers and names ------------------------------------------------------------
    # =====================================================================================
    def quote(self, identifier: str) -> str:
        return "[" + identifier.replace("]", "]]") + "]"

    def literal_text(self, text: str) -> str:
        """Text placed inside an existing '...' literal."""
        return text.replace("'", "''")

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        schema = name.schema if name.schema is not None else self.default_schema
        parts = [schema, name.table]
        if name.catalog is not None and (profile is None or profile.three_part_names):
            parts.insert(0, name.catalog)
        return ".".join(self.quote(part) for part in parts)

    def _sys(self, catalog: str | None) -> str:
        return f"{self.quote(catalog)}.sys" if catalog is not None else "sys"

    def _fields(self, spec: TableSpec, profile: Profile | None) -> dict:
        table = self.qualified(spec.name, profile)
        catalog = spec.name.catalog if profile is None or profile.three_part_names else None
        return {"table": table, "name": self.literal_text(table), "sys": self._sys(catalog)}

    def name_problems(self, name: TableName) -> list[tuple[str, str]]:
        problems = []
        for part, value in (("table", name.table), ("schema", name.schema), ("catalog", name.catalog)):
            if value is not None and len(value) > self.MAX_IDENTIFIER:
                problems.append((part, f"is {len(value)} characters long; SQL Server names hold at most {self.MAX_IDENTIFIER}"))
        return problems

    checks_server_version = True

    def refuse_older_server(self, sqlalchemy_dialect: Any, command: str) -> None:
        from ...errors import Unsupported
        from .server_versions import older_server

        refusal = older_server(command, getattr(sqlalchemy_dialect, "server_version_info", None))
        if refusal is not None:
            raise Unsupported(refusal)

    # sqlcmd (classic and go-sqlcmd) and SSMS in SQLCMD mode replace `$(name)` with a variable
    # everywhere in a script, inside bracketed names and literals too, unless run with -x: an error,
    # or a table silently renamed where such a variable exists. Such names are refused.
    SQLCMD_VARIABLE = "$("

    def script_name_problems(self, name: TableName) -> list[tuple[str, str]]:
        return [
            (part, f"holds {self.SQLCMD_VARIABLE!r}, which sqlcmd reads as one of its variables in a SQL Server script")
            for part, value in (("table", name.table), ("schema", name.schema), ("catalog", name.catalog))
            if value is not None and self.SQLCMD_VARIABLE in value
        ]

    # =====================================================================================
    # -- nested sections, one module each: they only need the dialect's quoting ------------
    # =====================================================================================
    Catalog = catalog.Catalog
    Grants = grants.Grants
    Script = script.Script
    Pipeline = pipeline.Pipeline
    LiveBus = live_bus.LiveBus


__all__ = ["MSSQL"]
