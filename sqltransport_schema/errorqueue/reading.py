"""The error queue read: groups (by exception, failed queue, message type or endpoint) with their
counts and first and last time of failure, pages of messages by keyset (the key after the last one
shown, never an OFFSET), a list's total, and one message with its headers (read by `wire`) and its
body as text. The statements are the engine's (`dialect.live_bus.failed_*`); values are bound."""

from __future__ import annotations

import binascii
import hashlib
import json
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from xml.dom import minidom
from xml.parsers.expat import ExpatError

from .. import errors, wire
from ..defaults import DEFAULT_ERROR_QUEUE
from ..runtime.deployed import resolve
from ..runtime.transport import execute
from .selection import FIELDS, GROUP_ID, GROUPINGS, NO_FILTER, PARAMETERS, Selection, read_value

if TYPE_CHECKING:
    from ..runtime.transport import Transport
    from ..schema import TableName

PAGE_SIZE = 50
MAX_PAGE = 1000
BODY_LIMIT = 1 << 20  # bodies above this are shown cut (pretty-printing a bigger one is refused)
HEX_LIMIT = 64 << 10  # bytes of a binary body shown as hex


def group_id(by: str, values: tuple[Any, ...]) -> str:
    """A group's id: a hash of its grouping and its key as the engine reads it (what a link, a form
    and the API name a group by; its text may be a megabyte, or hold a NUL)."""
    text = json.dumps([by, *("" if v is None else str(v) for v in values)], ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:GROUP_ID]


# group id -> (by, the key's values as the engine reads them): an id names the same values in any
# database (it is their hash), so what was once found stays true; bounded, the oldest dropped first,
# and a key longer than _KNOWN_TEXT is not kept (its group is found by reading the groups again)
_KNOWN: dict[str, tuple[str, tuple[Any, ...]]] = {}
_KNOWN_LIMIT = 5_000
_KNOWN_TEXT = 4096
_known_lock = threading.Lock()


def _remember(by: str, values: tuple[Any, ...]) -> None:
    if sum(len(str(v)) for v in values) > _KNOWN_TEXT:
        return
    found = group_id(by, values)
    with _known_lock:
        _KNOWN[found] = (by, values)
        while len(_KNOWN) > _KNOWN_LIMIT:
            del _KNOWN[next(iter(_KNOWN))]


def has_body_string(transport: Transport, error_queue: str = DEFAULT_ERROR_QUEUE) -> bool:
    """Whether the error queue's table has BodyString (the deployed topology asks for it and the
    transport version's installer adds it): what the body filter reads."""
    dialect = transport.dialect
    key = dialect.table_key(_table(transport, error_queue))
    specs = transport.blueprint.tables if transport.blueprint is not None else ()
    return any(dialect.table_key(s.name) == key and dialect.has_body_string(s, transport.profile) for s in specs)


def _run(transport: Transport, statement: Any, filt: Selection, extra: dict[str, Any], error_queue: str) -> list[Any]:
    if filt.ids:
        raise errors.UsageError("ids choose messages for an action; a listing reads the filter fields")
    if filt.body is not None and not has_body_string(transport, error_queue):
        raise errors.UsageError(
            f"body: the error queue {error_queue} has no BodyString column (body_string: true on its endpoint in the topology, "
            "transport 4.1+, on PostgreSQL 8.1.13 or 9.0.2+); filter by text in the headers instead"
        )
    bound = filt.bindings()
    params = {PARAMETERS[name]: value for name, value in bound.items()} | extra
    with transport.engine.connect() as conn:
        return list(execute(conn, statement, params).fetchall())


def _table(transport: Transport, error_queue: str) -> TableName:
    return resolve(transport, error_queue)


KEY_SHOWN = 2000  # characters of a group's key value the API gives (the page cuts its own)


@dataclass
class Group:
    by: str
    values: tuple[Any, ...]  # the key as the engine reads it: what the group's filter binds
    messages: int
    first: str | None
    last: str | None

    @property
    def id(self) -> str:
        return group_id(self.by, self.values)

    @property
    def key(self) -> dict[str, Any]:
        """The key's fields and their values as text."""
        return {name: read_value(value) for name, value in zip(GROUPINGS[self.by], self.values)}

    def to_json(self) -> dict:
        key = {name: value[:KEY_SHOWN] if isinstance(value, str) else value for name, value in self.key.items()}
        cut = {name: len(value) for name, value in self.key.items() if isinstance(value, str) and len(value) > KEY_SHOWN}
        out = {"id": self.id, "by": self.by, "key": key, "messages": self.messages, "first_failure": self.first, "last_failure": self.last}
        if cut:
            out["key_cut"] = cut  # field -> its whole length; the group's messages hold it whole
        return out


