"""More saga behaviour on real SQLite, PostgreSQL and MariaDB: hostile names, guarded table drops,
adoption of existing tables, downgrades."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from alembic.util import CommandError

from sqltransport_schema.migrate.refusals import StructureMismatch
from sqltransport_schema.runtime.sagas import SagaTable

from .support.databases import connect

ENGINES = "engines: [sqlite, postgresql, mysql]\n"


def topology(saga: str, extra: str = "") -> str:
    return 'transport_version: "9.1"\n' + ENGINES + "endpoints:\n  - name: Sales\n    sagas:\n" + saga + extra


ORDER = "      - name: OrderSaga\n        correlation: {name: OrderId, type: string}\n"


def _quote(url: str, name: str) -> str:
    return f"`{name}`" if url.startswith("mysql") else '"' + name.replace('"', '""') + '"'


def _scalar(url: str, table: str, what: str = "COUNT(*)"):
    db = connect(url)
    try:
        with db.connect() as conn:
            return conn.exec_driver_sql(f"SELECT {what} FROM {_quote(url, table)}").scalar()
    finally:
        db.dispose()


def _rows(url: str, table: str) -> int:
    return _scalar(url, table)


def _tables(url: str) -> set[str]:
    db = connect(url)
    try:
        return set(sa.inspect(db).get_table_names())
    finally:
        db.dispose()


def test_hostile_names_survive_the_whole_lifecycle(project, saga_db):
    url = saga_db
    prop, new_prop = "Order Id's \"x\"", "Nümmer;--"
    saga = f"      - name: \"Order'Saga \\\"q\\\"\"\n        correlation: {{name: '{prop.replace(chr(39), chr(39) * 2)}', type: string}}\n"
    project.deploy(url, topology(saga), "sagas")
    table = "Sales_Order'Saga \"q\""
    db = connect(url)
    sagas = SagaTable.from_database(db, table, config_file=str(project.ini))
    saga_id = str(uuid.uuid4())
    with db.begin() as conn:
        sagas.insert(conn, saga_id, "{}", "a'b")
    project.deploy(url, topology(saga + f"        transitional: {{name: '{new_prop}', type: int}}\n"), "transitional")
    sagas = SagaTable.from_database(db, table, config_file=str(project.ini))
    with db.begin() as conn:
        saga_row = sagas.find(conn, "a'b")
        assert saga_row.id == saga_id
        assert sagas.update(conn, saga_row, '{"n": 7}', transitional_value=7) is not None
    promoted = topology(f"      - name: \"Order'Saga \\\"q\\\"\"\n        correlation: {{name: '{new_prop}', type: int}}\n")
    project.deploy(url, promoted, "promote")
    sagas = SagaTable.from_database(db, table, config_file=str(project.ini))
    with db.begin() as conn:
        assert sagas.find(conn, 7).id == saga_id
    assert _rows(url, table) == 1
    db.dispose()


def test_removing_a_saga_is_refused_while_it_holds_sagas_and_discard_drops_it(project, saga_db):
    url = saga_db
    project.deploy(url, topology(ORDER), "sagas")
    db = connect(url)
    sagas = SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))
    with db.begin() as conn:
        sagas.insert(conn, str(uuid.uuid4()), "{}", "order-1")
    db.dispose()
    without = 'transport_version: "9.1"\n' + ENGINES + "endpoints:\n  - name: Sales\n"
    project.write_topology(without)
    assert project.compile("remove saga") == 0
    with pytest.raises(CommandError) as refused:  # Alembic's FAILED line, naming -x discard=
        project.upgrade(url)
    assert "-x discard=Sales_OrderSaga" in str(refused.value)
    assert "still holds sagas" in str(refused.value) or "still holds saga instances" in str(refused.value)
    assert _rows(url, "Sales_OrderSaga") == 1
    # downgrade -x discard_messages=true would drop it too; here the topology says so
    project.write_topology(without + "discard:\n  - name: Sales_OrderSaga\n")
    for revision in project.revisions()[-1:]:
        revision.unlink()
    assert project.compile("discard saga") == 0
    project.upgrade(url)
    assert "Sales_OrderSaga" not in _tables(url)


def test_a_stranger_table_with_the_saga_tables_name_is_not_adopted(project, saga_db):
    url = saga_db
    db = connect(url)
    with db.begin() as conn:
        name = "`Sales_OrderSaga`" if url.startswith("mysql") else '"Sales_OrderSaga"'
        conn.exec_driver_sql(f"CREATE TABLE {name} (Id varchar(38) PRIMARY KEY, Payload text)")
    db.dispose()
    project.write_topology(topology(ORDER))
    assert project.compile("sagas") == 0
    with pytest.raises(StructureMismatch) as exc:
        project.upgrade(url)
    assert "concurrency" in str(exc.value) and "saga table" in str(exc.value)


def test_downgrade_of_a_transition_drops_the_transitional_column_and_keeps_rows(project, saga_db):
    url = saga_db
    project.write_topology(topology(ORDER))
    assert project.compile("sagas") == 0
    first = project.head()
    db, sagas = _with_transitional(project, url, "int")
    with db.begin() as conn:
        sagas.insert(conn, str(uuid.uuid4()), "{}", "order-1", transitional_value=1)
    db.dispose()
    project.downgrade(url, first)
    assert _rows(url, "Sales_OrderSaga") == 1
    db = connect(url)
    columns = {c["name"] for c in sa.inspect(db).get_columns("Sales_OrderSaga")}
    db.dispose()
    assert "Correlation_OrderNumber" not in columns and "Correlation_OrderId" in columns


def test_a_refused_revision_runs_again_after_the_backfill(project, saga_db):
    """On MariaDB DDL commits as it runs: the steps before the refusal stay applied and must be skipped
    when the revision runs again (PostgreSQL and SQLite roll the whole revision back)."""
    url = saga_db
    other = "      - name: OtherSaga\n        correlation: {name: Key, type: int}\n"
    transition = ORDER + "        transitional: {name: OrderNumber, type: int}\n"
    project.deploy(url, topology(other + transition), "sagas")
    db = connect(url)
    orders = SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))
    with db.begin() as conn:
        orders.insert(conn, str(uuid.uuid4()), "{}", "order-1")  # OrderNumber not set
    promoted = "      - name: OrderSaga\n        correlation: {name: OrderNumber, type: int}\n"
    project.write_topology(topology(other + "        transitional: {name: Code, type: string}\n" + promoted))
    assert project.compile("transition other, promote orders") == 0
    with pytest.raises(CommandError):
        project.upgrade(url)
    column = "`Correlation_OrderNumber`" if url.startswith("mysql") else '"Correlation_OrderNumber"'
    table = "`Sales_OrderSaga`" if url.startswith("mysql") else '"Sales_OrderSaga"'
    with db.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {table} SET {column} = 1")
    project.upgrade(url)
    columns = {c["name"] for c in sa.inspect(db).get_columns("Sales_OtherSaga")}
    assert "Correlation_Code" in columns
    orders = SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))
    with db.begin() as conn:
        assert orders.find(conn, 1) is not None
    db.dispose()


def test_the_offline_mysql_script_runs_in_the_mysql_client(project, mysql_url):
    import shutil
    import subprocess

    from sqlalchemy.engine import make_url

    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        pytest.skip("no mysql/mariadb command-line client")
    project.write_topology(topology(ORDER + "        transitional: {name: OrderNumber, type: int}\n"))
    assert project.compile("sagas") == 0
    script = project.offline("mysql://")
    assert "DELIMITER //" in script
    url = make_url(mysql_url)
    result = subprocess.run(
        [client, "-h", url.host, "-P", str(url.port or 3306), "-u", url.username, url.database],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    db = connect(mysql_url)
    columns = {c["name"] for c in sa.inspect(db).get_columns("Sales_OrderSaga")}
    db.dispose()
    assert {"Correlation_OrderId", "Correlation_OrderNumber"} <= columns


def test_the_queue_transport_refuses_a_saga_only_engine(mysql_url):
    from sqltransport_schema.runtime.transport import Transport

    db = connect(mysql_url)
    with pytest.raises(ValueError, match="saga tables only"):
        Transport(db)
    db.dispose()


def _transitional_value(url: str, table: str, column: str):
    return _scalar(url, table, _quote(url, column))


def _with_transitional(project, url: str, type_: str) -> tuple:
    """OrderSaga given the transitional property OrderNumber, deployed: (engine, its SagaTable)."""
    project.deploy(url, topology(ORDER + f"        transitional: {{name: OrderNumber, type: {type_}}}\n"), "transitional")
    db = connect(url)
    return db, SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))


def test_update_keeps_the_transitional_value_it_is_not_given(project, saga_db):
    url = saga_db
    db, sagas = _with_transitional(project, url, "string")
    with db.begin() as conn:
        sagas.insert(conn, str(uuid.uuid4()), "{}", "o-1", transitional_value="A-1")
    with db.begin() as conn:  # as docs/sagas.md's example updates: data only
        assert sagas.update(conn, sagas.find(conn, "o-1"), '{"Shipped": true}') is not None
    assert _transitional_value(url, "Sales_OrderSaga", "Correlation_OrderNumber") == "A-1"
    with db.begin() as conn:
        assert sagas.update(conn, sagas.find(conn, "o-1"), "{}", transitional_value="B-2") is not None
    assert _transitional_value(url, "Sales_OrderSaga", "Correlation_OrderNumber") == "B-2"
    with db.begin() as conn:  # None is a value: the column is cleared
        saga = sagas.find(conn, "o-1")
        assert sagas.update(conn, saga, "{}", transitional_value=None).concurrency == saga.concurrency + 1
    assert _transitional_value(url, "Sales_OrderSaga", "Correlation_OrderNumber") is None
    db.dispose()
