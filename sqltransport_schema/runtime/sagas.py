"""Saga persistence from Python: find, insert, update and complete rows of a SQL persistence saga table.

The statements are the engine's (`Dialect.saga_statements`: SQL persistence's own texts, with
its parameter names and row locks, printable with `sqltransport-schema statements --sagas`).
Reads lock the row (UPDLOCK / FOR UPDATE) until the caller's transaction ends, as an endpoint's
do. Updates and completions are optimistic: they name the Concurrency value that was read, and
return False when another writer changed or completed the saga first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from sqlalchemy.engine import Connection, Engine

from .. import engines, errors
from ..db import upgrade_command_for
from ..revisions import deployed_blueprint
from ..schema import Blueprint, Kind, TableName, TableSpec
from .transport import execute

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.12; SQLAlchemy depends on typing_extensions

__all__ = ["SagaTable", "SagaRow", "SagaVersions", "DuplicateSaga", "DEFAULT_PERSISTENCE_VERSION"]

_SAME = object()
# What insert writes as PersistenceVersion when the caller names none (and update, for a row
# whose version was not read: SQL persistence's select list leaves it out).
DEFAULT_PERSISTENCE_VERSION = "0.0.0"


class SagaVersions(TypedDict, total=False):
    """SagaTable.insert's row columns past the data, declared once (a new saga's; update keeps or
    replaces the versions): Metadata (default "{}"), PersistenceVersion (default
    DEFAULT_PERSISTENCE_VERSION), SagaTypeVersion (default "0.0.0")."""

    metadata: str
    persistence_version: str
    saga_type_version: str


class DuplicateSaga(errors.Conflict):
    """A saga with this Id or correlation value exists already (a unique index refused the insert)."""


@dataclass(frozen=True)
class SagaRow:
    """One saga instance as read or written: pass it back to `update` or `complete`."""

    id: str
    metadata: str
    data: str
    persistence_version: str | None  # None when read: SQL persistence's select list leaves it out
    saga_type_version: str
    concurrency: int


def _text(value: Any) -> str:
    if isinstance(value, (dict, list)):  # jsonb comes back parsed on PostgreSQL
        return json.dumps(value, separators=(",", ":"))
    return value if isinstance(value, str) else str(value)


def deployed_spec(engine: Engine, blueprint: Blueprint, name: TableName, kind: Kind, hint: str = "") -> tuple[engines.Dialect, TableSpec]:
    """The engine's dialect and the blueprint's spec of the SQL persistence table `name` of this kind;
    NotFound lists the tables of the kind it holds (then `hint`)."""
    dialect = engines.for_sqlalchemy(engine.dialect.name)
    found = [s for s in blueprint.tables if s.kind is kind and dialect.table_key(s.name) == dialect.table_key(name)]
    if not found:
        known = ", ".join(s.name.table for s in blueprint.tables if s.kind is kind) or "none"
        raise errors.NotFound(f"no {kind.value} table {name} in the deployed topology; {kind.value} tables: {known}{hint}")
    return dialect, found[0]


def stamped_blueprint(engine: Engine, config_file: str) -> Blueprint:
    """The blueprint of the revision the database is stamped with: what a table's from_database reads."""
    return deployed_blueprint(engine, config_file, upgrade_command_for(engine))


