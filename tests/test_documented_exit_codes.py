"""The exit codes docs/workflow.md (README's reference, moved there) and docs/teams.md document are those the commands give (issue 39):
ours (0, 1 for a finding, 2 on an error), and Alembic's for `alembic` commands, which README said
were ours: 255 on a failure, printed as one FAILED line, a refusal of ours included."""

from __future__ import annotations

import re

from .support.commands import CLOSED_PORT, alembic, failed_line, run
from .support.messages import insert_message
from .support.projects import REPO

TOPOLOGY = 'transport_version: "9.1"\nendpoints:\n  - name: Sales\nqueues:\n  - name: error\n'


def _documented_alembic_failure(text: str) -> int:
    """The code a page gives for a failed `alembic` command."""
    found = re.search(r"`alembic[^`]*`[^.]*?\b(\d+)\*{0,2} on any\s+failure", text)
    assert found, "the page does not say which code a failed alembic command exits with"
    return int(found.group(1))


def test_alembic_failures_exit_as_the_docs_say(project, sqlite_url):
    project.deploy(sqlite_url, TOPOLOGY)
    insert_message(sqlite_url, "Sales")
    refused = alembic(project, "-x", f"url={sqlite_url}", "downgrade", "base")
    assert failed_line(refused).startswith("FAILED: refusing to drop")
    unreachable = alembic(project, "-x", f"url={CLOSED_PORT}", "upgrade", "head")
    assert failed_line(unreachable).startswith("FAILED: cannot reach the database")
    for page in ("docs/workflow.md", "docs/teams.md"):
        documented = _documented_alembic_failure((REPO / page).read_text(encoding="utf-8"))
        assert refused.returncode == unreachable.returncode == documented, page

    ours = run(project.root, "check", "--url", CLOSED_PORT)
    workflow = (REPO / "docs" / "workflow.md").read_text(encoding="utf-8")
    assert ours.returncode == 2 and ours.stderr.startswith("error: ") and "and 2 on any error" in workflow
