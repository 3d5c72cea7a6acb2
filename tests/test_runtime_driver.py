"""The driver-connection path: the runtime on a plain psycopg / sqlite3 connection, in the
driver's own transaction, against tables made by the project's migrations."""

from __future__ import annotations

import sqlite3

import pytest

from sqltransport_schema.engines import UnsupportedEngine
from sqltransport_schema.runtime.transport import DriverConnection

from .support.messages import headers
from .support.runtime import plain_driver_connection


@pytest.fixture
def driver(transport):
    raw = plain_driver_connection(transport)
    yield raw
    raw.close()


def test_fifo_commit_and_rollback_in_the_drivers_own_transaction(transport, driver):
    sales, audit = transport.queue("Sales"), transport.queue("audit")
    bound = transport.driver_connection(driver)
    sent = [headers(n, path="a/b", text="Fäktura ☃") for n in range(12)]
    ids = sales.send_many(bound, [(f"body {n}".encode(), h) for n, h in enumerate(sent[:10])])
    ids += [sales.send(bound, b"body 10", sent[10]), sales.send(bound, None, sent[11])]
    driver.rollback()
    with transport.engine.begin() as conn:
        assert sales.peek(conn) == 0  # nothing committed: the sends were in the driver's transaction
    ids = sales.send_many(bound, [(f"body {n}".encode(), h) for n, h in enumerate(sent[:10])])
    ids += [sales.send(bound, b"body 10", sent[10]), sales.send(bound, None, sent[11])]
    driver.commit()

    first = sales.receive(bound)
    audit.send(bound, b"side effect", headers("audit"))  # the caller's own write, same transaction
    assert first.id == ids[0] and first.headers == sent[0] and first.body == b"body 0"
    driver.rollback()  # a failed handler: the message returns, the write is gone
    with transport.engine.begin() as conn:  # what SQLAlchemy's path sees agrees
        assert audit.receive(conn) is None

    received = [sales.receive(bound)]
    received += sales.receive_batch(bound, 10)
    received.append(sales.receive(bound))
    assert sales.receive(bound) is None
    driver.commit()
    assert [m.id for m in received] == ids
    assert [m.headers for m in received] == sent
    assert received[10].body == b"body 10" and received[11].body is None
    with transport.engine.begin() as conn:
        assert sales.peek(conn) == 0 and sales.receive(conn) is None


def test_one_cursor_is_made_once_per_bound_connection(transport, driver):
    from sqltransport_schema.runtime.transport import execute

    bound = transport.driver_connection(driver)
    sales = transport.queue("Sales")
    assert execute(bound, sales.statements["peek"]) is bound.cursor
    assert execute(bound, sales.statements["peek"]) is bound.cursor
    driver.rollback()


def test_a_sqlalchemy_connection_and_a_driver_connection_see_one_queue(transport, driver):
    sales = transport.queue("Sales")
    with transport.engine.begin() as conn:
        through_sqlalchemy = sales.send(conn, b"a", headers("a"))
    bound = transport.driver_connection(driver)
    through_driver = sales.send(bound, b"b", headers("b"))
    driver.commit()
    assert sales.receive(bound).id == through_sqlalchemy
    driver.commit()
    with transport.engine.begin() as conn:
        assert sales.receive(conn).id == through_driver


def test_wrong_connections_are_refused_with_what_to_pass(transport, driver, tmp_path):
    sales = transport.queue("Sales")
    with pytest.raises(TypeError, match="driver_connection"):
        sales.receive(driver)  # unbound: the runtime does not guess a cursor and paramstyle per call
    with transport.engine.connect() as conn:
        with pytest.raises(TypeError, match="SQLAlchemy Connection already"):
            transport.driver_connection(conn)
    if transport.dialect.name == "postgresql":
        other = sqlite3.connect(tmp_path / "other.db")
        with pytest.raises(ValueError, match="sqlite3 connection reaches sqlite, but this transport is for postgresql"):
            transport.driver_connection(other)
        other.close()
    with pytest.raises(UnsupportedEngine, match="DBAPI module 'builtins'"):
        transport.driver_connection(object())
    assert isinstance(transport.driver_connection(driver), DriverConnection)
