"""backfill of a saga's transitional correlation column (PostgreSQL saga layout, transport-facts §8)."""

from __future__ import annotations

import json
import uuid

import pytest

from sqltransport_schema.pipeline.backfill import backfill, property_value
from sqltransport_schema.pipeline.connect import dbapi_connect
from tests.pipeline_support import spark  # noqa: F401  (a fixture)

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
        conn.execute('INSERT INTO "public"."Sales_OrderSaga" VALUES (%s, %s, %s, %s, %s, %s, %s, NULL)',
                     (uuid.uuid4(), "{}", json.dumps(data), "8.0.0", "1.0.0", 1 + i % 3, f"N-{i}"))
    conn.commit()
    conn.close()
    return ids


def _column(url):
    conn = dbapi_connect(url)
    rows = conn.execute('SELECT "Correlation_OrderNumber", "Correlation_OrderId" FROM "public"."Sales_OrderSaga" '
                        'ORDER BY length("Correlation_OrderNumber"), "Correlation_OrderNumber"').fetchall()
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
