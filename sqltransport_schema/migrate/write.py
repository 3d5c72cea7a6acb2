"""Write a compiled plan as a revision, the way `alembic revision` writes one.

`command.revision` runs env.py, whose revision branch (migrate.env) reads no database: it
configures Alembic with the template arguments the writer gives for the plan against the
script directory's head. The plan's operations go into the MigrationScript, where Alembic
renders each with the renderer its class registers (migrate/ops.py), and script.py.mako
lays out the file: the summary, `transport_version`, upgrade(), downgrade() and the SNAPSHOT.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic import command
from alembic.config import Config
from alembic.script import Script, ScriptDirectory

from .message import revision_message
from .ops import one_line

if TYPE_CHECKING:  # pragma: no cover
    from alembic.runtime.migration import MigrationContext

    from .compile import Plan

# Config.attributes key: (ScriptDirectory) -> keyword arguments of context.configure, which
# env.py's revision branch calls; set only while compile writes a revision.
REVISION_OPTION = "sqltransport_revision"


def write_revision(
    config: Config,
    message: str | None,
    plan_at: Callable[[ScriptDirectory], Plan],
    topology_file: str | None = None,
    topology_files: Sequence[tuple[str, str]] = (),
    head: str = "head",
) -> tuple[Plan, Path | None]:
    """Plan against the head (plan_at) and write the revision, unless the plan is empty.
    topology_files: (file relative to the root file, sha256) of each file of the topology.
    head="heads": a merge revision, its down_revision every head. message None: one read from the
    plan (message.revision_message), for the file's name and its docstring."""
    planned: list[Plan] = []
    titles: list[str] = []

    def configure(script: ScriptDirectory) -> dict:
        planned.append(plan_at(script))
        titles.append(message or revision_message(planned[-1]))
        files = {"topology_file": topology_file, "topology_files": list(topology_files)}
        return {"template_args": {**_template_args(titles[-1], planned[-1]), **files}}

    def directives(context: MigrationContext, revision: Any, scripts: list) -> None:
        result = planned[-1]
        if result.empty:
            scripts.clear()  # Alembic writes no file for an empty list
            return
        scripts[0].message = titles[-1]  # the file's name is made from it
        scripts[0].upgrade_ops.ops.extend(result.upgrade)
        scripts[0].downgrade_ops.ops.extend(result.downgrade)

    config.attributes[REVISION_OPTION] = configure
    try:
        with _revision_environment(config):
            # sql: Alembic's offline mode, so that the environment connects to no database
            written = command.revision(config, message, sql=True, head=head, process_revision_directives=directives)
    finally:
        del config.attributes[REVISION_OPTION]
    return planned[-1], Path(written.path) if isinstance(written, Script) else None


@contextmanager
def _revision_environment(config: Config) -> Iterator[None]:
    """`alembic revision` runs env.py (and with it process_revision_directives) only with this option."""
    before = config.get_main_option("revision_environment")
    config.set_main_option("revision_environment", "true")
    try:
        yield
    finally:
        if before is None:
            config.remove_main_option("revision_environment")
        else:
            config.set_main_option("revision_environment", before)


def _template_args(message: str, result: Plan) -> dict:
    """What script.py.mako writes beside the rendered operations."""
    return {
        "docstring_message": _docstring_text(message),
        "summary": _docstring_text("\n".join(result.summary()) or "no schema change"),
        "transport_version": result.new.transport_version,
        "snapshot": result.new.to_snapshot(),
    }


def _docstring_text(text: str) -> str:
    """Names may hold backslashes and quotes; in the revision's docstring they stay text."""
    return "\n".join(one_line(line) for line in text.split("\n")).replace("\\", "\\\\").replace('"', '\\"')
