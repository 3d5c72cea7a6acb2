"""NServiceBus's recoverability in the pump (docs/runtime.md, "When a message fails"): what happens to
a message that failed, decided in one place for every receive.

A failure is anything raised while a message is handled: the handler, the tenant choice, the tenant
database's connection, the outbox's read or store there. Each counts as an attempt of that message.
After `immediate_retries` failures more than the first, the message goes to a delayed retry (through
the endpoint's delayed table, `NServiceBus.Retries` one more, after `delayed_retry_increase` times
that count seconds), and once the delayed retries are spent, to the error queue with the exception
in its headers. Headers that cannot be read go to the error queue unchanged, at once.

The counts of immediate retries live in memory, keyed by the message's id as NServiceBus keys them
(its NServiceBus.MessageId header, which a delayed retry keeps): a restarted pump starts them afresh,
as an NServiceBus endpoint does. The count of delayed retries travels in the message's headers.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import errors, wire

if TYPE_CHECKING:
    from .transport import Conn, EndpointTables, Message, Queue

__all__ = [
    "Recoverability",
    "DEFAULT_IMMEDIATE_RETRIES",
    "DEFAULT_DELAYED_RETRIES",
    "DEFAULT_DELAYED_RETRY_INCREASE",
]

log = logging.getLogger("sqltransport_schema.pump")

# NServiceBus's defaults (RecoverabilitySettings): 5 immediate retries; 3 delayed retries, the n-th after n x 10 s
DEFAULT_IMMEDIATE_RETRIES = 5
DEFAULT_DELAYED_RETRIES = 3
DEFAULT_DELAYED_RETRY_INCREASE = 10.0

HANDLE, FORWARD, DELAYED_RETRY, TO_ERROR, POISON = "handle", "forward", "delayed retry", "to error", "poison"


@dataclass(frozen=True)
class Step:
    """What becomes of a message before its handler runs: HANDLE it, or one of the moves (the
    outcome the pump counts: "failed" for the error queue, None for the others)."""

    kind: str
    delay: float = 0.0  # a delayed retry's, in seconds


HANDLING = Step(HANDLE)


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise errors.UsageError(f"{name} is a number of retries (0 or more), not {value!r}")
    return value


class Recoverability:
    """The policy and the counts of one pump: which step a message takes next, each failure
    counted (one warning per attempt), and the moves themselves, in the receive's transaction."""

    def __init__(
        self,
        queue: Queue,
        error_queue: Queue,
        *,
        immediate_retries: int,
        delayed_retries: int,
        delayed_retry_increase: float,
        endpoint: EndpointTables | None,
    ):
        self.queue = queue
        self.error_queue = error_queue
        self.immediate_retries = _whole("immediate_retries", immediate_retries)
        self.delayed_retries = _whole("delayed_retries", delayed_retries)
        if isinstance(delayed_retry_increase, bool) or not isinstance(delayed_retry_increase, (int, float)) or delayed_retry_increase < 0:
            raise errors.UsageError(f"delayed_retry_increase is a number of seconds (0 or more), not {delayed_retry_increase!r}")
        self.delayed_retry_increase = float(delayed_retry_increase)
        self.endpoint = endpoint  # its delayed table takes the delayed retries; its input forwards moved messages
        self._failures: dict[str, int] = {}  # message key -> failures since its last move
        self._errors: dict[str, BaseException] = {}  # message key -> the last one
        self._lock = threading.Lock()

    @staticmethod
    def key(message: Message) -> str:
        """The id the counts are kept under: NServiceBus.MessageId where the headers have it (a
        delayed retry comes back as a new row with the same header), else the row's."""
        return (message.headers or {}).get(wire.MESSAGE_ID) or message.id

    # -- the decision ------------------------------------------------------------------------
    def step(self, message: Message) -> Step:
        """The message's next step, before its handler runs."""
        if message.headers is None:
            return Step(POISON)
        if self.endpoint is not None and self.endpoint.forward_destination(message) is not None:
            return Step(FORWARD)
        if not self._failures:  # the common case: nothing has failed lately
            return HANDLING
        failures = self._failures.get(self.key(message), 0)
        if failures <= self.immediate_retries:
            return HANDLING
        done = wire.delayed_retries_done(message.headers)
        if done < self.delayed_retries:
            return Step(DELAYED_RETRY, self.delayed_retry_increase * (done + 1))
        return Step(TO_ERROR)

    def failed(self, message: Message, exc: BaseException) -> None:
        """One attempt of the message failed: count it, warn once."""
        key = self.key(message)
        with self._lock:
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            self._errors[key] = exc
        log.warning(
            "handling message %s failed (attempt %d of %d before %s): %s: %s",
            key,
            failures,
            self.immediate_retries + 1,
            "a delayed retry" if wire.delayed_retries_done(message.headers or {}) < self.delayed_retries else "the error queue",
            type(exc).__name__,
            exc,
        )

    def forget(self, messages: list[Message]) -> None:
        """After the commit that took them off the queue: their counts go."""
        if not self._failures:
            return
        with self._lock:
            for message in messages:
                key = self.key(message)
                self._failures.pop(key, None)
                self._errors.pop(key, None)

    # -- the moves, in the caller's transaction -------------------------------------------------
    def move(self, conn: Conn, message: Message, step: Step) -> str | None:
        """Carry out a step other than HANDLE on `conn` (the shared database's receive): the pump's
        outcome, "failed" for the error queue, None for the others."""
        if step.kind == POISON:
            log.error("message %s has unreadable headers (%s): moved to %s unchanged", message.id, message.poison, self.error_queue)
            self.error_queue.send(conn, message.body, message.raw_headers, message_id=message.id)
            return None
        assert message.headers is not None
        if step.kind == FORWARD:
            assert self.endpoint is not None
            target = self.endpoint.forward_destination(message)
            assert target is not None
            headers = {k: v for k, v in message.headers.items() if k != wire.FORWARD_DESTINATION}
            target.send(conn, message.body, headers, message_id=message.id)
            return None
        key = self.key(message)
        exc = self._errors.get(key) or RuntimeError("failed in an earlier receive")
        if step.kind == DELAYED_RETRY:
            assert self.endpoint is not None
            headers = wire.delayed_retry_headers({k: v for k, v in message.headers.items() if k != wire.FORWARD_DESTINATION})
            self.endpoint.send_delayed(conn, self.queue.address, message.body, headers, step.delay)
            log.warning(
                "message %s failed %d times: delayed retry %s of %d in %.1f s (%s)",
                key,
                self._failures.get(key, 0),
                headers[wire.DELAYED_RETRIES],
                self.delayed_retries,
                step.delay,
                exc,
            )
            return None
        headers = wire.error_headers(message.headers, exc, self.queue.address)
        self.error_queue.send(conn, message.body, headers, message_id=message.id)
        log.error("message %s failed %d times: moved to %s", key, self._failures.get(key, 0), self.error_queue)
        return "failed"
