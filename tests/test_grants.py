"""sqltransport-schema grants: least-privilege logins, proven on a real PostgreSQL server."""

from __future__ import annotations

import psycopg
import pytest

from sqltransport_schema import grants, topology
from sqltransport_schema.runtime.transport import Transport

from .support.grants import MSSQL_TOPOLOGY, TOPOLOGY, _conninfo, apply, as_role, deployed, headers, role, run_grants  # noqa: F401 (fixtures)


def exercise_endpoint(transport: Transport, endpoint: str, schema: str | None, send_to: list[tuple[str, str | None]]) -> None:
    """Every runtime statement of the endpoint's tables, as the role."""
    ep = transport.endpoint(endpoint, schema)
    queue = ep.input
    with transport.engine.begin() as conn:
        queue.purge(conn)  # what earlier endpoints sent here
        queue.send(conn, b"1", headers(1))
        queue.send_many(conn, [(b"2", headers(2)), (b"3", headers(3))])
        queue.send(conn, b"expiring", headers("x"), time_to_be_received=0.0)
        assert queue.peek(conn) == 4
    with transport.engine.begin() as conn:
        assert queue.receive(conn).body == b"1"
        locked, _ = queue.lock_batch(conn, 2)  # the pump's batches: lock, savepoint, delete
        queue.savepoint(conn)
        queue.rollback_to_savepoint(conn)
        queue.delete_locked(conn, [m.order for m in locked])
        assert [m.body for m in locked] == [b"2", b"3"]
        queue.send(conn, b"expired", headers("y"), time_to_be_received=0.0)
        assert queue.purge_expired(conn, batch_size=10) >= 1
        queue.send(conn, b"left", headers("z"))
        assert queue.purge(conn) >= 1
    with transport.engine.begin() as conn:
        ep.send_delayed(conn, queue, b"later", headers("d"), due_after=0)
        assert ep.next_due(conn) is not None
    with transport.engine.begin() as conn:
        assert ep.move_due(conn) == 1
        assert ep.next_due(conn) is None
        assert queue.receive(conn).body == b"later"
    subs = transport.subscriptions()
    with transport.engine.begin() as conn:
        subs.subscribe(conn, endpoint, queue.address, "Shop.OrderPlaced")
        subs.subscribe(conn, endpoint, queue.address, "Shop.OrderPlaced")  # the upsert's UPDATE branch
        assert subs.subscribers(conn, ["Shop.OrderPlaced"]) == [queue.address]
        subs.unsubscribe(conn, endpoint, "Shop.OrderPlaced")
        assert subs.subscribers(conn, ["Shop.OrderPlaced"]) == []
    with transport.engine.begin() as conn:
        for table, table_schema in send_to:
            transport.queue(table, table_schema).send(conn, b"sent", headers("s"))


def assert_denied(url: str, role: str, sql: str) -> None:
    with psycopg.connect(_conninfo(url, role), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql)


DDL = [
    'CREATE TABLE "public"."Intruder" (id int)',
    'CREATE TABLE "billing"."Intruder" (id int)',
    'ALTER TABLE "public"."Sales" ADD COLUMN extra int',
    'DROP TABLE "public"."audit"',
    'TRUNCATE "public"."Sales"',
    'TRUNCATE "billing"."Billing"',
]


def test_runtime_grants_run_every_statement_and_nothing_else(project, deployed, role):
    code, sql = run_grants(project, "--engine", "postgresql", "--login", role)
    assert code == 0
    assert "CREATE" not in sql.replace("-- ", "") and "ALTER" not in sql and "DROP" not in sql
    apply(deployed, sql)
    transport = as_role(deployed, role)
    try:
        from sqltransport_schema.revisions import deployed_blueprint

        assert deployed_blueprint(transport.engine, str(project.ini)).transport_version == "9.1"
        exercise_endpoint(transport, "Sales", None, [("error", None), ("audit", None), ("Billing", "billing")])
        exercise_endpoint(transport, "Billing", "billing", [("Sales.host-a", None)])
        exercise_instance(transport)
    finally:
        transport.engine.dispose()
    for statement in DDL:
        assert_denied(deployed, role, statement)


def exercise_instance(transport: Transport) -> None:
    queue = transport.queue("Sales.host-a")
    with transport.engine.begin() as conn:
        queue.purge(conn)
        queue.send(conn, b"i", headers("i"))
        assert queue.peek(conn) == 1
        assert queue.receive(conn).body == b"i"


