"""backfill of a saga's transitional correlation column (PostgreSQL saga layout, transport-facts §8)."""

from __future__ import annotations

import json
import uuid

import pytest

from sqltransport_schema.pipeline.backfill import backfill, property_value
from sqltransport_schema.pipeline.connect import dbapi_connect

SAGA = """CREATE TABLE "public"."Sales_OrderSaga" (
    "Id" uuid NOT NULL PRIMARY KEY,
    "Metadata" text,
    "Data" jsonb,
    "PersistenceVersion" character varying(23),
    "SagaTypeVersion" character varying(23),
    "Concurrency" int,
    "Correlation_OrderNumber" character varying(200),
    "Correlation_OrderId" uuid
)"""
UNIQUE = 'CREATE UNIQUE INDEX "Sales_i_0123" ON "public"."Sales_OrderSaga" ("Correlation_OrderId") WHERE "Correlation_OrderId" IS NOT NULL'


def _sagas(url, count):
    conn = dbapi_connect(url)
    conn.execute(SAGA)
    conn.execute(UNIQUE)
    ids = []
    for i in range(count):
        order_id = str(uuid.uuid4())
        data = {"OrderNumber": f"N-{i}", "Order": {"Id": order_id}, "Total": i}
        if i % 10 == 0:
            del data["Order"]  # not every saga has the property yet
        ids.append(order_id if i % 10 else None)
        conn.execute(
            'INSERT INTO "public"."Sales_OrderSaga" VALUES (%s, %s, %s, %s, %s, %s, %s, NULL)',
            (uuid.uuid4(), "{}", json.dumps(data), "8.0.0", "1.0.0", 1 + i % 3, f"N-{i}"),
        )
    conn.commit()
    conn.close()
    return ids


def _column(url):
    conn = dbapi_connect(url)
    rows = conn.execute(
        'SELECT "Correlation_OrderNumber", "Correlation_OrderId" FROM "public"."Sales_OrderSaga" '
        'ORDER BY length("Correlation_OrderNumber"), "Correlation_OrderNumber"'
    ).fetchall()
    conn.close()
    return [None if r[1] is None else str(r[1]) for r in rows]


@pytest.mark.parametrize("with_spark", [True, False])
def test_backfill_fills_the_transitional_correlation_column(request, pg_url, with_spark):
    spark = request.getfixturevalue("spark") if with_spark else None
    expected = _sagas(pg_url, 500)
    result = backfill(pg_url, "Sales_OrderSaga@[public]", "Order.Id", "Correlation_OrderId", spark=spark, batch_size=64)
    assert (result.candidates, result.updated, result.missing, result.unreadable) == (500, 450, 50, 0)
    assert _column(pg_url) == expected
    again = backfill(pg_url, "Sales_OrderSaga@[public]", "Order.Id", "Correlation_OrderId", spark=spark)
    assert (again.candidates, again.updated) == (50, 0)  # only the rows still NULL are read; nothing changes


def test_property_value_reads_nested_properties():
    assert property_value('{"A": {"B": 5}}', ["A", "B"]) == "5"
    assert property_value('{"A": null}', ["A"]) is None
    assert property_value('{"A": true}', ["A"]) == "true"
    assert property_value(None, ["A"]) is None
    with pytest.raises(ValueError):
        property_value("{", ["A"])


def test_backfill_lets_the_refused_promotion_of_a_project_saga_table_pass(project, pg_url):
    """The saga lifecycle with the project's own migrations: the promotion is refused until the
    pipeline's backfill has filled the transitional column from each saga's JSON Data."""
    from sqltransport_schema.runtime.sagas import SagaTable

    from .support.databases import connect

    head = 'transport_version: "9.1"\nengines: [postgresql]\nendpoints:\n  - name: Sales\n    sagas:\n      - name: OrderSaga\n'
    project.write_topology(
        head + "        correlation: {name: OrderNumber, type: string}\n        transitional: {name: OrderId, type: guid}\n"
    )
    assert project.compile("transition") == 0
    project.upgrade(pg_url)
    db = connect(pg_url)
    order_ids = [str(uuid.uuid4()) for _ in range(40)]
    try:
        table = SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))
        with db.begin() as conn:
            for i, order_id in enumerate(order_ids):
                table.insert(conn, str(uuid.uuid4()), json.dumps({"OrderNumber": f"N-{i}", "OrderId": order_id}), f"N-{i}")
    finally:
        db.dispose()
    project.write_topology(head + "        correlation: {name: OrderId, type: guid}\n")
    assert project.compile("promote") == 0
    with pytest.raises(Exception, match="Correlation_OrderId"):
        project.upgrade(pg_url)

    result = backfill(pg_url, "Sales_OrderSaga@[public]", "OrderId", "Correlation_OrderId")
    assert (result.candidates, result.updated, result.missing) == (40, 40, 0)
    project.upgrade(pg_url)
    conn = dbapi_connect(pg_url)
    try:
        rows = conn.execute('SELECT "Correlation_OrderId"::text FROM "public"."Sales_OrderSaga"').fetchall()
    finally:
        conn.close()
    assert sorted(r[0] for r in rows) == sorted(order_ids)  # every saga kept, now found by its new property
