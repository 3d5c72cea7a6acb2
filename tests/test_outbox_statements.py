"""The outbox's runtime statements (store, get, set as dispatched, cleanup), as SQL persistence's
outbox runs them: printed by `statements --outbox`, held to a golden text, parsed as T-SQL, and run
on real SQLite, PostgreSQL and MariaDB against the table the project's own DDL creates."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from sqltransport_schema import cli, engines
from sqltransport_schema.schema import Kind, TableName, TableSpec, blueprint
from sqltransport_schema.statements import run
from sqltransport_schema.topology import loads

from .support.databases import connect
from .support.golden import assert_golden
from .support.tsql import assert_parses

TOPOLOGY = 'transport_version: "9.1"\nengines: [sqlite, postgresql, mysql]\nendpoints:\n  - name: Sales.Api\n    outbox: true\n'
EVERY_ENGINE = ["postgresql", "mssql", "mysql", "sqlite", "oracle"]
TABLE = "Sales_Api_OutboxData"
# upstream's parameter names (OutboxPersister / OutboxCleaner)
PARAMETERS = {
    "store_outbox": {"MessageId", "Operations", "PersistenceVersion"},
    "get_outbox": {"MessageId"},
    "set_outbox_dispatched": {"MessageId", "DispatchedAt"},
    "cleanup_outbox": {"DispatchedBefore", "BatchSize"},
}


def printed(project, capsys, engine: str, fmt: str = "text") -> str:
    capsys.readouterr()
    assert cli.main(["statements", "--engine", engine, "--outbox", "--topology", str(project.topology), "--format", fmt]) == 0
    return capsys.readouterr().out


def test_statements_outbox_prints_every_engines_four_commands(project, capsys):
    project.write_topology(TOPOLOGY)
    text = "".join(printed(project, capsys, engine) for engine in EVERY_ENGINE)
    assert_golden("outbox_statements.sql", text)
    payload = json.loads(printed(project, capsys, "postgresql", "json"))
    listed = {name.split(": ")[1]: set(st["params"]) for name, st in payload["statements"].items()}
    assert listed == PARAMETERS


def test_a_topology_without_an_outbox_is_refused(project, capsys):
    project.write_topology(TOPOLOGY.replace("    outbox: true\n", ""))
    assert cli.main(["statements", "--engine", "sqlite", "--outbox", "--topology", str(project.topology)]) != 0
    assert "declares no outbox" in capsys.readouterr().err


@pytest.mark.parametrize("engine", EVERY_ENGINE)
def test_each_engine_writes_upstreams_commands(engine):
    statements = engines.get(engine).outbox_statements(TableSpec(Kind.OUTBOX, TableName(TABLE), saga_prefix="Sales_Api_"))
    assert {name: set(st.params) for name, st in statements.items()} == PARAMETERS
    assert statements["get_outbox"].columns == ("Dispatched", "Operations")
    assert "'[]'" in statements["set_outbox_dispatched"].sql  # the dispatched row keeps no operations
    cleanup = statements["cleanup_outbox"].sql
    expected = {"postgresql": "ctid", "mssql": "WITH (ROWLOCK, READPAST)", "mysql": "LIMIT @BatchSize", "oracle": "ROWNUM <= @BatchSize"}
    assert expected.get(engine, "LIMIT @BatchSize") in cleanup


@pytest.mark.parametrize("name", list(PARAMETERS))
def test_mssql_outbox_statements_parse_as_tsql(name):
    spec = TableSpec(Kind.OUTBOX, TableName(TABLE, "dbo"), saga_prefix="Sales_Api_")
    assert_parses(engines.get("mssql").outbox_statements(spec)[name].sql, name)


# --------------------------------------------------------------------------- live
def _flag(value) -> bool:
    return bool(int.from_bytes(value, "big")) if isinstance(value, bytes) else bool(value)


def _operations(value):
    return json.loads(value) if isinstance(value, str) else value  # jsonb comes back parsed


def _moment(url: str, at: datetime):
    return at.strftime("%Y-%m-%d %H:%M:%S") if url.startswith("sqlite") else at  # SQLite keeps DATETIME as text


def test_store_get_dispatch_and_cleanup_on_a_deployed_outbox(project, saga_db):
    url = project.deploy(saga_db, TOPOLOGY, "outbox")
    dialect = engines.get(url.split("+")[0].split(":")[0])
    (spec,) = [spec for spec in blueprint(loads(TOPOLOGY)).tables if spec.name.table == TABLE]
    statements = dialect.outbox_statements(spec)
    db = connect(url)
    raw = db.raw_connection()
    try:
        cursor, style = raw.cursor(), db.dialect.paramstyle

        def call(name: str, **values):
            result = run(cursor, statements[name], style, values)
            raw.commit()
            return result

        operations = [{"MessageId": "out-1", "Body": "e30="}]
        for message_id in ("m-1", "m-2"):
            call("store_outbox", MessageId=message_id, Operations=json.dumps(operations), PersistenceVersion="8.0.0")
        dispatched, stored = call("get_outbox", MessageId="m-1").fetchone()
        assert (_flag(dispatched), _operations(stored)) == (False, operations)
        now = datetime(2030, 1, 1, 12, 0, 0)
        call("set_outbox_dispatched", MessageId="m-1", DispatchedAt=_moment(url, now))
        call("set_outbox_dispatched", MessageId="m-2", DispatchedAt=_moment(url, now + timedelta(hours=1)))
        dispatched, stored = call("get_outbox", MessageId="m-1").fetchone()
        assert (_flag(dispatched), _operations(stored)) == (True, [])
        assert call("get_outbox", MessageId="m-3").fetchone() is None  # a message never handled

        call("cleanup_outbox", DispatchedBefore=_moment(url, now), BatchSize=10)  # nothing older than now
        assert call("get_outbox", MessageId="m-1").fetchone() is not None
        call("cleanup_outbox", DispatchedBefore=_moment(url, now + timedelta(hours=2)), BatchSize=1)  # one batch of one
        left = [call("get_outbox", MessageId=m).fetchone() is not None for m in ("m-1", "m-2")]
        assert sorted(left) == [False, True]
        call("cleanup_outbox", DispatchedBefore=_moment(url, now + timedelta(hours=2)), BatchSize=10)
        assert [call("get_outbox", MessageId=m).fetchone() for m in ("m-1", "m-2")] == [None, None]
        call("store_outbox", MessageId="m-4", Operations="[]", PersistenceVersion="8.0.0")
        call("cleanup_outbox", DispatchedBefore=_moment(url, now + timedelta(days=1)), BatchSize=10)
        assert call("get_outbox", MessageId="m-4").fetchone() is not None  # undispatched rows are never cleaned up
    finally:
        raw.close()
        db.dispose()