GROUP_SORTS = ("count", "count_asc", "time", "time_asc")  # the groups' orders (the engines' GROUP_ORDERS)
PAGE_SORTS = ("time_asc", "time")  # a page's: the first to fail first (FIFO), or the last first


def sort_of(text: str | None, allowed: tuple[str, ...]) -> str:
    """A list's `sort` (the first of `allowed` where none is given); UsageError for another."""
    if not text:
        return allowed[0]
    if text not in allowed:
        raise errors.UsageError(f"sort: {text[:40]!r} is no order of this list; choose one of {', '.join(allowed)}")
    return text


def groups(
    transport: Transport, by: str = "exception", filt: Selection = NO_FILTER, error_queue: str = DEFAULT_ERROR_QUEUE, sort: str = "count"
) -> list[Group]:
    """The error queue's messages that pass `filt`, grouped `by` one of GROUPINGS, in the order `sort`
    (GROUP_SORTS: the largest first, the smallest, the latest failure first, the earliest)."""
    if by not in GROUPINGS:
        raise errors.UsageError(f"group by {by!r}: choose one of {', '.join(GROUPINGS)}")
    sort = sort_of(sort, GROUP_SORTS)
    filt = resolved(transport, filt, error_queue)
    keys = GROUPINGS[by]
    statement = transport.dialect.live_bus.failed_groups(
        _table(transport, error_queue), transport.profile, keys, tuple(filt.bindings()), sort
    )
    out = []
    for row in _run(transport, statement, filt, {}, error_queue):
        n = len(keys)
        values = tuple(row[:n])
        _remember(by, values)
        out.append(Group(by, values, int(row[n]), row[n + 1] or None, row[n + 2] or None))
    return out


def resolved(transport: Transport, filt: Selection, error_queue: str = DEFAULT_ERROR_QUEUE) -> Selection:
    """`filt` with its group id (if any) as the group's fields: from the groups read before, else from
    the error queue's groups now; NotFound where no message has that group's key."""
    if filt.group_id is None or filt.group:
        return filt
    with _known_lock:
        known = _KNOWN.get(filt.group_id)
    if known is None or known[0] != filt.by:
        found = [g for g in groups(transport, filt.by, Selection(), error_queue) if g.id == filt.group_id]
        known = (found[0].by, found[0].values) if found else None
    if known is None:
        raise errors.NotFound(
            f"no group {filt.group_id} (by {filt.by}) in the error queue now: its messages were retried or archived, or it never was"
        )
    return replace(filt, group=tuple(zip(GROUPINGS[known[0]], ("" if v is None else v for v in known[1]))))


@dataclass
class Page:
    rows: list[dict] = field(default_factory=list)
    after: int | None = None  # the key this page started after
    next_after: int | None = None  # the key the next page starts after (None: the last page)

    def to_json(self) -> dict:
        return {"messages": self.rows, "after": self.after, "next_after": self.next_after}


def page(
    transport: Transport,
    filt: Selection = NO_FILTER,
    after: int | None = None,
    limit: int = PAGE_SIZE,
    error_queue: str = DEFAULT_ERROR_QUEUE,
    sort: str = "time_asc",
) -> Page:
    """Up to `limit` messages passing `filt` after the key `after` (keyset paging), in FIFO order, or
    with `sort` "time" the last to fail first (the key's order the other way)."""
    if not 1 <= limit <= MAX_PAGE:
        raise errors.UsageError(f"limit must be from 1 to {MAX_PAGE}, not {limit}")
    newest = sort_of(sort, PAGE_SORTS) == "time"
    filt = resolved(transport, filt, error_queue)
    statement = transport.dialect.live_bus.failed_page(_table(transport, error_queue), transport.profile, tuple(filt.bindings()), newest)
    start = (2**63 - 1) if newest else -(2**63)
    rows = _run(transport, statement, filt, {"After": after if after is not None else start, "Limit": limit + 1}, error_queue)
    out = Page(after=after)
    for row in rows[:limit]:
        out.rows.append({"key": int(row[0]), "id": str(row[1]), **{name: read_value(v) for name, v in zip(FIELDS, row[2:])}})
    if len(rows) > limit:
        out.next_after = out.rows[-1]["key"]
    return out


