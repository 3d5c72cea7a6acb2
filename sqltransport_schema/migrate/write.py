"""Write a compiled plan as a revision, the way `alembic revision` writes one.

`command.revision` runs env.py, whose revision branch (migrate.env) reads no database: it
configures Alembic with the template arguments the writer gives for the plan against the
script directory's head. The plan's operations go into the MigrationScript, where Alembic
renders each with the renderer its class registers (migrate/ops.py), and script.py.mako
lays out the file: the summary, `transport_version`, upgrade(), downgrade() and the SNAPSHOT.

Alembic imports the file it has just written (to return its Script), which compiles every line:
for a large plan most of compile's time. Unless the project has post-write hooks (which must see
the whole file), the MigrationScript carries one placeholder statement per function instead, so
Alembic writes, names and imports a small file, and the operations (rendered as Alembic renders
them, one line each) take the placeholders' places in it afterwards: the same text, compiled
once, by whatever reads the revision next.
"""

from __future__ import annotations

import importlib.util
import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic import command
from alembic.autogenerate import renderers
from alembic.config import Config
from alembic.operations import MigrateOperation
from alembic.script import Script, ScriptDirectory

from .message import revision_message
from .ops import TransportOp, one_line

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
    places: dict[str, list[str]] = {}  # placeholder -> the operations' lines it stands for
    written_as: list[str] = []  # the script directory's output encoding
    hooked: list[bool] = []  # the post-write hooks Alembic runs on the file (they see all of it)

    def configure(script: ScriptDirectory) -> dict:
        places.clear()
        written_as[:] = [script.output_encoding]
        hooked[:] = [bool(script.hooks)]
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
        for ops, operations in ((scripts[0].upgrade_ops.ops, result.upgrade), (scripts[0].downgrade_ops.ops, result.downgrade)):
            lines = None if hooked[-1] else _lines(operations)
            if lines is None:
                ops.extend(operations)
            else:
                placeholder = _Placeholder()
                places[placeholder.text] = lines
                ops.append(placeholder)

    config.attributes[REVISION_OPTION] = configure
    try:
        with _revision_environment(config):
            # sql: Alembic's offline mode, so that the environment connects to no database
            written = command.revision(config, message, sql=True, head=head, process_revision_directives=directives)
    finally:
        del config.attributes[REVISION_OPTION]
    if not isinstance(written, Script):
        return planned[-1], None
    path = Path(written.path)
    if places:
        _fill_placeholders(path, written_as[0], places)
    return planned[-1], path


class _Placeholder(MigrateOperation):
    """Where a function's operations go once Alembic has written and imported the file: a statement
    (a function's body needs one) no revision writes otherwise."""

    def __init__(self) -> None:
        self.text = f"pass  # sqltransport-schema operations {secrets.token_hex(8)}"


@renderers.dispatch_for(_Placeholder)
def _render_placeholder(autogen_context: Any, placeholder: _Placeholder) -> str:
    return placeholder.text


def _lines(operations: Sequence[MigrateOperation]) -> list[str] | None:
    """The operations' lines as Alembic's renderer writes them (migrate.ops: one line each, no
    indentation of their own), or None where one is not a transport operation or spans lines."""
    lines = []
    for operation in operations:
        if not isinstance(operation, TransportOp):
            return None
        line = operation.python()
        if "\n" in line or line.endswith(":"):
            return None
        lines.append(line)
    return lines or None


def _fill_placeholders(path: Path, encoding: str, places: dict[str, list[str]]) -> None:
    """Each placeholder becomes the lines it stands for, indented as Alembic indents a function's
    lines after the first (four spaces, wherever the template puts them); the bytecode Python
    cached for the small file goes with it."""
    text = path.read_bytes().decode(encoding)
    for placeholder, lines in places.items():
        at = text.find(placeholder)
        if at >= 0:  # else a template that writes no operations
            text = text[:at] + "\n    ".join(lines) + text[at + len(placeholder) :]
    path.write_bytes(text.encode(encoding))
    cached = Path(importlib.util.cache_from_source(str(path)))
    cached.unlink(missing_ok=True)


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
