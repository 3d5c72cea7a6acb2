"""Which topology the migrations record, and which revision a database is stamped with.

Every compiled revision carries the blueprint of its topology (its SNAPSHOT). compile asks for the
head's, check and the runtime for the deployed one's, adopt for all of them, the pipeline's plan
for two. Reading them is written here once, on Alembic's ScriptDirectory and MigrationContext and
the schema's Blueprint only, so that every layer above the engines may use it without importing
`migrate`. Alembic is imported when called: the runtime imports this module and never needs
Alembic until it looks a deployment up.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .schema import Blueprint

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Engine

# The table the migrations keep the deployed blueprint in (beside alembic_version, in the default
# schema), so the runtime opens from the database alone: no alembic.ini, no migrations folder.
BLUEPRINT_TABLE = "sqltransport_blueprint"


class SnapshotError(LookupError):
    """The migrations or the stamp leave the topology unknown: several heads, a merge that records
    no snapshot, a database stamped with no revision or with several."""


# --------------------------------------------------------------------------- the migrations folder
def blueprint_at(script: ScriptDirectory, revision_id: str) -> Blueprint | None:
    """The blueprint recorded by a revision, or by its nearest ancestor that records one."""
    revision = script.get_revision(revision_id)
    while revision is not None:
        snapshot = getattr(revision.module, "SNAPSHOT", None)
        if snapshot is not None:
            return Blueprint.from_snapshot(snapshot)
        down = revision.down_revision
        if isinstance(down, tuple):
            raise SnapshotError(f"revision {revision.revision} merges branches and records no snapshot; the deployed topology is unknown")
        revision = script.get_revision(down) if down else None
    return None


def recorded_blueprint(script: ScriptDirectory, revision_id: str) -> Blueprint:
    """As blueprint_at, for a revision that must record a topology (the one a database is stamped with)."""
    found = blueprint_at(script, revision_id)
    if found is None:
        raise SnapshotError(f"revision {revision_id} and its ancestors record no topology snapshot")
    return found


def head_blueprint(script: ScriptDirectory) -> tuple[str | None, Blueprint | None]:
    """(head revision id, blueprint recorded at or below the head); (None, None) before the first revision."""
    heads = script.get_heads()
    if len(heads) > 1:
        raise SnapshotError(f"migrations have several heads ({', '.join(heads)}); merge them with `alembic merge heads` first")
    if not heads:
        return None, None
    return heads[0], blueprint_at(script, heads[0])


def snapshots(script: ScriptDirectory) -> Iterator[tuple[str, Blueprint]]:
    """(revision id, recorded blueprint) of every revision that records one, newest first."""
    for revision in script.walk_revisions():
        snapshot = getattr(revision.module, "SNAPSHOT", None)
        if snapshot is not None:
            yield revision.revision, Blueprint.from_snapshot(snapshot)


# --------------------------------------------------------------------------- the database's stamp
def stamps(connection: Connection, version_table: str | None = None) -> tuple[str, ...]:
    """The revisions the database's version table holds (none before the first upgrade)."""
    from alembic.runtime.migration import MigrationContext

    opts = {"version_table": version_table} if version_table else {}
    return tuple(MigrationContext.configure(connection, opts=opts).get_current_heads())


def deployed_revision(connection: Connection) -> str:
    """The one revision the database is stamped with."""
    heads = stamps(connection)
    if len(heads) != 1:
        raise SnapshotError(
            f"the database is stamped with {len(heads)} revisions ({', '.join(heads) or 'none'}); run `alembic upgrade head`"
        )
    return heads[0]


def _blueprint_table() -> Table:
    from sqlalchemy import Column, MetaData, String, Table, Text

    return Table(BLUEPRINT_TABLE, MetaData(), Column("revision", String(64), primary_key=True), Column("snapshot", Text, nullable=False))


def record_blueprint(connection: Connection, script: ScriptDirectory) -> None:
    """Keep BLUEPRINT_TABLE at the blueprint of the revision the database is now stamped with
    (migrate.env runs this after every online upgrade or downgrade, in its transaction); at base
    the table goes."""
    table = _blueprint_table()
    heads = stamps(connection)
    found = blueprint_at(script, heads[0]) if len(heads) == 1 else None
    if found is None:
        table.drop(connection, checkfirst=True)
        return
    table.create(connection, checkfirst=True)
    connection.execute(table.delete())
    connection.execute(table.insert().values(revision=heads[0], snapshot=found.to_snapshot()))


def stored_blueprint(connection: Connection) -> Blueprint | None:
    """The blueprint the migrations left in BLUEPRINT_TABLE, if it matches the stamp (None otherwise)."""
    from sqlalchemy import inspect, select
    from sqlalchemy.exc import DBAPIError

    if not inspect(connection).has_table(BLUEPRINT_TABLE):
        return None
    table = _blueprint_table()
    try:
        row = connection.execute(select(table.c.revision, table.c.snapshot)).first()
    except DBAPIError:  # a login without the grant (`sqltransport-schema grants` gives it): read the migrations
        connection.rollback()
        return None
    if row is None or stamps(connection) != (row.revision,):
        return None
    return Blueprint.from_snapshot(row.snapshot)


def deployed_blueprint(engine: Engine, config_file: str = "alembic.ini") -> Blueprint:
    """The blueprint of the revision the database is stamped with (what the runtime serves): the
    copy the migrations stored in the database, else read from the migrations config_file names."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    with engine.connect() as conn:
        stored = stored_blueprint(conn)
        if stored is not None:
            return stored
        revision = deployed_revision(conn)
    if not Path(config_file).is_file():
        raise SnapshotError(
            f"the database holds no {BLUEPRINT_TABLE} (stamped by an offline script, or by a release before it) and "
            f"{config_file} does not exist: run `alembic upgrade head` once online, or pass the project's alembic.ini"
        )
    return recorded_blueprint(ScriptDirectory.from_config(Config(config_file)), revision)