TOTAL_CAP = 10_000  # a list's total is counted up to this (then shown as "10,000 or more")


def count(transport: Transport, filt: Selection = NO_FILTER, error_queue: str = DEFAULT_ERROR_QUEUE, cap: int = TOTAL_CAP) -> int:
    """How many messages of the error queue pass `filt` (a list's total), counted up to `cap`: a
    total of `cap` means that many or more."""
    filt = resolved(transport, filt, error_queue)
    statement = transport.dialect.live_bus.failed_count(_table(transport, error_queue), transport.profile, tuple(filt.bindings()))
    return int(_run(transport, statement, filt, {"Cap": cap}, error_queue)[0][0])


def groups_of(transport: Transport, key: int, error_queue: str = DEFAULT_ERROR_QUEUE) -> dict[str, Group]:
    """The groups (one of each grouping) the message with this key is in, its key read as the groups
    read it (a page of one from the key before it): a message's page links back to them by their ids."""
    statement = transport.dialect.live_bus.failed_page(_table(transport, error_queue), transport.profile, ())
    rows = _run(transport, statement, Selection(), {"After": key - 1, "Limit": 1}, error_queue)
    if not rows or int(rows[0][0]) != key:
        return {}
    fields = dict(zip(FIELDS, rows[0][2:]))
    out = {}
    for by, names in GROUPINGS.items():
        values = tuple(fields[name] for name in names)
        _remember(by, values)
        out[by] = Group(by, values, 0, None, None)
    return out


def ids_of(transport: Transport, filt: Selection, error_queue: str = DEFAULT_ERROR_QUEUE) -> list[str]:
    """The row Ids of every message passing `filt` (what a retry or an archive of a group or a filter takes), page by page."""
    ids: list[str] = []
    after = None
    filt = resolved(transport, filt, error_queue)
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
    headers: dict[str, str] | None  # None: the headers are no JSON object (raw_headers holds their text)
    raw_headers: str
    body: str  # as text: pretty-printed JSON or XML, UTF-8 text, or a hex dump
    body_kind: str  # json, xml, text, binary, empty
    body_bytes: int
    headers_problem: str | None = None  # why wire refuses the headers (then `headers` holds each name's first value, if any)
    body_note: str | None = None  # what of the body is not shown as it is (cut, not pretty-printed)

    @property
    def exception(self) -> dict[str, str]:
        h = self.headers or {}
        return {
            "type": h.get(wire.EXCEPTION_TYPE, ""),
            "message": h.get(wire.EXCEPTION_MESSAGE, ""),
            "stack_trace": h.get(wire.EXCEPTION_STACKTRACE, ""),
        }

    @property
    def failure(self) -> dict[str, str] | None:
        """Its failure as its headers record it (time of failure, FailedQ, the exception's type and
        message), None where they record none."""
        h = self.headers or {}
        if not any(h.get(name) for name in (wire.TIME_OF_FAILURE, wire.FAILED_Q, wire.EXCEPTION_TYPE)):
            return None
        return {
            "at": _failure_time(h.get(wire.TIME_OF_FAILURE, "")),
            "failed_queue": h.get(wire.FAILED_Q, ""),
            "exception_type": h.get(wire.EXCEPTION_TYPE, ""),
            "exception_message": h.get(wire.EXCEPTION_MESSAGE, ""),
        }

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "id": self.id,
            "failure": self.failure,
            "headers": self.headers,
            "headers_problem": self.headers_problem,
            "raw_headers": None if self.headers_problem is None else self.raw_headers,
            "exception": self.exception,
            "body": self.body,
            "body_kind": self.body_kind,
            "body_bytes": self.body_bytes,
            "body_note": self.body_note,
        }


