"""The console's tables declared in the topology (`archive:` on a plain queue, `action_log:`) and
created by the migrations like every other table: validated with located errors, compiled into
operations per engine, created on real SQLite and PostgreSQL with the shapes `check` expects (no
drift afterwards), dropped by a downgrade, and in SQL Server's deployment script; SQL Server's
statements of the console's moves parsed as T-SQL."""

from __future__ import annotations

import uuid
from textwrap import dedent

import pytest
from sqlalchemy import inspect

from sqltransport_schema import cli, engines
from sqltransport_schema.db import make_engine
from sqltransport_schema.schema import Kind, TableName, TableSpec, blueprint
from sqltransport_schema.topology import TopologyError, loads
from sqltransport_schema.versions import profile

from .support.console import CONSOLE_TOPOLOGY
from .support.runtime import TOPOLOGY

FILE = "t.yaml"


def test_the_topology_declares_an_archive_beside_its_queue_and_the_action_log():
    t = loads(
        dedent("""\
        transport_version: "9.1"
        queues:
          - name: error
            schema: ops
            archive: error_archive
        action_log:
          table: ConsoleActions
          schema: ops
        """),
        FILE,
    )
    specs = {spec.name: spec for spec in blueprint(t).tables}
    archive = specs[TableName("error_archive", "ops")]
    assert archive.kind is Kind.ARCHIVE and archive.queue == "error"
    assert specs[TableName("ConsoleActions", "ops")].kind is Kind.ACTION_LOG
    assert TableSpec.from_json(__import__("json").loads(archive.to_json_line())) == archive  # the snapshot keeps the queue


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ('transport_version: "9.1"\nqueues:\n  - name: error\n    archive: [a]\n', 4, "archive"),
        (
            'transport_version: "9.1"\nqueues:\n  - name: error\n    archive: audit\n  - name: audit\n',
            5,
            "same table as archive table 'audit'",
        ),
        ('transport_version: "9.1"\naction_log:\n  schema: ops\n', 3, "table"),
        ('transport_version: "9.1"\nqueues:\n  - name: error\naction_log:\n  table: error\n', 5, "same table as queue 'error'"),
    ],
)
def test_a_mistake_in_the_console_tables_is_one_located_problem(text, line, fragment):
    with pytest.raises(TopologyError) as info:
        loads(text, FILE)
    [problem] = info.value.problems
    assert problem.mark.path == FILE and problem.mark.line == line, str(problem)
    assert fragment in problem.message, problem.message


