"""Which messages of the error queue: the one `Selection` every listing and every action takes (the
console's filters and choices, the command line's --all, --failed-queue and --message-id)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any

from .. import errors, wire
from ..engines.live_bus import ESCAPED_VALUE

# group by -> the fields of a group's key
GROUPINGS = {
    "exception": ("exception_type", "exception_message"),
    "failed_queue": ("failed_queue",),
    "message_type": ("message_type",),
    "endpoint": ("endpoint",),
}
FIELDS = ("failed_queue", "exception_type", "exception_message", "message_type", "endpoint", "time_of_failure")
# the filter fields a form or a request may give (what Selection.of reads)
FILTER_FIELDS = frozenset({"since", "until", "failed_queue", "text", "body", *FIELDS[1:-1], "group", "by"})
GROUP_ID = 16  # hex digits of a group's id
# the parameter each filter binds
PARAMETERS = {
    "since": "Since",
    "until": "Until",
    "failed_queue": "FailedQueue",
    "text": "Text",
    "body": "Body",
    "exception_type": "ExceptionType",
    "exception_message": "ExceptionMessage",
    "message_type": "MessageType",
    "endpoint": "Endpoint",
}


def read_value(value: Any) -> Any:
    """A header's value as a read of the engine gave it, as text: a value the engine could not hold
    as text (engines/live_bus.py, ESCAPED_VALUE: a NUL, a lone surrogate) decoded from its JSON
    string here, so it holds them; other values as they are."""
    if isinstance(value, str) and value.startswith(ESCAPED_VALUE):
        decoded = wire.first_values('{"v":' + value[1:] + "}")
        return decoded["v"] if decoded is not None and "v" in decoded else value[1:]
    return value


def like_pattern(text: str) -> str:
    """A LIKE pattern (ESCAPE '!') matching any text that holds `text`: its %, _ and ! are characters."""
    return "%" + text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


@dataclass(frozen=True)
class Selection:
    """Which messages of the error queue. `all_messages`: every one; `ids`: these (a row's Id, or
    its NServiceBus.MessageId); otherwise those the filter fields match: time of failure in
    [since, until), the failed queue, text the headers hold, text the body holds (its BodyString
    column, where the error queue has one), and a group's own fields (exception_type, ... as in
    GROUPINGS) or a group by its id (`group_id`, grouped `by`). A listing reads the filter; an
    action (retry, archive) refuses a selection that chooses nothing."""

    since: datetime | None = None
    until: datetime | None = None
    failed_queue: str | None = None
    text: str | None = None
    body: str | None = None
    group: tuple[tuple[str, str], ...] = ()
    group_id: str | None = None  # a group by its id (group_id()); `by` its grouping
    by: str = "exception"
    ids: tuple[str, ...] = ()
    all_messages: bool = False
    # failed_queue names a queue by its address (a bare name where the blueprint puts it, as retry
    # reads FailedQ), not the header's text as written (the console's filter): the command line's
    by_address: bool = False

    @classmethod
    def of(cls, values: dict[str, str]) -> Selection:
        """A selection from query or form fields (empty ones ignored); bad values are a UsageError. A
        group is `group` (its id) and `by`, or (as before ids) its fields' text."""
        for name, value in values.items():
            if "\x00" in str(value):  # PostgreSQL refuses it in a text (psycopg: a 500 otherwise)
                raise errors.UsageError(f"{name}: the value holds a NUL character; filter by the text around it")
        group = tuple((name, values[name]) for name in FIELDS[:-1] if name in values and name != "failed_queue")
        by = values.get("by") or "exception"
        if by not in GROUPINGS:
            raise errors.UsageError(f"group by {by!r}: choose one of {', '.join(GROUPINGS)}")
        chosen = values.get("group") or None
        if chosen is not None and (len(chosen) != GROUP_ID or any(c not in "0123456789abcdef" for c in chosen)):
            raise errors.UsageError(
                f"group: {chosen[:40]!r} is no group's id ({GROUP_ID} hex digits, as GET /api/failed/groups lists them)"
            )
        return cls(
            since=_time(values.get("since"), "since"),
            until=_time(values.get("until"), "until"),
            failed_queue=values.get("failed_queue") or None,
            text=values.get("text") or None,
            body=values.get("body") or None,
            group=group,
            group_id=chosen,
            by=by,
        )

    @classmethod
    def chosen(cls, all_messages: bool = False, failed_queue: str | None = None, ids: tuple[str, ...] | list[str] = ()) -> Selection:
        """Exactly one of every message, one failed queue's, these ids (the command line's choice);
        UsageError for none or more than one."""
        if sum((bool(all_messages), failed_queue is not None, bool(ids))) != 1:
            raise errors.UsageError("choose the messages: all of them, one failed queue, or message ids (exactly one)")
        return cls(all_messages=bool(all_messages), failed_queue=failed_queue, ids=tuple(ids), by_address=failed_queue is not None)

    @property
    def filtered(self) -> bool:
        """Whether a filter field is given (what a listing's statement binds)."""
        return bool(self.bindings()) or self.group_id is not None

    @property
    def chooses(self) -> bool:
        """Whether it names any message for an action: every one, ids, or a filter."""
        return self.all_messages or bool(self.ids) or self.filtered

    @property
    def scan(self) -> bool:
        """Whether a retry reads it off the error queue in its own order, reading each message's
        headers (every message, one failed queue's by its address, ids), rather than by the listing's filter."""
        others = {f.name for f in fields(self)} - {"failed_queue", "ids", "all_messages", "by", "by_address"}
        return not any(getattr(self, name) for name in others)

    @property
    def shown_group(self) -> tuple[tuple[str, Any], ...]:
        """The group's fields and their values as text (a NUL, a lone surrogate decoded)."""
        return tuple((name, read_value(value)) for name, value in self.group)

    def bindings(self) -> dict[str, str]:
        """filter name -> the value it binds."""
        out: dict[str, str] = {}
        if self.since is not None:
            out["since"] = wire.format_time_sent(self.since)
        if self.until is not None:
            out["until"] = wire.format_time_sent(self.until)
        if self.failed_queue is not None:
            out["failed_queue"] = self.failed_queue
        if self.text is not None:
            out["text"] = like_pattern(self.text)
        if self.body is not None:
            out["body"] = like_pattern(self.body)
        out.update(self.group)
        return out

    def query(self) -> dict[str, str]:
        """The filter as query fields (what Selection.of reads back): a group by its id, never its text."""
        out = {"by": self.by, "group": self.group_id} if self.group_id else {name: value for name, value in self.group}
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.strftime("%Y-%m-%dT%H:%M:%S")
        if self.failed_queue:
            out["failed_queue"] = self.failed_queue
        if self.text:
            out["text"] = self.text
        if self.body:
            out["body"] = self.body
        return out

    def describe(self) -> str:
        """The selection in an action log's words."""
        if self.all_messages:
            return "every message"
        if self.ids:
            return f"{len(self.ids)} chosen message(s)"
        from urllib.parse import urlencode

        return "messages matching " + (urlencode(self.query()) or "no filter (all)")


def _time(text: str | None, name: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise errors.UsageError(f"{name}: {text!r} is no time (give 2026-11-27T10:00 or 2026-11-27T10:00:00+00:00)") from None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


NO_FILTER = Selection()  # every message, as a listing reads them
