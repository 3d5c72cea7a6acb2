"""The error queue as the console shows it: groups (by exception, failed queue, message type or
endpoint) with their counts and first and last time of failure, pages of messages by keyset (the
key after the last one shown, never an OFFSET), and one message with its headers and its body as
text. The statements are the engine's (`dialect.operations.failed_*`); values are bound."""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from xml.dom import minidom
from xml.parsers.expat import ExpatError

from .. import errors, wire
from ..runtime.operations import DEFAULT_ERROR_QUEUE, resolve
from ..runtime.transport import execute

if TYPE_CHECKING:
    from ..runtime.transport import Transport
    from ..schema import TableName

# group by -> the fields of a group's key
GROUPINGS = {
    "exception": ("exception_type", "exception_message"),
    "failed_queue": ("failed_queue",),
    "message_type": ("message_type",),
    "endpoint": ("endpoint",),
}
FIELDS = ("failed_queue", "exception_type", "exception_message", "message_type", "endpoint", "time_of_failure")
PAGE_SIZE = 50
MAX_PAGE = 1000
# the parameter each filter binds
_PARAMETERS = {
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
BODY_LIMIT = 1 << 20  # bodies above this are shown cut (pretty-printing a bigger one is refused)


@dataclass(frozen=True)
class Filter:
    """Which messages of the error queue: time of failure in [since, until), the failed queue,
    text the headers hold, text the body holds (its BodyString column, where the error queue has
    one), and a group's own fields (exception_type, ... as in GROUPINGS)."""

    since: datetime | None = None
    until: datetime | None = None
    failed_queue: str | None = None
    text: str | None = None
    body: str | None = None
    group: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, values: dict[str, str]) -> Filter:
        """A filter from query or form fields (empty ones ignored); bad values are a UsageError."""
        group = tuple((name, values[name]) for name in FIELDS[:-1] if name in values and name != "failed_queue")
        return cls(
            since=_time(values.get("since"), "since"),
            until=_time(values.get("until"), "until"),
            failed_queue=values.get("failed_queue") or None,
            text=values.get("text") or None,
            body=values.get("body") or None,
            group=group,
        )

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
            out["text"] = _contains(self.text)
        if self.body is not None:
            out["body"] = _contains(self.body)
        out.update(self.group)
        return out

    def query(self) -> dict[str, str]:
        """The filter as query fields (what Filter.of reads back)."""
        out = {name: value for name, value in self.group}
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


def _contains(text: str) -> str:
    """A LIKE pattern (ESCAPE '!') matching any text that holds `text`: its %, _ and ! are characters."""
    return "%" + text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


