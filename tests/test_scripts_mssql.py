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


FILTERED_INDEX = re.compile(
    r"CREATE (UNIQUE )?(NONCLUSTERED )?INDEX [^\n]*\n(?:(?!\nGO\n).)*?\bWHERE\s+(\S+ IS NOT NULL|Dispatched = 1)", re.S
)


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
        if kind in ("whole", "--sql"):  # Index_Expires (3.1+), the saga's correlation index, the outbox's Index_DispatchedAt
            found_names = " ".join(m.group(0) for m in FILTERED_INDEX.finditer(text))
            assert "Index_Expires" in found_names and "Index_DispatchedAt" in found_names and "Correlation_OrderId" in found_names, kind
        for match in FILTERED_INDEX.finditer(text):
            filtered += 1
            assert text.index(SESSION_OPTIONS) < match.start(), kind
        for i, batch in enumerate(found):
            assert_parses(batch, f"{version} {kind} batch {i}")
    # the queues' Index_Expires (3.1+), the saga's correlation index and the outbox's Index_DispatchedAt, in each kind
    assert filtered >= 3 * 3


def test_split_stamp_guard_is_golden_and_parses():
    from sqltransport_schema import engines

    from .support.golden import assert_golden

    script_section = engines.get("mssql").script
    text = script_section.part_done("base:0123456789ab", "01-Sales.sql") + script_section.parts_check(
        "base:0123456789ab", ["00-shared.sql", "01-Sales.sql", "02-Billing's.sql"]
    )
    assert "N'02-Billing''s.sql'" in text  # a literal, escaped
    assert_golden("mssql_split_stamp_guard.sql", text)
    for i, batch in enumerate(c for c in GO_LINE.split(text) if c.strip()):
        assert_parses(batch, f"stamp guard batch {i}")


def test_split_files_record_their_completion_and_the_last_stamps_only_after_checking_every_part(project, tmp_path):
    from sqltransport_schema import engines

    project.write_topology(topology("9.1").replace("queues:", "  - name: Billing\nqueues:"))
    assert project.compile("initial") == 0
    files = split(project, tmp_path, "mssql")
    parts = [name for name in files if name != "99-alembic-version.sql"]
    assert parts == ["00-shared.sql", "01-Billing.sql", "02-Sales.sql"] or parts == ["00-shared.sql", "01-Sales.sql", "02-Billing.sql"]
    script_section = engines.get("mssql").script
    deployment = f"base:{project.head()}"
    for name in parts:
        found = batches(files[name])
        marker = script_section.part_done(deployment, name).split("\n\nGO\n\n")[0].strip()
        # the marker is the part's last batch in its transaction: COMMIT follows (after the guard)
        guard = "IF @@ERROR <> 0 OR @@TRANCOUNT = 0\nBEGIN\n    IF @@TRANCOUNT > 0 ROLLBACK;\n    SET NOEXEC ON;\nEND;"
        assert found[-4:] == [marker, guard, "COMMIT;", "SET NOEXEC OFF;"], found[-4:]
    last = files["99-alembic-version.sql"]
    check = script_section.parts_check(deployment, parts)
    assert check in last
    stamp = last.index(f"INSERT INTO alembic_version (version_num) VALUES ('{project.head()}')")
    assert stamp < last.index(check) < last.rindex("COMMIT;")  # stamps roll back with the check's ROLLBACK
    for i, batch in enumerate(batches(last)):
        assert_parses(batch, f"99 batch {i}")


