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
from typing import TYPE_CHECKING

from .schema import Blueprint

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory
    from sqlalchemy.engine import Connection, Engine


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


def deployed_blueprint(engine: Engine, config_file: str = "alembic.ini") -> Blueprint:
    """The blueprint recorded by the revision the database is stamped with (what the runtime serves)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    with engine.connect() as conn:
        revision = deployed_revision(conn)
    return recorded_blueprint(ScriptDirectory.from_config(Config(config_file)), revision)
