"""A process running the Sales endpoint's pump with the outbox and tenant databases, for tests/test_tenant_pump.py:

    python -m tests.support.tenant_child SHARED_URL ALEMBIC_INI TENANT_URLS BATCH [CRASH_POINT CRASH_AT]

TENANT_URLS is comma-separated; a message's `tenant` header is the index of its database. The
handler writes its effect (a row in `effects`) in its tenant's transaction, through the Context,
then sends two messages to Billing and publishes OrderPlaced (ids made from the incoming one's, as
tests/support/outbox_child.py does). Without a crash point the pump runs until the Sales queue is
empty, then the process exits 0. With one, the process kills itself with SIGKILL at the CRASH_AT-th
time the pump reaches it, by wrapping the pump's own steps (nothing in the library knows of it):

  in-handler      the handler's effect and its outbox row are written; its tenant transaction is
                  not committed (CRASH_AT counts rows stored)
  after-commit    every tenant transaction of a message (or batch) has committed; the shared one
                  has taken nothing and sent nothing (CRASH_AT counts batches)
  after-dispatch  the shared transaction has committed (messages taken, operations sent); the row
                  is not yet set as dispatched in its tenant database (CRASH_AT counts tenants' sets: the
                  batch's rows of one tenant at once)
"""

from __future__ import annotations

import os
import signal
import sys

import sqlalchemy as sa

from sqltransport_schema import wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.outbox import OutboxTable, PumpOutbox
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.transport import Transport

from .outbox_child import TOPIC, billing_ids, event_id, run_until_empty

TENANT_HEADER = "tenant"
STEPS = {
    "in-handler": (OutboxTable, "store"),
    "after-commit": (PumpOutbox, "closing"),
    "after-dispatch": (OutboxTable, "set_dispatched_many"),
}


def crash_at(point: str, nth: int) -> None:
    """Wrap the pump's step named by `point` so that its nth run kills this process first."""
    owner, name = STEPS[point]
    original, calls = getattr(owner, name), [0]

    def wrapped(*args, **kwargs):
        # in-handler: the row is written first; its transaction is not committed
        result = original(*args, **kwargs) if point == "in-handler" else None
        calls[0] += 1
        if calls[0] >= nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return result if point == "in-handler" else original(*args, **kwargs)

    setattr(owner, name, wrapped)


def main(argv: list[str]) -> int:
    url, ini, tenant_urls, batch = argv[:4]
    if len(argv) > 4:
        crash_at(argv[4], int(argv[5]))
    transport = Transport.from_database(make_engine(url), ini)
    urls = tenant_urls.split(",")

    def handler(message, context) -> None:
        insert = sa.text("INSERT INTO effects (message_id, tenant) VALUES (:id, :tenant)")
        context.connection.execute(insert, {"id": message.id, "tenant": message.headers[TENANT_HEADER]})
        for outgoing in billing_ids(message.id):
            context.send("Billing", b'{"billed": true}', {wire.MESSAGE_ID: outgoing})
        context.publish(TOPIC, b'{"placed": true}', {wire.MESSAGE_ID: event_id(message.id)})

    queue = transport.queue("Sales")
    choose = lambda headers: urls[int(headers[TENANT_HEADER])]  # noqa: E731 - as an application writes it
    pump = MessagePump(transport, queue, handler, batch_size=int(batch), peek_delay=0.1, outbox=True, tenant_database=choose)
    return run_until_empty(pump, transport, queue)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
