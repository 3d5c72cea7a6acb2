"""The saga table lifecycle on real SQLite, PostgreSQL and MariaDB, with rows present at every step:
create, add a transitional property, backfill, promote; the promotion is refused in the database
while a row is not backfilled; find with the transitional fallback; optimistic concurrency."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from alembic.util import CommandError

from sqltransport_schema.runtime.sagas import DuplicateSaga, SagaTable

from .support.databases import connect

HEAD = 'transport_version: "9.1"\nengines: [sqlite, postgresql, mysql]\nendpoints:\n  - name: Sales.Api\n    sagas:\n'
V1 = HEAD + "      - name: OrderSaga\n        correlation: {name: OrderId, type: string}\n"
V2 = V1 + "        transitional: {name: OrderNumber, type: int}\n"
V3 = HEAD + "      - name: OrderSaga\n        correlation: {name: OrderNumber, type: int}\n"
TABLE = "Sales_Api_OrderSaga"


def _sagas(project, url) -> SagaTable:
    return SagaTable.from_database(connect(url), TABLE, config_file=str(project.ini))


def _count(url) -> int:
    db = connect(url)
    try:
        with db.connect() as conn:
            return conn.execute(sa.text(f'SELECT COUNT(*) FROM {_quote(url)}')).scalar()
    finally:
        db.dispose()


def _quote(url, name: str = TABLE) -> str:
    return f"`{name}`" if url.startswith("mysql") else f'"{name}"'


def _stamp(project, url) -> str:
    from alembic.runtime.migration import MigrationContext

    db = connect(url)
    try:
        with db.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        db.dispose()


def _ids(n: int) -> list[str]:
    return [str(uuid.UUID(int=i + 1)) for i in range(n)]


def test_create_transition_backfill_promote_keeps_every_saga(project, saga_db):
    url = saga_db
    # 1. create, with sagas in it
    project.deploy(url, V1, "sagas")
    ids = _ids(4)
    db = connect(url)
    sagas = _sagas(project, url)
    with db.begin() as conn:
        for i, saga_id in enumerate(ids[:3]):
            sagas.insert(conn, saga_id, f'{{"OrderId": "order-{i}", "OrderNumber": {1000 + i}}}', f"order-{i}")
    assert _count(url) == 3

    # 2. a transitional property: column and index added, every row kept (its value NULL)
    project.write_topology(V2)
    assert project.compile("transitional OrderNumber") == 0
    assert "op.add_saga_correlation(" in project.revisions()[-1].read_text()
    project.upgrade(url)
    v2 = _stamp(project, url)
    assert _count(url) == 3
    sagas = _sagas(project, url)
    with db.begin() as conn:
        sagas.insert(conn, ids[3], '{"OrderId": "order-3", "OrderNumber": 1003}', "order-3", transitional_value=1003)
        assert sagas.find(conn, "order-1").id == ids[1]
        # no match on the correlation column: the transitional column is queried
        assert sagas.find(conn, "no-such-order", transitional_value=1003).id == ids[3]
        assert sagas.find(conn, "no-such-order", transitional_value=1001) is None  # not backfilled yet
        # a match on the correlation column wins over the transitional one
        assert sagas.find(conn, "order-0", transitional_value=1003).id == ids[0]

    # 3. promotion before the backfill: refused by the database, nothing dropped, nothing lost
    project.write_topology(V3)
    assert project.compile("promote OrderNumber") == 0
    promote = project.revisions()[-1].read_text()
    assert "op.drop_saga_correlation(" in promote and 'require=("OrderNumber", "int")' in promote
    with pytest.raises(CommandError) as refused:
        project.upgrade(url)
    assert "backfill" in str(refused.value).lower()
    assert _stamp(project, url) == v2
    assert _count(url) == 4
    with db.begin() as conn:
        assert sagas.find(conn, "order-2").id == ids[2]  # the old correlation column is still there

    # 4. backfill: the endpoint's own updates write the transitional column, a script does the rest
    with db.begin() as conn:
        saga = sagas.get(conn, ids[0])
        assert sagas.update(conn, saga, saga.data, transitional_value=1000) is not None
        column = _quote(url, "Correlation_OrderNumber")
        where_id = f"{_quote(url, 'Id')} = :id"
        conn.execute(sa.text(f"UPDATE {_quote(url)} SET {column} = 1001 WHERE {column} IS NULL AND {where_id}"), {"id": ids[1]})
    with pytest.raises(CommandError):  # one row still lacks it
        project.upgrade(url)
    with db.begin() as conn:
        conn.execute(sa.text(f"UPDATE {_quote(url)} SET {column} = 1002 WHERE {column} IS NULL"))

    # 5. promotion after the backfill: done, and every saga found by its new correlation value
    project.upgrade(url)
    assert _stamp(project, url) != v2
    assert _count(url) == 4
    sagas = _sagas(project, url)
    assert sagas.spec.correlation.name == "OrderNumber" and sagas.spec.transitional is None
    with db.begin() as conn:
        for i, saga_id in enumerate(ids):
            assert sagas.find(conn, 1000 + i).id == saga_id
    db.dispose()


def test_optimistic_concurrency_loses_the_race_cleanly(project, saga_db):
    url = saga_db
    project.deploy(url, V1, "sagas")
    db = connect(url)
    sagas = _sagas(project, url)
    saga_id = _ids(1)[0]
    with db.begin() as conn:
        sagas.insert(conn, saga_id, '{"step": 0}', "order-1")
    # two handlers read the same saga, in their own transactions
    with db.begin() as conn:
        first = sagas.find(conn, "order-1")
    with db.begin() as conn:
        second = sagas.find(conn, "order-1")
    assert first == second and first.concurrency == 1
    with db.begin() as conn:
        won = sagas.update(conn, first, '{"step": 1}')
    assert won is not None and won.concurrency == 2
    with db.begin() as conn:
        assert sagas.update(conn, second, '{"step": "lost"}') is None  # 0 rows: lost the race
        assert sagas.complete(conn, second) is False  # a stale completion loses too
    with db.begin() as conn:
        current = sagas.get(conn, saga_id)
        assert current.concurrency == 2 and '"step": 1' in current.data.replace('"step":1', '"step": 1')
        assert sagas.complete(conn, current) is True
    with db.begin() as conn:
        assert sagas.get(conn, saga_id) is None
    db.dispose()


def test_unique_correlation_index_ignores_nulls_but_refuses_duplicates(project, saga_db):
    url = saga_db
    project.deploy(url, V2, "sagas")
    db = connect(url)
    sagas = _sagas(project, url)
    a, b, c = _ids(3)
    with db.begin() as conn:  # two sagas without a transitional value: NULLs never collide
        sagas.insert(conn, a, "{}", "order-a")
        sagas.insert(conn, b, "{}", "order-b")
    with pytest.raises(DuplicateSaga):
        with db.begin() as conn:
            sagas.insert(conn, c, "{}", "order-a")
    assert _count(url) == 2
    db.dispose()


def test_truly_concurrent_updates_one_wins_one_loses(project, saga_db):
    """Two transactions update the same saga at once: the second waits for the first's row (or
    database) lock, then finds Concurrency changed and updates nothing."""
    import threading

    url = saga_db
    project.deploy(url, V1, "sagas")
    first_db, second_db = connect(url), connect(url)
    sagas = _sagas(project, url)
    saga_id = _ids(1)[0]
    with first_db.begin() as conn:
        read = sagas.insert(conn, saga_id, '{"step": 0}', "order-1")
    results = {}
    first = first_db.connect()
    first.begin()
    results["first"] = sagas.update(first, read, '{"step": "first"}')  # holds the lock, not committed

    def second_writer():
        with second_db.begin() as conn:
            results["second"] = sagas.update(conn, read, '{"step": "second"}')

    thread = threading.Thread(target=second_writer)
    thread.start()
    thread.join(timeout=1.0)
    assert thread.is_alive(), "the second update should wait for the first transaction"
    first.commit()
    first.close()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert results["first"] is not None and results["first"].concurrency == 2
    assert results["second"] is None  # lost the race, cleanly: no error, nothing written
    with first_db.begin() as conn:
        final = sagas.get(conn, saga_id)
    assert final.concurrency == 2 and "first" in final.data
    first_db.dispose()
    second_db.dispose()
