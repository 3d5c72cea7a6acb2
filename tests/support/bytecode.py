"""The package's compiled bytecode, for the processes the tests start.

The environment here sets PYTHONDONTWRITEBYTECODE=1, so no process caches what it compiles: each
`sqltransport-schema` or `alembic` subprocess compiled the whole package (about 0.1 s of CPU) again.
py_compile writes whatever that variable says, and every later process reads what it wrote;
copy_tracked copies it beside the sources it copies (the same mtime, so it stays valid).
"""

from __future__ import annotations

import compileall

from .projects import REPO

PACKAGE = REPO / "sqltransport_schema"


def compile_package() -> None:
    """Compile what is stale (a no-op when nothing changed: compileall compares each source's mtime)."""
    compileall.compile_dir(PACKAGE, quiet=2, workers=1)
