"""docs/sql-server-versions.md against the T-SQL each release and command emits: each row's minimum
SQL Server is the newest construct of what it writes (engines/mssql/server_versions.py), and no
migration script of a release below 2016 holds OPENJSON."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sqltransport_schema.engines.mssql import MSSQL
from sqltransport_schema.engines.mssql.live_bus import LiveBus
from sqltransport_schema.engines.mssql.sagas import Sagas
from sqltransport_schema.engines.mssql.server_versions import COMMANDS, minimum, older_server
from sqltransport_schema.schema import Kind, TableName, TableSpec
from sqltransport_schema.versions import profile

from .support.scripts import script
from .support.tsql import GO_LINE, assert_parses

ENGINE = MSSQL()
PAGE = Path(__file__).resolve().parents[1] / "docs" / "sql-server-versions.md"
RELEASES = ["1.0", "1.2", "2.2.2", "2.2.6", "3.0", "3.0.3", "3.1", "4.0", "4.1", "4.3.2", "5.0", "5.0.3"]
RELEASES += ["6.0.1", "6.3.0", "6.3.1", "6.3.8", "7.0", "8.1", "9.0", "9.1"]
PROJECT_ADDITIONS = {"delete_locked"}  # the runtime's own statements, in the commands table


def key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def table(heading: str) -> dict[str, int]:
    """The page's table under `heading`: first column -> minimum SQL Server (a number, or 0 for "the release's")."""
    section = PAGE.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Transport release")]
    return {first.strip(): int(second) if second.strip().isdigit() else 0 for first, second in rows if not first.startswith("---")}


def documented_release(version: str) -> int:
    for span, oldest in table("Transport releases").items():
        low, high = (part.strip().replace(".x", ".99") for part in span.split(" - "))
        if key(low) <= key(version) <= key(high):
            return oldest
    raise AssertionError(f"no row of {PAGE.name} covers transport {version}")


def release_texts(version: str) -> tuple[list[str], list[str]]:
    """(the release's DDL: each table kind's creation, a guarded drop, a dropped queue's subscription rows
    as a script deletes them; its runtime statements, the project's additions left out)."""
    p, v = profile(version), key(version)
    queue = TableName("Sales", "dbo", "nsb")
    ddl = ENGINE.create_table(TableSpec(Kind.QUEUE, queue, body_string=v >= (4, 1)), p)
    if v >= (3, 1):
        ddl += ENGINE.create_table(TableSpec(Kind.DELAYED, TableName("Sales.Delayed", "dbo", "nsb")), p)
    if v >= (5, 0):
        subscriptions = TableName("SubscriptionRouting", "dbo", "nsb")
        ddl += ENGINE.create_table(TableSpec(Kind.SUBSCRIPTIONS, subscriptions), p)
        ddl += ENGINE.script_delete_subscribers_of(subscriptions, queue)
    ddl += ENGINE.drop_table(TableSpec(Kind.QUEUE, queue), p, discard_messages=False)
    statements = ENGINE.runtime_statements(
        p,
        queue,
        delayed=TableName("Sales.Delayed", "dbo", "nsb") if v >= (3, 1) else None,
        subscriptions=TableName("SubscriptionRouting", None, "nsb") if v >= (5, 0) else None,
        peek_batch_size=1000,
    )
    return ddl, [st.sql for name, st in statements.items() if name not in PROJECT_ADDITIONS]


def templates(section: type) -> list[str]:
    return [value for name, value in vars(section).items() if name.isupper() and isinstance(value, str)]


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_needs_the_sql_server_the_page_names_and_no_newer(version):
    ddl, runtime = release_texts(version)
    needed, why = minimum(ddl + runtime)
    assert needed == documented_release(version), (version, needed, why)
    assert minimum(runtime)[0] <= needed and "OPENJSON" not in "".join(ddl)
    # 1.0-3.0.x: the tables alone need 2005, their send and receive 2008 (the row says both)
    assert minimum(ddl)[0] == (2005 if key(version) < (3, 1) else needed)
    # THROW only where the release's own scripts have it (6.3.1+), RAISERROR before
    assert ("THROW" in "".join(ddl)) is (key(version) >= (6, 3, 1))


