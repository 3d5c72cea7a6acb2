"""How compile writes a revision: through `alembic revision`, with the project's post-write hooks.

Without hooks, migrate/write.py lets Alembic write and import a file whose functions hold a
placeholder, then puts the operations in their places: the file must be the one Alembic writes
with the operations in it, which is what it writes when the project has hooks (they see the whole file).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .support import catalog
from .support.catalog import key
from .support.projects import new_project

# Every kind of operation compile writes: schemas, instance queues, a delayed table, the subscription
# table, a saga with its correlation, a name with quotes and a backslash (escaped in its literal)
TOPOLOGY = """\
transport_version: "9.1"
engines: [sqlite]
endpoints:
  - name: Sales
    instances: [host-a, host-b]
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: string}
  - name: Billing
    schema: billing
    body_string: true
queues:
  - name: 'Say "hi" \\o/'
  - name: error
"""

# An exec hook: appends how many operation lines the file it was given holds
HOOK = """\
import sys
from pathlib import Path

path = Path(sys.argv[1])
text = path.read_text(encoding="utf-8")
count = sum(1 for line in text.splitlines() if line.startswith("    op."))
path.write_text(text + f"# hooked: {count} operation lines\\n", encoding="utf-8")
"""


def with_hook(project, tmp_path: Path) -> None:
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK, encoding="utf-8")
    ini = project.ini.read_text(encoding="utf-8")
    project.ini.write_text(
        ini + f"\n[post_write_hooks]\nhooks = count\ncount.type = exec\ncount.executable = {sys.executable}\n"
        f"count.options = {hook} REVISION_SCRIPT_FILENAME\n",
        encoding="utf-8",
    )


def normalised(text: str) -> str:
    """The revision's text without what differs from one write to the next: its id and date."""
    text = re.sub(r"(Revision ID: |revision = ')[0-9a-f]+", r"\1ID", text)
    return re.sub(r"Create Date: .*", "Create Date: DATE", text)


def test_the_revision_is_the_one_alembic_writes_with_every_operation_in_it(project, tmp_path, sqlite_url):
    hooked = new_project(tmp_path / "hooked")
    with_hook(hooked, tmp_path)
    for each in (project, hooked):
        each.write_topology(TOPOLOGY)
        assert each.compile("add everything") == 0
    [plain], [through_hooks] = project.revisions(), hooked.revisions()
    text, hooked_text = plain.read_text(encoding="utf-8"), through_hooks.read_text(encoding="utf-8")
    operations = sum(1 for line in text.splitlines() if line.startswith("    op."))
    assert operations > 20 and "sqltransport-schema operations" not in text
    # the hook saw every operation: Alembic rendered them into the file it ran the hook on
    assert hooked_text.endswith(f"# hooked: {operations} operation lines\n")
    assert normalised(text) == normalised(hooked_text.removesuffix(f"# hooked: {operations} operation lines\n"))
    # no bytecode of the placeholder file is left for Python to mistake for the revision
    cached = list((plain.parent / "__pycache__").glob("*.pyc")) if (plain.parent / "__pycache__").exists() else []
    assert all(path.stat().st_mtime >= plain.stat().st_mtime for path in cached)
    project.upgrade(sqlite_url)  # the revision imports and creates every table
    assert key(sqlite_url, 'Say "hi" \\o/') in catalog.read(sqlite_url)
    assert key(sqlite_url, "Sales_OrderSaga") in catalog.read(sqlite_url)
    project.write_topology(TOPOLOGY + "  - name: audit\n")
    assert project.compile("add audit") == 0  # the head's snapshot reads back from the filled file
    assert "op.create_queue(\"audit\"" in max(project.revisions(), key=lambda p: p.stat().st_mtime).read_text(encoding="utf-8")
