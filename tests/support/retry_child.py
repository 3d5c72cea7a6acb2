"""A process running the Sales endpoint's pump with delayed retries, for tests/test_poison_matrix.py:

    python -m tests.support.retry_child URL ALEMBIC_INI [CRASH_POINT]

The handler refuses messages whose `kind` header is `raise` and writes a row in `effects` for the
others, in the receive's transaction. Without a crash point the pump runs until the Sales queue and
its delayed table are empty and the error queue holds a message, then the process exits 0 (3 when
that does not come within a minute). With one, the process kills itself with SIGKILL the first time
the pump reaches it, by wrapping the pump's own steps (nothing in the library knows of it):

  delayed-store  a failed message was written to the delayed table for its delayed retry; the
                 receive that took it has not committed
  due-move       the delayed retry fell due and was moved back into Sales; the move has not committed
"""

from __future__ import annotations

import os
import signal
import sys

import sqlalchemy as sa

from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.pump import MessagePump
from sqltransport_schema.runtime.recoverability import DELAYED_RETRY, Recoverability
from sqltransport_schema.runtime.transport import EndpointTables, Transport

from .outbox_child import run_until


def crash_at(point: str) -> None:
    owner, name = {"delayed-store": (Recoverability, "move"), "due-move": (EndpointTables, "move_due")}[point]
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        reached = args[-1].kind == DELAYED_RETRY if point == "delayed-store" else result > 0
        if reached:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, wrapped)


def main(argv: list[str]) -> int:
    url, ini = argv[:2]
    if len(argv) > 2:
        crash_at(argv[2])
    transport = Transport.from_database(make_engine(url), ini)

    def handler(message, context) -> None:
        if message.headers.get("kind") == "raise":
            raise RuntimeError("the handler refuses this order")
        context.connection.execute(sa.text("INSERT INTO effects (message_id) VALUES (:id)"), {"id": message.id})

    queue, endpoint = transport.queue("Sales"), transport.endpoint("Sales")
    pump = MessagePump(
        transport, queue, handler, peek_delay=0.1, immediate_retries=1, delayed_retries=1, delayed_retry_increase=0.2, endpoint=endpoint
    )
    count = {
        name: sa.text(f"SELECT count(*) FROM {transport.dialect.qualified(transport.name(name))}")
        for name in ("Sales", "Sales.Delayed", "error")
    }
    emptied = {"Sales": 0, "Sales.Delayed": 0, "error": 1}
    return run_until(pump, transport, lambda conn: {name: conn.execute(s).scalar() for name, s in count.items()} == emptied, seconds=60)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