def message(transport: Transport, key: int, error_queue: str = DEFAULT_ERROR_QUEUE) -> Message:
    """One message of the error queue by its key; NotFound if it is gone (retried, or never was)."""
    statement = transport.dialect.live_bus.failed_message(_table(transport, error_queue), transport.profile)
    with transport.engine.connect() as conn:
        row = execute(conn, statement, {"Key": key}).fetchone()
    if row is None:
        raise errors.NotFound(f"no message with key {key} in the error queue")
    raw = row[2] or ""
    problem = None
    try:
        headers: dict[str, str] | None = wire.decode_headers(raw)
    except wire.PoisonHeaders as exc:
        problem = exc.reason
        headers = wire.first_values(raw)
    body = b"" if row[3] is None else bytes(row[3])
    kind, text, note = _body(body, (headers or {}).get(wire.CONTENT_TYPE, ""))
    return Message(int(row[0]), str(row[1]), headers, raw, text, kind, len(body), problem, note)


def as_time(value: Any) -> datetime | None:
    """A time a listing or the action log holds, as an aware datetime in UTC: a datetime (naive ones are UTC, as the
    console's tables keep them), ISO 8601 text, or NServiceBus's wire format; None for anything else."""
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str) and value:
        try:
            at = wire.parse_time_sent(value)
        except ValueError:
            try:
                at = datetime.fromisoformat(value)
            except ValueError:
                return None
    else:
        return None
    return (at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at).astimezone(timezone.utc)


def _failure_time(text: str) -> str:
    """NServiceBus.TimeOfFailure as an ISO 8601 time in UTC; the text as it is where it is no time."""
    try:
        return wire.parse_time_sent(text).astimezone(timezone.utc).isoformat()
    except (ValueError, TypeError):
        return text


def history(found: Message, actions: list[dict]) -> list[dict]:
    """A message's history, oldest first: its failure (from its headers) and the actions of the
    action log that named it (retries, archives, restores), each {at, kind, what, who}."""
    events = []
    failure = found.failure
    if failure is not None:
        what = " ".join(p for p in (f"in {failure['failed_queue']}" if failure["failed_queue"] else "", failure["exception_type"]) if p)
        events.append({"at": failure["at"], "kind": "failed", "what": what, "detail": failure["exception_message"], "who": ""})
    for entry in actions:
        at = entry["at"]
        events.append({"at": at, "kind": entry["action"], "what": entry["target"].split(" · ids: ")[0], "detail": "", "who": entry["who"]})
    return sorted(events, key=lambda e: _sort_time(e["at"]))


def _sort_time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def body_text(body: bytes, content_type: str = "") -> tuple[str, str]:
    """(kind, text) of a body: JSON or XML pretty-printed, other UTF-8 as is, anything else as hex."""
    kind, text, _ = _body(body, content_type)
    return kind, text


def _body(body: bytes, content_type: str = "") -> tuple[str, str, str | None]:
    """(kind, text, note) of a body; the note says what is not shown as it is: the part cut off (a
    body above BODY_LIMIT, a binary one above HEX_LIMIT), or why it is not pretty-printed."""
    if not body:
        return "empty", "", None
    cut = body[:BODY_LIMIT]
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError as exc:
        if len(body) <= BODY_LIMIT or exc.start < len(cut) - 3:  # not a character cut in two by the limit
            shown = body[:HEX_LIMIT]
            note = f"not UTF-8 text (byte {exc.start}): shown as hex"
            if len(body) > HEX_LIMIT:
                note += f", the first {HEX_LIMIT:,} of {len(body):,} bytes"
            return "binary", _hex(shown), note
        text = cut[: exc.start].decode("utf-8")
    if len(body) > BODY_LIMIT:
        return "text", text, f"cut: the first {BODY_LIMIT:,} of {len(body):,} bytes shown, as text"
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped[:1] in "{[" or "json" in content_type:
        try:
            return "json", json.dumps(json.loads(stripped), indent=2, ensure_ascii=False), None
        except RecursionError:
            return "text", text, "JSON nested too deeply to pretty-print: shown as it is"
        except ValueError:
            pass
    if stripped.startswith("<"):
        try:  # expat refuses entity expansion bombs (billion laughs) itself
            return "xml", minidom.parseString(stripped.encode("utf-8")).toprettyxml(indent="  "), None
        except RecursionError:
            return "text", text, "XML nested too deeply to pretty-print: shown as it is"
        except (ExpatError, ValueError):
            pass
    return "text", text, None


def _hex(data: bytes) -> str:
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {binascii.hexlify(chunk, ' ').decode():<47}  {printable}")
    return "\n".join(lines)