@pytest.mark.parametrize(("timeout", "milliseconds"), [("3s", 3000), ("0", -1)])
def test_the_installer_lock_is_taken_with_its_own_timeout_its_result_checked_and_lock_timeout_reset(
    project, tmp_path, timeout, milliseconds
):
    project.write_topology(
        topology("4.0")
        .replace("    outbox: true\n", "")
        .replace("    sagas:\n", "")
        .replace("      - name: OrderSaga\n        correlation: {name: OrderId, type: guid}\n", "")
    )
    assert project.compile("initial") == 0
    first = project.head()
    project.write_topology(topology("9.1").replace("queues:", "  - name: Billing\n    body_string: true\nqueues:"))
    assert project.compile("upgrade") == 0
    guard = "IF @@ERROR <> 0 OR @@TRANCOUNT = 0\nBEGIN\n    IF @@TRANCOUNT > 0 ROLLBACK;\n    SET NOEXEC ON;\nEND;"
    take = re.compile(
        r"EXEC @lock = sp_getapplock @Resource = ('(?:[^']|'')*'), @LockMode = 'Exclusive', "
        rf"@LockOwner = 'Transaction', @LockTimeout = {milliseconds};"
    )
    transport = re.compile(r"^\s*EXEC sp_getapplock @Resource = ('(?:[^']|'')*'), @LockMode = 'Exclusive'$", re.M)
    for text in (
        script(project, tmp_path, "mssql", "--lock-timeout", timeout),
        script(project, tmp_path, "mssql", "--from", first, "--lock-timeout", timeout),
    ):
        found = batches(text)
        taken = 0
        for i, batch in enumerate(found):
            if not transport.search(batch) or "@lock" in batch:
                continue
            resource = transport.search(batch).group(1)
            taken += 1
            # before it: the script's own hold, waiting at most the timeout, a negative result checked
            held = take.search(found[i - 2])
            assert held and held.group(1) == resource and found[i - 1] == guard, found[i - 2]
            assert (
                "IF @lock < 0\nBEGIN\n    ROLLBACK;\n    RAISERROR(N'sqltransport-schema: gave up waiting for the installer lock %s"
                in found[i - 2]
            )
            assert found[i - 2].count("RAISERROR") == 1 and "THROW" not in found[i - 2]
            # after it: the hold released (the transport's batch released its own)
            assert found[i + 2] == f"EXEC sp_releaseapplock @Resource = {resource}, @LockOwner = 'Transaction';"
        assert taken >= 4  # every queue's, delayed table's creation; BodyString's in the change
        bounded = [i for i, batch in enumerate(found) if re.match(r"(-- [^\n]*\n+)*SET LOCK_TIMEOUT \d+;", batch)]
        if milliseconds > 0 and "-- revisions: base" not in text:
            assert len(bounded) >= 2  # the change of each queue, BodyString
        for i in bounded:  # the session's LOCK_TIMEOUT goes back to the default after each bounded batch
            assert found[i + 1] == guard and "SET LOCK_TIMEOUT -1;" in found[i + 2 : i + 5], found[i : i + 5]
        for i, batch in enumerate(found):
            assert_parses(batch, f"batch {i}")


def test_names_holding_a_sqlcmd_variable_are_refused_for_sql_server_where_they_are_written(project, capsys):

    text = topology("9.1").replace("queues:\n  - name: error\n", "queues:\n  - name: error\n  - name: Pay$(EUR)\n")
    project.write_topology(text.replace("    instances: [host-a]\n", "    instances: [host-a]\n    schema: s$(x)\n"))
    capsys.readouterr()
    assert project.compile("refused") == 2
    err = capsys.readouterr().err
    path = project.topology
    lines = [line for line in err.splitlines() if "error:" in line]
    assert f"error: {path}:13:11: table name of queue 'Pay$(EUR)' holds '$(', which sqlcmd reads" in err, err
    assert any(line.startswith(f"error: {path}:4:11: schema name of endpoint 'Sales' holds '$('") for line in lines), err
    assert all(line.endswith("rename it") for line in lines) and not project.revisions()  # nothing written
    # the same names on PostgreSQL alone: no sqlcmd there
    project.write_topology(text.replace("engines: [mssql]", "engines: [postgresql]"))
    assert project.compile("fine on postgresql") == 0


def test_non_ascii_scripts_are_written_with_a_byte_order_mark_sqlcmd_reads_as_utf8(project, tmp_path, capsys):
    from sqltransport_schema import cli

    text = topology("9.1").replace("engines: [mssql]", "engines: [mssql, postgresql]")
    project.write_topology(text.replace("queues:\n  - name: error\n", "queues:\n  - name: error\n  - name: Fäktura\n  - name: Счёт\n"))
    assert project.compile("initial") == 0
    out = tmp_path / "deploy.sql"
    argv = ["script", "--engine", "mssql", "-c", str(project.ini), "--topology", str(project.topology)]
    assert cli.main([*argv, "-o", str(out)]) == 0
    assert cli.main([*argv, "--split", str(tmp_path / "parts")]) == 0
    for path in [out, *sorted((tmp_path / "parts").iterdir())]:
        data = path.read_bytes()
        assert data.startswith(b"\xef\xbb\xbf") and not data[3:].startswith(b"\xef\xbb\xbf"), path.name  # one mark, then UTF-8
        data[3:].decode("utf-8")  # the rest is UTF-8 throughout
    text = out.read_bytes()[3:].decode("utf-8")
    assert "CREATE TABLE [dbo].[Fäktura] (" in text and "OBJECT_ID(N'[dbo].[Счёт]')" in text
    assert "[dbo].[Счёт]".encode() in out.read_bytes()  # as UTF-8 bytes, not a code page's
    # to stdout (piped by the user) there is no mark: the header's command reads it as UTF-8 (-f 65001)
    capsys.readouterr()
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert not printed.startswith("\ufeff") and "sqlcmd -b -x -f 65001 -i FILE" in printed.split("\n\n", 1)[0]
    # PostgreSQL's files stay plain UTF-8 (psql does not skip a mark)
    assert cli.main(["script", "--engine", "postgresql", "-c", str(project.ini), "-o", str(out)]) == 0
    assert not out.read_bytes().startswith(b"\xef\xbb\xbf") and '"Fäktura"'.encode() in out.read_bytes()