def test_endpoint_grants_receive_own_queues_send_to_all(project, deployed, role):
    code, sql = run_grants(project, "--engine", "postgresql", "--login", role, "--endpoint", "Sales")
    assert code == 0
    apply(deployed, sql)
    transport = as_role(deployed, role)
    try:
        from sqltransport_schema.revisions import deployed_blueprint

        assert deployed_blueprint(transport.engine, str(project.ini)).transport_version == "9.1"
        exercise_endpoint(transport, "Sales", None, [("error", None), ("audit", None), ("Billing", "billing")])
        exercise_instance(transport)
    finally:
        transport.engine.dispose()
    for statement in DDL + [
        'DELETE FROM "billing"."Billing"',
        'SELECT * FROM "public"."error"',
        'SELECT * FROM "billing"."Billing.Delayed"',
        'INSERT INTO "billing"."Billing.Delayed" (Headers, Due) VALUES (\'{}\', now())',
    ]:
        assert_denied(deployed, role, statement)
    billing = as_role(deployed, role)
    try:
        with billing.engine.begin() as conn, pytest.raises(Exception, match="permission denied"):
            billing.queue("Billing", "billing").receive(conn)
    finally:
        billing.engine.dispose()


def test_installer_grants_let_a_plain_role_run_the_migrations(project, deployed, role, pg_url):
    code, sql = run_grants(project, "--engine", "postgresql", "--login", role, "--installer")
    assert code == 0
    assert "CREATE ON DATABASE" in sql and 'GRANT USAGE, CREATE ON SCHEMA "public"' in sql
    apply(deployed, sql)
    with psycopg.connect(_conninfo(deployed, role), autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "installer_probe"')
        conn.execute('CREATE TABLE "public"."installer_probe" (id int)')
        conn.execute('DROP TABLE "public"."installer_probe"')
        conn.execute('DROP SCHEMA "installer_probe"')


def test_mssql_output(project):
    project.write_topology(MSSQL_TOPOLOGY)
    code, sql = run_grants(project, "--engine", "mssql", "--login", "role")
    assert code == 0
    lines = sql.splitlines()
    assert lines[1:] == [
        "GRANT SELECT ON [dbo].[alembic_version] TO [role];",
        "GRANT SELECT ON [dbo].[sqltransport_blueprint] TO [role];",
        "GRANT SELECT, INSERT, DELETE ON [dbo].[Sales] TO [role];",
        "GRANT SELECT, INSERT, DELETE ON [dbo].[error] TO [role];",
        "GRANT SELECT, INSERT, DELETE ON [dbo].[Sales.Delayed] TO [role];",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON [dbo].[SubscriptionRouting] TO [role];",
        "USE [logistics];",
        "GRANT SELECT, INSERT, DELETE ON [dbo].[Shipping] TO [role];",
        "GRANT SELECT, INSERT, DELETE ON [dbo].[Shipping.Delayed] TO [role];",
    ]
    code, sql = run_grants(project, "--engine", "mssql", "--login", "odd]name", "--endpoint", "Sales")
    assert "GRANT SELECT, INSERT, DELETE ON [dbo].[Sales] TO [odd]]name];" in sql
    assert "GRANT INSERT ON [dbo].[error] TO [odd]]name];" in sql
    assert "Shipping.Delayed" not in sql
    code, sql = run_grants(project, "--engine", "mssql", "--login", "role", "--installer")
    assert "GRANT CREATE TABLE TO [role];" in sql and "GRANT VIEW DEFINITION TO [role];" in sql
    assert "GRANT ALTER ON SCHEMA::[dbo] TO [role];" in sql


@pytest.mark.parametrize(
    "engine, says",
    [
        ("sqlite", "no logins or permissions"),
        ("mysql", "grants are not generated for MySQL"),
        ("oracle", "grants are not generated for Oracle"),
    ],
)
def test_engines_without_generated_grants_say_so_in_one_line(project, engine, says):
    project.write_topology(TOPOLOGY)
    code, out = run_grants(project, "--engine", engine, "--login", "x")
    assert code == 0 and says in out and len(out.splitlines()) == 1


def test_unknown_endpoint_is_an_error(project, capsys):
    project.write_topology(TOPOLOGY)
    assert run_grants(project, "--engine", "postgresql", "--login", "x", "--endpoint", "Nope")[0] == 2
    assert "no endpoint 'Nope'" in capsys.readouterr().err


def test_plan_is_pure():
    topo = topology.loads(TOPOLOGY)
    plan = grants.runtime_plan(topo, "Billing")
    needs = {(g.table.table, g.need) for g in plan.tables}
    assert ("Billing", "receive") in needs and ("Sales", "send") in needs and ("Sales.Delayed", "delayed") not in needs