def test_each_command_needs_the_sql_server_the_page_names():
    commands = table("Commands")
    status_texts = [LiveBus.FAILED_Q_COUNTS, LiveBus.QUEUE_ARM, LiveBus.DELAYED_ARM]
    derived = {
        "`status`": minimum(status_texts)[0],
        "`alembic upgrade` (online) dropping a queue that has subscriptions": minimum([ENGINE.DELETE_SUBSCRIBERS_OF])[0],
        "saga and outbox tables (`sagas:`, `outbox: true`)": minimum(templates(Sagas))[0],
        "the runtime's batches (`MessagePump` with `batch_size` > 1, the outbox's dispatch)": minimum(
            [ENGINE.runtime_statements(profile("9.1"), TableName("Sales"))["delete_locked"].sql]
        )[0],
        "`check`": minimum(templates(MSSQL.Catalog))[0],
        "`retry`": minimum([LiveBus.ERROR_BATCH, LiveBus.ERROR_SCAN] + [send(version) for version in RELEASES])[0],
        "`grants`": minimum(templates(MSSQL.Grants))[0],
        "the console's archive and action log (`archive:`, `action_log:`)": minimum(
            [ENGINE.CREATE_ARCHIVE, ENGINE.CREATE_ACTION_LOG]
            + [text for name, text in vars(LiveBus).items() if name.startswith(("ARCHIVE_", "ACTION_LOG_")) and isinstance(text, str)]
        )[0],
        "`script`, `alembic upgrade --sql`": 0,  # the release's: the test below
    }
    assert {name: commands.get(name) for name in derived} == derived
    # what `status` and `check` say on an older server is the page's
    assert {command: needed for command, (needed, _) in COMMANDS.items()} == {
        "status": commands["`status`"],
        "check": commands["`check`"],
    }


def send(version: str) -> str:
    return ENGINE.runtime_statements(profile(version), TableName("Sales"), peek_batch_size=10)["send"].sql


@pytest.mark.parametrize("version", ["5.0.3", "6.3.0", "9.1"])
def test_no_migration_script_of_a_release_below_2016_holds_openjson(project, tmp_path, version):
    from .test_scripts import TOPOLOGY, alembic_sql

    topology = TOPOLOGY.replace('"9.1"', f'"{version}"').replace("engines: [mssql, postgresql]", "engines: [mssql]")
    project.write_topology(topology)
    assert project.compile("initial") == 0
    first = project.head()
    project.write_topology(topology.replace("  - name: audit\n", "") + "drop_protected:\n  - name: audit\n")
    assert project.compile("drop audit") == 0
    whole = [script(project, tmp_path, "mssql"), alembic_sql(project, "mssql://")]
    for text in [*whole, script(project, tmp_path, "mssql", "--from", first)]:
        assert "OPENJSON" not in text and "JSON_VALUE" not in text
        batches = [chunk for chunk in GO_LINE.split(text) if chunk.strip()]
        needed = minimum(batches)[0]  # the whole upgrade needs the release's; the drop alone no more
        assert needed == documented_release(version) < 2016 if text in whole else needed <= documented_release(version)
        assert re.search(r"DELETE FROM \[dbo\]\.\[SubscriptionRouting\]\nWHERE QueueAddress IN \(N'audit', N'audit@\[dbo\]'", text), text
        for batch in (b for b in batches if "RAISERROR(N'refusing" in b or "DELETE FROM" in b or "THROW 50000" in b):
            assert_parses(batch.strip(), f"{version} drop")


def test_status_says_which_sql_server_it_needs(capsys):
    from sqltransport_schema import cli

    with pytest.raises(SystemExit):
        cli.main(["status", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "On SQL Server it needs 2016 or later" in text and str(table("Commands")["`status`"]) == "2016"


@pytest.mark.parametrize(
    "command,version,says",
    [
        ("status", (12, 0, 6024, 0), "status needs SQL Server 2016 or later"),
        ("status", (13, 0, 1601, 5), None),
        ("check", (9, 0, 5000, 0), "check needs SQL Server 2008 or later"),
        ("check", (10, 50, 6000, 34), None),
    ],
)
def test_status_and_check_say_which_sql_server_they_need(command, version, says):
    found = older_server(command, version)
    assert (found is None) if says is None else found.startswith(says) and ".".join(map(str, version)) in found


def test_status_on_an_older_server_says_so_and_stops():
    """Through the pyodbc double: the engine's first connection reads SERVERPROPERTY('ProductVersion')."""
    from sqltransport_schema.errors import Unsupported
    from sqltransport_schema.runtime import status as live_status
    from sqltransport_schema.runtime.transport import Transport

    from .support.pyodbc_double import Server

    transport = Transport(Server(version="12.0.6024.0").engine(), "9.1")
    with pytest.raises(Unsupported, match=r"status needs SQL Server 2016 or later .*this server is SQL Server 2014 \(12\.0\.6024\.0\)"):
        live_status.status(transport)


def test_check_on_an_older_server_says_so_and_stops():
    from sqltransport_schema.errors import Unsupported

    from .support.pyodbc_double import Server

    engine = Server(version="9.00.5000.00").engine()
    with engine.connect() as connection, pytest.raises(Unsupported, match="check needs SQL Server 2008 or later"):
        ENGINE.catalog.read_shapes(connection)