def _time(text: str | None, name: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise errors.UsageError(f"{name}: {text!r} is no time (give 2026-11-27T10:00 or 2026-11-27T10:00:00+00:00)") from None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def has_body_string(transport: Transport, error_queue: str = DEFAULT_ERROR_QUEUE) -> bool:
    """Whether the error queue's table has BodyString (the deployed topology asks for it and the
    transport version's installer adds it): what the body filter reads."""
    dialect = transport.dialect
    key = dialect.table_key(_table(transport, error_queue))
    specs = transport.blueprint.tables if transport.blueprint is not None else ()
    return any(dialect.table_key(s.name) == key and dialect.has_body_string(s, transport.profile) for s in specs)


def _run(transport: Transport, statement: Any, filt: Filter, extra: dict[str, Any], error_queue: str) -> list[Any]:
    if filt.body is not None and not has_body_string(transport, error_queue):
        raise errors.UsageError(
            f"body: the error queue {error_queue} has no BodyString column (body_string: true on its endpoint in the topology, "
            "transport 4.1+, on PostgreSQL 8.1.13 or 9.0.2+); filter by text in the headers instead"
        )
    bound = filt.bindings()
    params = {_PARAMETERS[name]: value for name, value in bound.items()} | extra
    with transport.engine.connect() as conn:
        return list(execute(conn, statement, params).fetchall())


def _table(transport: Transport, error_queue: str) -> TableName:
    return resolve(transport, error_queue)


@dataclass
class Group:
    key: dict[str, str]
    messages: int
    first: str | None
    last: str | None

    def to_json(self) -> dict:
        return {"key": self.key, "messages": self.messages, "first_failure": self.first, "last_failure": self.last}


def groups(transport: Transport, by: str = "exception", filt: Filter = Filter(), error_queue: str = DEFAULT_ERROR_QUEUE) -> list[Group]:
    """The error queue's messages that pass `filt`, grouped `by` one of GROUPINGS, largest first."""
    if by not in GROUPINGS:
        raise errors.UsageError(f"group by {by!r}: choose one of {', '.join(GROUPINGS)}")
    keys = GROUPINGS[by]
    statement = transport.dialect.operations.failed_groups(_table(transport, error_queue), transport.profile, keys, tuple(filt.bindings()))
    out = []
    for row in _run(transport, statement, filt, {}, error_queue):
        n = len(keys)
        out.append(Group(dict(zip(keys, row[:n])), int(row[n]), row[n + 1] or None, row[n + 2] or None))
    return out


@dataclass
class Page:
    rows: list[dict] = field(default_factory=list)
    after: int | None = None  # the key this page started after
    next_after: int | None = None  # the key the next page starts after (None: the last page)

    def to_json(self) -> dict:
        return {"messages": self.rows, "after": self.after, "next_after": self.next_after}


def page(
    transport: Transport, filt: Filter = Filter(), after: int | None = None, limit: int = PAGE_SIZE, error_queue: str = DEFAULT_ERROR_QUEUE
) -> Page:
    """Up to `limit` messages passing `filt` after the key `after`, in FIFO order (keyset paging)."""
    if not 1 <= limit <= MAX_PAGE:
        raise errors.UsageError(f"limit must be from 1 to {MAX_PAGE}, not {limit}")
    statement = transport.dialect.operations.failed_page(_table(transport, error_queue), transport.profile, tuple(filt.bindings()))
    rows = _run(transport, statement, filt, {"After": after if after is not None else -(2**63), "Limit": limit + 1}, error_queue)
    out = Page(after=after)
    for row in rows[:limit]:
        out.rows.append({"key": int(row[0]), "id": str(row[1]), **dict(zip(FIELDS, row[2:]))})
    if len(rows) > limit:
        out.next_after = out.rows[-1]["key"]
    return out


def keys_of(transport: Transport, filt: Filter, error_queue: str = DEFAULT_ERROR_QUEUE) -> list[str]:
    """The row Ids of every message passing `filt` (what a retry of a group or a filter takes), page by page."""
    ids: list[str] = []
    after = None
    while True:
        found = page(transport, filt, after, MAX_PAGE, error_queue)
        ids.extend(row["id"] for row in found.rows)
        if found.next_after is None:
            return ids
        after = found.next_after


@dataclass
class Message:
    key: int
    id: str
    headers: dict[str, str] | None  # None: the headers are not JSON (raw_headers holds their text)
    raw_headers: str
    body: str  # as text: pretty-printed JSON or XML, UTF-8 text, or a hex dump
    body_kind: str  # json, xml, text, binary, empty
    body_bytes: int

    @property
    def exception(self) -> dict[str, str]:
        h = self.headers or {}
        return {
            "type": h.get(wire.EXCEPTION_TYPE, ""),
            "message": h.get(wire.EXCEPTION_MESSAGE, ""),
            "stack_trace": h.get(wire.EXCEPTION_STACKTRACE, ""),
        }

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "id": self.id,
            "headers": self.headers,
            "raw_headers": None if self.headers is not None else self.raw_headers,
            "exception": self.exception,
            "body": self.body,
            "body_kind": self.body_kind,
            "body_bytes": self.body_bytes,
        }


def message(transport: Transport, key: int, error_queue: str = DEFAULT_ERROR_QUEUE) -> Message:
    """One message of the error queue by its key; NotFound if it is gone (retried, or never was)."""
    statement = transport.dialect.operations.failed_message(_table(transport, error_queue), transport.profile)
    with transport.engine.connect() as conn:
        row = execute(conn, statement, {"Key": key}).fetchone()
    if row is None:
        raise errors.NotFound(f"no message with key {key} in the error queue")
    raw = row[2] or ""
    try:
        headers: dict[str, str] | None = wire.decode_headers(raw)
    except wire.PoisonHeaders:
        headers = None
    body = b"" if row[3] is None else bytes(row[3])
    kind, text = body_text(body, (headers or {}).get(wire.CONTENT_TYPE, ""))
    return Message(int(row[0]), str(row[1]), headers, raw, text, kind, len(body))


def body_text(body: bytes, content_type: str = "") -> tuple[str, str]:
    """(kind, text) of a body: JSON or XML pretty-printed, other UTF-8 as is, anything else as hex."""
    if not body:
        return "empty", ""
    cut = body[:BODY_LIMIT]
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError:
        return "binary", _hex(cut)
    if len(body) <= BODY_LIMIT:
        stripped = text.lstrip("\ufeff \t\r\n")
        if stripped[:1] in "{[" or "json" in content_type:
            try:
                return "json", json.dumps(json.loads(stripped), indent=2, ensure_ascii=False)
            except ValueError:
                pass
        if stripped.startswith("<"):
            try:  # expat refuses entity expansion bombs (billion laughs) itself
                return "xml", minidom.parseString(stripped.encode("utf-8")).toprettyxml(indent="  ")
            except (ExpatError, ValueError):
                pass
    return "text", text


def _hex(data: bytes) -> str:
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {binascii.hexlify(chunk, ' ').decode():<47}  {printable}")
    return "\n".join(lines)
