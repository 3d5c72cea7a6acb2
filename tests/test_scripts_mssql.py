"""SQL Server deployment scripts as sqlcmd, go-sqlcmd and SSMS run them: the session options their DDL
needs, the split deployment's stamp guard, the installer lock, versions, sqlcmd variables, encoding.

No SQL Server runs here: the scripts are read as text and parsed with sqlfluff's tsql dialect."""

from __future__ import annotations

import re

import pytest

from .support.scripts import script, split
from .support.tsql import GO_LINE, assert_parses

SESSION_OPTIONS = (
    "SET ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS, ARITHABORT, CONCAT_NULL_YIELDS_NULL, QUOTED_IDENTIFIER ON;\n"
    "SET NUMERIC_ROUNDABORT OFF;\n"
    "SET XACT_ABORT ON;"
)


def topology(version: str) -> str:
    """An endpoint with a saga and an outbox (filtered unique and dispatched indexes) on a transport release."""
    return f"""\
transport_version: "{version}"
engines: [mssql]
endpoints:
  - name: Sales
    instances: [host-a]
    outbox: true
    sagas:
      - name: OrderSaga
        correlation: {{name: OrderId, type: guid}}
queues:
  - name: error
"""


FILTERED_INDEX = re.compile(r"CREATE (UNIQUE )?NONCLUSTERED INDEX [^\n]*\n(?:(?!\nGO\n).)*?\bWHERE\s+\S+ IS NOT NULL", re.S)


def batches(text: str) -> list[str]:
    """The batches after the header comment lines."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("--"))
    return [chunk.strip() for chunk in GO_LINE.split("\n".join(lines[start:])) if chunk.strip()]


@pytest.mark.parametrize("version", ["3.1", "6.3.1", "9.1"])
def test_every_script_kind_sets_the_session_options_before_its_first_filtered_index(project, tmp_path, version):
    from .test_scripts import alembic_sql

    project.write_topology(topology(version))
    assert project.compile("initial") == 0
    kinds = {"whole": script(project, tmp_path, "mssql"), "--sql": alembic_sql(project, "mssql://")}
    kinds.update((f"--split {name}", text) for name, text in split(project, tmp_path, "mssql").items())
    filtered = 0
    for kind, text in kinds.items():
        assert "sqlcmd -b -x -f 65001 -i FILE" in text.split("\n\n", 1)[0] or kind == "--sql", kind
        found = batches(text)
        assert found[0] == SESSION_OPTIONS, f"{kind}: {found[0][:200]}"  # a batch of its own, before any DDL
        assert all("QUOTED_IDENTIFIER" not in b for b in found[1:]), kind  # never turned off again
        for match in FILTERED_INDEX.finditer(text):
            filtered += 1
            assert text.index(SESSION_OPTIONS) < match.start(), kind
        for i, batch in enumerate(found):
            assert_parses(batch, f"{version} {kind} batch {i}")
    # the queues' Index_Expires (3.1+), the saga's correlation index and the outbox's Index_DispatchedAt, in each kind
    assert filtered >= 3 * 3