def test_the_cli_reports_a_bad_archive_key_as_one_error_line(tmp_path, capsys):
    path = tmp_path / "topology.yaml"
    path.write_text('transport_version: "9.1"\nqueues:\n  - name: error\n    archive: {name: x}\n', encoding="utf-8")
    assert cli.main(["validate", "--topology", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:4:" in err and "Traceback" not in err


def test_the_migrations_create_the_archive_and_the_action_log_and_check_finds_no_drift(project, db_url, capsys):
    project.deploy(db_url, TOPOLOGY)
    project.write_topology(CONSOLE_TOPOLOGY)
    assert project.compile("the console's tables") == 0
    text = project.revisions()[-1].read_text(encoding="utf-8")
    assert 'op.create_archive_table("error_archive", version="9.1", queue="error")' in text
    assert 'op.create_action_log("ConsoleActions", version="9.1")' in text
    project.upgrade(db_url)
    engine = make_engine(db_url)
    try:
        columns = {c["name"].lower() for c in inspect(engine).get_columns("error_archive")}
        assert {"id", "headers", "body", "archivedat", "archivedwhy", "archivedby"} <= columns
        assert {c["name"].lower() for c in inspect(engine).get_columns("ConsoleActions")} == {
            "id",
            "at",
            "who",
            "action",
            "target",
            "messages",
        }
    finally:
        engine.dispose()
    capsys.readouterr()
    assert cli.main(["check", "--url", db_url, "-c", str(project.ini)]) == 0, capsys.readouterr()
    project.downgrade(db_url, "-1")
    engine = make_engine(db_url)
    try:
        assert not {"error_archive", "consoleactions"} & {t.lower() for t in inspect(engine).get_table_names()}
    finally:
        engine.dispose()


def test_a_compile_that_drops_an_archive_holding_messages_is_refused_by_the_database(project, db_url):
    project.deploy(db_url, CONSOLE_TOPOLOGY)
    engine = make_engine(db_url)
    sqlite = db_url.startswith("sqlite")
    try:
        with engine.begin() as conn:
            archive = engines.get("sqlite" if sqlite else "postgresql").qualified(TableName("error_archive"))
            conn.exec_driver_sql(
                f"INSERT INTO {archive} (Id, Headers, ArchivedAt, ArchivedWhy, ArchivedBy"
                + (", Recoverable" if sqlite else "")
                + ") VALUES ("
                + ("'6c9b3c36-2a0e-4a49-9e43-8d1f0c1a2b3c', '{}', CURRENT_TIMESTAMP, 'test', 'test'")
                + (", 1" if sqlite else "")
                + ")"
            )
    finally:
        engine.dispose()
    project.write_topology(CONSOLE_TOPOLOGY.replace("    archive: error_archive\n", ""))
    assert project.compile("drop the archive") == 0
    with pytest.raises(Exception, match="error_archive"):
        project.upgrade(db_url)


def test_sql_server_creates_them_in_its_deployment_text():
    mssql = engines.get("mssql")
    prof = profile("9.1")
    [archive] = mssql.create_table(TableSpec(Kind.ARCHIVE, TableName("error_archive", "dbo"), queue="error"), prof)
    assert "CREATE TABLE [dbo].[error_archive]" in archive and "ArchivedAt datetime2 NOT NULL" in archive
    assert "CREATE NONCLUSTERED INDEX Index_ArchivedAt ON [dbo].[error_archive] (ArchivedAt)" in archive
    [log] = mssql.create_table(TableSpec(Kind.ACTION_LOG, TableName("ConsoleActions", "dbo")), prof)
    assert "CREATE TABLE [dbo].[ConsoleActions]" in log and "Id bigint IDENTITY(1,1) NOT NULL PRIMARY KEY CLUSTERED" in log
    for name in ("mysql", "oracle"):  # saga-only engines hold no transport tables, nor the console's
        assert engines.get(name).create_table(TableSpec(Kind.ARCHIVE, TableName("error_archive"), queue="error"), prof) == []


def test_sql_server_moves_each_message_in_one_statement_and_every_console_statement_parses_as_tsql():
    """SQL Server's archive and restore are a DELETE whose OUTPUT DELETED... goes INTO the other table
    (one statement: the row moves whole or not at all), each by the table's clustered key (the queue
    has no index on Id: the Ids chosen are mapped to its RowVersion in one read, @Ids a JSON array);
    the keys' read, the purge, the archive's page and count, the action log's insert and read are
    T-SQL (TOP, not LIMIT): each parsed by sqlfluff's tsql dialect (no SQL Server here)."""
    from .support.tsql import parse_problems

    operations = engines.get("mssql").live_bus
    prof = profile("9.1")
    queue, archive = TableName("error", "dbo"), TableName("error_archive", "dbo")
    statements = {
        which: operations.archive(which, queue, archive, prof) for which in ("keys", "archive", "restore", "purge", "page", "count", "id")
    }
    log = TableName("ConsoleActions", "dbo")
    statements |= {f"log {which}": [operations.action_log(log, prof, which)] for which in ("insert", "read", "about")}
    for which, found in statements.items():
        for statement in found:
            assert parse_problems(statement.sql) == [], (which, statement.sql)
            assert " LIMIT " not in statement.sql, (which, statement.sql)
    [archived], [restored] = statements["archive"], statements["restore"]
    assert archived.sql.startswith("DELETE FROM [dbo].[error] WITH (ROWLOCK) OUTPUT DELETED.Id, DELETED.CorrelationId")
    assert "DELETED.Body, SYSUTCDATETIME(), @Why, @By INTO [dbo].[error_archive] (Id, " in archived.sql
    assert archived.sql.endswith("ArchivedAt, ArchivedWhy, ArchivedBy) WHERE RowVersion = @Key")  # a seek of the clustered key
    assert set(archived.params) == {"Key", "Why", "By"}
    [keys] = statements["keys"]
    assert keys.sql == "SELECT RowVersion, Id FROM [dbo].[error] WHERE Id IN (SELECT CAST(value AS uniqueidentifier) FROM OPENJSON(@Ids))"
    assert "INTO [dbo].[error] (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) WHERE RowVersion = @Key" in (
        restored.sql
    )
    assert "RowVersion" not in restored.sql.split(" INTO ")[0]  # the queue numbers a restored message anew
    [purge] = statements["purge"]
    assert "SELECT TOP (@BatchSize) RowVersion FROM [dbo].[error_archive] WHERE ArchivedAt < " in purge.sql
    assert set(purge.params) == {"BatchSize", "Seconds"} and purge.native("qmark")[1] == ("BatchSize", "Seconds", "Seconds", "Seconds")


@pytest.mark.parametrize("engine", ["mssql", "postgresql"])
def test_the_deployment_script_carries_them(project, engine, capsys):
    project.write_topology(CONSOLE_TOPOLOGY)
    assert project.compile("initial") == 0
    capsys.readouterr()
    assert cli.main(["script", "--engine", engine, "-c", str(project.ini)]) == 0
    script = capsys.readouterr().out
    dialect = engines.get(engine)
    for name in ("error_archive", "ConsoleActions"):
        assert f"CREATE TABLE {dialect.qualified(TableName(name, dialect.default_schema))}" in script.replace(" IF NOT EXISTS", "")


def test_moves_between_the_error_queue_and_its_archive_lose_and_double_nothing(project, db_url, monkeypatch):
    """Archive, restore and purge in batches (each one transaction, the progress callback called
    after each commit) of the runtime's transport, without the web stack: checked before they run,
    ids asked twice move once, an id not in the queue is counted as not found, and on
    PostgreSQL (where the error queue's key is its Id) a message whose Id is back in the error queue
    stays archived instead of failing the batch."""
    from sqltransport_schema.errorqueue import Archive

    from .support.console import console_bus, fail

    transport = next(bus := console_bus(project, db_url, monkeypatch))
    try:
        fail(transport, "Sales", 5, TimeoutError("database timeout"))
        archive = Archive(transport, batch_size=2)
        with transport.engine.connect() as conn:
            error = transport.dialect.qualified(transport.name("error"), transport.profile)
            ids = sorted(str(r[0]) for r in conn.exec_driver_sql(f"SELECT Id FROM {error}"))
        chosen, move = archive.archive([*ids[:3], ids[0], "6c9b3c36-2a0e-4a49-9e43-8d1f0c1a2b3c"], "why", "who")
        assert chosen == 4 and archive.count() == 0  # checked, nothing moved until the move runs
        seen: list[tuple[int, int]] = []
        moved = move(lambda done: seen.append((done.moved, archive.count())))  # after each batch's commit
        assert (moved.moved, moved.not_found, moved.batches) == (3, 1, 2)
        assert seen == [(2, 2), (3, 3)]
        assert archive.count() == 3
        rows, next_after = archive.page(limit=2)
        assert len(rows) == 2 and next_after == rows[-1].key
        rest, last = archive.page(after=next_after, limit=2)
        assert len(rest) == 1 and last is None
        assert sorted(r.id for r in rows + rest) == ids[:3]
        restored = archive.restore([rows[0].key])[1](None)
        assert restored.moved == 1 and archive.count() == 2
        if not db_url.startswith("sqlite"):
            with transport.engine.begin() as conn:  # the same Id failed again meanwhile
                conn.exec_driver_sql(f"INSERT INTO {error} (Id, Headers) VALUES ('{rows[1].id}', '{{}}')")
            again = archive.restore([rows[1].key])[1](None)
            assert (again.moved, again.not_found) == (0, 1) and archive.count() == 2
        purged: list[int] = []
        assert archive.purge(0)(lambda done: purged.append(done.moved)).moved == 2
        assert purged == [2, 2] and archive.count() == 0  # a full batch, then the empty one that ends it
    finally:
        next(bus, None)


def test_a_batch_rolled_back_is_not_counted(project, sqlite_url, monkeypatch):
    """A move's report counts a batch once it has committed: the second batch of an archive fails at
    its second message (a trigger refuses that delete), after its first was moved in the same
    transaction; both stay in the error queue and the report says what the first batch moved."""
    from sqltransport_schema.errorqueue import Archive

    from .support.console import console_bus, fail

    transport = next(bus := console_bus(project, sqlite_url, monkeypatch))
    try:
        fail(transport, "Sales", 4, TimeoutError("database timeout"))
        error = transport.dialect.qualified(transport.name("error"), transport.profile)
        with transport.engine.begin() as conn:
            ids = [str(r[0]) for r in conn.exec_driver_sql(f"SELECT Id FROM {error} ORDER BY RowVersion")]
            conn.exec_driver_sql(
                f"CREATE TRIGGER refuse BEFORE DELETE ON {error} WHEN old.Id = '{ids[3]}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        archive = Archive(transport, batch_size=2)
        seen = []
        with pytest.raises(Exception, match="refused"):
            archive.archive(ids, "why", "who")[1](seen.append)
        [report] = {id(r): r for r in seen}.values()  # one report, shown after each committed batch
        assert (report.moved, report.batches, report.not_found) == (2, 1, 0)
        assert archive.count() == 2
        with transport.engine.connect() as conn:
            assert sorted(str(r[0]) for r in conn.exec_driver_sql(f"SELECT Id FROM {error}")) == sorted(ids[2:])
    finally:
        next(bus, None)


def test_each_move_into_the_archive_is_a_lookup_of_the_queue_key_and_the_ids_are_read_once(project, db_url, monkeypatch):
    """The error queue has no index on Id on SQLite (its key is RowVersion, the rowid) nor on SQL
    Server: a move by Id read the whole queue for each message (archiving 50,000 of 200,000 was
    quadratic). Each move takes its message by the queue's key: SQLite's plan a SEARCH by the rowid,
    PostgreSQL's (5,000 messages, analyzed) an index scan, never a scan of the queue; the Ids
    chosen become keys in one read (on SQLite its one scan of the queue)."""
    from sqltransport_schema.runtime.transport import execute
    from sqltransport_schema.statements import Statement

    from .support.console import console_bus

    transport = next(bus := console_bus(project, db_url, monkeypatch))
    try:
        sqlite = db_url.startswith("sqlite")
        operations, prof = transport.dialect.live_bus, transport.profile
        queue, archive = transport.name("error"), transport.name("error_archive")
        [read] = operations.archive("keys", queue, archive, prof)
        moves = operations.archive("archive", queue, archive, prof)
        table = transport.dialect.qualified(queue, prof)
        with transport.engine.begin() as conn:
            if not sqlite:
                conn.exec_driver_sql(f"INSERT INTO {table} (Id, Headers) SELECT gen_random_uuid(), '{{}}' FROM generate_series(1, 5000)")
                conn.exec_driver_sql(f"ANALYZE {table}")

            def plan(statement: Statement, params: dict) -> list[str]:
                explained = Statement.of(
                    statement.name, ("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + statement.template, statement.identifiers
                )
                return [str(row[-1]) for row in execute(conn, explained, params)]

            for move in moves:
                steps = plan(move, {"Key": 1, "Why": "why", "By": "who"})
                if sqlite:
                    assert [s for s in steps if " error " in f"{s} "] == ["SEARCH error USING INTEGER PRIMARY KEY (rowid=?)"], steps
                else:
                    assert any(s.strip(" ->").startswith("Index Scan using") for s in steps), steps
                    assert not any("Seq Scan" in s for s in steps), steps
            ids = transport.dialect.list_parameter([str(uuid.uuid4()), str(uuid.uuid4())])
            steps = plan(read, {"Ids": ids})
            if sqlite:
                assert [s for s in steps if s.startswith("SCAN error")] == ["SCAN error"], steps  # the queue read once
            else:
                assert not any("Seq Scan" in s for s in steps), steps
    finally:
        next(bus, None)
