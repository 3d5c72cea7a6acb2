"""A process running the Sales endpoint's pump with the outbox, for tests/test_outbox_pump.py:

    python -m tests.support.outbox_child TRANSPORT_URL ALEMBIC_INI EFFECTS_URL BATCH [CRASH_POINT CRASH_AT]

The handler counts its runs in a second database (a row per run in `effects`, committed by the
handler), then sends two messages to Billing and publishes OrderPlaced, with ids made from the
incoming message's. Without a crash point the pump runs until the Sales queue is empty, then the
process exits 0. With one, the process kills itself with SIGKILL at the CRASH_AT-th time the pump
reaches it, by wrapping the pump's own steps (nothing in the library knows of it):

  after-commit    the handler's transaction (of a message, or a batch) has committed; nothing is
                  dispatched (CRASH_AT counts dispatches: one per message or batch)
  after-dispatch  a batch's (or a message's) operations were sent, in the dispatch's transaction
                  (with the take, which on PostgreSQL also set the rows as dispatched); nothing of
                  that transaction is committed (CRASH_AT counts dispatches)
"""

from __future__ import annotations

import os
import signal
import sys
import time

import sqlalchemy as sa

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.outbox import PumpOutbox
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .messages import id_for

TOPIC = "OrderPlaced"


def derived_id(message_id: str, what: str) -> str:
    """An outgoing message's id, made from the incoming one's."""
    return id_for(message_id, what)


def billing_ids(message_id: str) -> list[str]:
    return [derived_id(message_id, f"billing-{i}") for i in range(2)]


def event_id(message_id: str) -> str:
    return derived_id(message_id, "event")


def crash_at(point: str, nth: int) -> None:
    """Wrap the pump's step named by `point` so that the run that brings its count to nth kills this
    process first (a step counts 1 a run, or the rows it is given: `rows(args)`)."""
    calls = [0]

    def wrap(owner: type, name: str, after: bool = False):
        original = getattr(owner, name)

        def wrapped(*args, **kwargs):
            calls[0] += 1
            if calls[0] >= nth and not after:
                os.kill(os.getpid(), signal.SIGKILL)
            result = original(*args, **kwargs)
            if calls[0] >= nth:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(owner, name, wrapped)

    if point == "after-commit":
        # runs once the handler's transaction has committed, in the dispatch's transaction before it
        # sends anything (its take done: on PostgreSQL sent with that commit, elsewhere just before)
        wrap(PumpOutbox, "_dispatch_taken")
    elif point == "after-dispatch":
        # the batch's (or message's) operations sent in the dispatch's transaction, not committed
        wrap(PumpOutbox, "dispatch", after=True)
    else:
        raise SystemExit(f"unknown crash point {point}")


def main(argv: list[str]) -> int:
    url, ini, effects_url, batch = argv[:4]
    if len(argv) > 4:
        crash_at(argv[4], int(argv[5]))
    transport = Transport.from_database(make_engine(url), ini)
    effects = make_engine(effects_url)

    def handler(message, context) -> None:
        with effects.begin() as conn:  # the handler's effect elsewhere, committed by the handler
            conn.execute(sa.text("INSERT INTO effects (message_id) VALUES (:id)"), {"id": message.id})
        for outgoing in billing_ids(message.id):
            context.send("Billing", b'{"billed": true}', {wire.MESSAGE_ID: outgoing})
        context.publish(TOPIC, b'{"placed": true}', {wire.MESSAGE_ID: event_id(message.id)})

    queue = transport.queue("Sales")
    pump = MessagePump(transport, queue, handler, batch_size=int(batch), peek_delay=0.1, outbox=True)
    return run_until_empty(pump, transport, queue)


def run_until_empty(pump, transport, queue) -> int:
    """Run the pump until its queue is empty (see run_until)."""
    # polled with a plain count: the transport's peek locks the head row, and the pump would skip it
    count = sa.text(f"SELECT count(*) FROM {transport.dialect.qualified(queue.name)}")
    return run_until(pump, transport, lambda conn: conn.execute(count).scalar() == 0, seconds=120)


def run_until(pump, transport, done, seconds: float) -> int:
    """Run the pump until `done(connection)` holds: exit code 0, 3 when it does not within `seconds`, 4 when the pump failed."""
    pump.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with transport.engine.connect() as conn:
            if done(conn):
                break
        time.sleep(0.05)
    else:
        return 3
    pump.stop(30)
    return 0 if pump.failure is None else 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