class SagaTable:
    """One saga table on one engine."""

    def __init__(self, dialect: engines.Dialect, spec: TableSpec):
        if spec.kind is not Kind.SAGA:
            raise errors.UsageError(f"{spec.name} is not a saga table")
        self.dialect = dialect
        self.spec = spec
        self.statements = dialect.saga_statements(spec)
        # update without a transitional value: the engine's update of the table as it would be without
        # the transitional property, which leaves that column as it is
        self._update_keeping = dialect.saga_statements(spec._replace(transitional=None))["update_saga"] if spec.transitional else None

    @classmethod
    def from_database(
        cls, engine: Engine, table: str, schema: str | None = None, catalog: str | None = None, config_file: str = "alembic.ini"
    ) -> SagaTable:
        """The saga table as the revision the database is stamped with records it."""
        return cls.from_blueprint(engine, stamped_blueprint(engine, config_file), TableName(table, schema, catalog))

    @classmethod
    def from_blueprint(cls, engine: Engine, blueprint: Blueprint, name: TableName) -> SagaTable:
        """The saga table of that name as a blueprint records it (`from_database` reads the deployed one)."""
        return cls(*deployed_spec(engine, blueprint, name, Kind.SAGA))

    # -- reading -----------------------------------------------------------------------
    @staticmethod
    def _row(cursor: Any) -> SagaRow | None:
        row = cursor.fetchone()  # Id, SagaTypeVersion, Concurrency, Metadata, Data (SAGA_RESULT)
        if row is None:
            return None
        return SagaRow(_text(row[0]), _text(row[3]), _text(row[4]), None, row[1], int(row[2]))

    def get(self, conn: Connection, saga_id: str) -> SagaRow | None:
        """The saga with this Id, its row locked until the transaction ends."""
        return self._row(execute(conn, self.statements["get_saga_by_id"], {"Id": saga_id}))

    def find(self, conn: Connection, value: Any, transitional_value: Any = _SAME) -> SagaRow | None:
        """The saga whose correlation value is `value` (SQL persistence's lookup, row locked).
        With a transitional property and no match, this project's addition: the saga whose
        transitional value is `transitional_value` (by default the same value, when both
        properties have one type). Upstream endpoints never make that second lookup."""
        if self.spec.correlation is None:
            raise errors.NotFound(
                f"saga table {self.dialect.display(self.dialect.persistence_table(self.spec))} has no correlation property: use get()"
            )
        found = self._row(execute(conn, self.statements["find_saga"], {"propertyValue": value}))
        if found is not None or self.spec.transitional is None:
            return found
        if transitional_value is _SAME:
            transitional_value = value if self.spec.transitional.type == self.spec.correlation.type else None
        if transitional_value is None:
            return None
        return self._row(execute(conn, self.statements["find_saga_by_transitional"], {"TransitionalCorrelationId": transitional_value}))

    # -- writing -----------------------------------------------------------------------
    def _transitional(self, params: dict, value: Any) -> dict:
        if self.spec.transitional is not None:
            params["TransitionalCorrelationId"] = value
        return params

    def insert(
        self,
        conn: Connection,
        saga_id: str,
        data: str,
        correlation_value: Any = None,
        *,
        transitional_value: Any = None,
        **versions: Unpack[SagaVersions],
    ) -> SagaRow:
        """Store a new saga (Concurrency 1). DuplicateSaga: its Id or correlation value is taken.
        The other keyword arguments are SagaVersions'."""
        unknown = sorted(set(versions) - set(SagaVersions.__annotations__))
        if unknown:
            raise TypeError(f"insert() got an unexpected keyword argument {unknown[0]!r}")
        metadata = versions.get("metadata", "{}")
        persistence_version = versions.get("persistence_version", DEFAULT_PERSISTENCE_VERSION)
        saga_type_version = versions.get("saga_type_version", "0.0.0")
        params = {
            "Id": saga_id,
            "Metadata": metadata,
            "Data": data,
            "PersistenceVersion": persistence_version,
            "SagaTypeVersion": saga_type_version,
        }
        if self.spec.correlation is not None:
            params["CorrelationId"] = correlation_value
        try:
            execute(conn, self.statements["insert_saga"], self._transitional(params, transitional_value))
        except conn.dialect.loaded_dbapi.IntegrityError as exc:
            where = self.dialect.display(self.dialect.persistence_table(self.spec))
            raise DuplicateSaga(f"saga {saga_id} not stored in {where}: {exc}") from exc
        return SagaRow(saga_id, metadata, data, persistence_version, saga_type_version, 1)

    def update(
        self,
        conn: Connection,
        saga: SagaRow,
        data: str,
        *,
        transitional_value: Any = _SAME,
        persistence_version: str | None = None,
        saga_type_version: str | None = None,
    ) -> SagaRow | None:
        """Write new data if the saga is still at the Concurrency it was read at. None: another
        writer won the race (the caller retries the message); else the row as it now is.
        The transitional column is written only when transitional_value is given (None writes
        NULL): left out, the value stored stays (a row read carries no correlation values to
        write back, as SQL persistence's select list leaves them out)."""
        persistence_version = persistence_version or saga.persistence_version or DEFAULT_PERSISTENCE_VERSION
        saga_type_version = saga_type_version or saga.saga_type_version
        params = {
            "Id": saga.id,
            "Data": data,
            "PersistenceVersion": persistence_version,
            "SagaTypeVersion": saga_type_version,
            "Concurrency": saga.concurrency,
        }
        if transitional_value is _SAME and self._update_keeping is not None:
            cursor = execute(conn, self._update_keeping, params)
        else:
            cursor = execute(conn, self.statements["update_saga"], self._transitional(params, transitional_value))
        if cursor.rowcount != 1:
            return None
        return SagaRow(saga.id, saga.metadata, data, persistence_version, saga_type_version, saga.concurrency + 1)

    def complete(self, conn: Connection, saga: SagaRow) -> bool:
        """Delete a completed saga if it is still at the Concurrency it was read at; False: lost the race."""
        cursor = execute(conn, self.statements["complete_saga"], {"Id": saga.id, "Concurrency": saga.concurrency})
        return cursor.rowcount == 1
