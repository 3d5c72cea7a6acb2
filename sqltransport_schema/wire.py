"""Wire format shared with .NET NServiceBus endpoints: headers JSON, addresses, timestamps.

Pure functions only (no I/O, no database), so a Python sender and receiver can be
checked byte for byte against what the .NET transport writes and reads.

The SQL transport (3.x to 9.x) serializes the Headers column with .NET's
DataContractJsonSerializer (UseSimpleDictionaryFormat), not Newtonsoft.Json; that
is why `/` is written as `\\/`. `encode_headers` reproduces that writer exactly and
`decode_headers` accepts everything older or hand-written senders put in the column.
"""

from __future__ import annotations

import json
import re
import socket
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypedDict

from . import errors

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.12; SQLAlchemy depends on typing_extensions

__all__ = [
    "PoisonHeaders",
    "encode_headers",
    "decode_headers",
    "first_values",
    "failed_q_of_unreadable",
    "time_sent_of",
    "Address",
    "parse_address",
    "format_time_sent",
    "parse_time_sent",
    "standard_headers",
    "SenderHeaders",
    "error_headers",
    "retry_headers",
    "row_id",
    "MESSAGE_INTENTS",
]  # and the header-name constants below, added at the end of the module

# --- Header names, as NServiceBus spells them -------------------------------------------

MESSAGE_ID = "NServiceBus.MessageId"
CORRELATION_ID = "NServiceBus.CorrelationId"
CONVERSATION_ID = "NServiceBus.ConversationId"
RELATED_TO = "NServiceBus.RelatedTo"
MESSAGE_INTENT = "NServiceBus.MessageIntent"
REPLY_TO_ADDRESS = "NServiceBus.ReplyToAddress"
ENCLOSED_MESSAGE_TYPES = "NServiceBus.EnclosedMessageTypes"
CONTENT_TYPE = "NServiceBus.ContentType"
CONTROL_MESSAGE = "NServiceBus.ControlMessage"
TIME_SENT = "NServiceBus.TimeSent"
DELIVER_AT = "NServiceBus.DeliverAt"
TIME_TO_BE_RECEIVED = "NServiceBus.TimeToBeReceived"
NON_DURABLE_MESSAGE = "NServiceBus.NonDurableMessage"
IS_DEFERRED_MESSAGE = "NServiceBus.IsDeferredMessage"
NSERVICEBUS_VERSION = "NServiceBus.Version"
ORIGINATING_ENDPOINT = "NServiceBus.OriginatingEndpoint"
ORIGINATING_MACHINE = "NServiceBus.OriginatingMachine"
ORIGINATING_HOST_ID = "$.diagnostics.originating.hostid"
HOST_ID = "$.diagnostics.hostid"
HOST_DISPLAY_NAME = "$.diagnostics.hostdisplayname"
PROCESSING_ENDPOINT = "NServiceBus.ProcessingEndpoint"
PROCESSING_MACHINE = "NServiceBus.ProcessingMachine"
PROCESSING_STARTED = "NServiceBus.ProcessingStarted"
PROCESSING_ENDED = "NServiceBus.ProcessingEnded"
DELAYED_RETRIES = "NServiceBus.Retries"
DELAYED_RETRIES_TIMESTAMP = "NServiceBus.Retries.Timestamp"
IMMEDIATE_RETRIES = "NServiceBus.FLRetries"
FORWARD_DESTINATION = "NServiceBus.SqlServer.ForwardDestination"
FAILED_Q = "NServiceBus.FailedQ"
TIME_OF_FAILURE = "NServiceBus.TimeOfFailure"
EXCEPTION_INFO_PREFIX = "NServiceBus.ExceptionInfo."
EXCEPTION_TYPE = "NServiceBus.ExceptionInfo.ExceptionType"
INNER_EXCEPTION_TYPE = "NServiceBus.ExceptionInfo.InnerExceptionType"
EXCEPTION_HELP_LINK = "NServiceBus.ExceptionInfo.HelpLink"
EXCEPTION_MESSAGE = "NServiceBus.ExceptionInfo.Message"
EXCEPTION_SOURCE = "NServiceBus.ExceptionInfo.Source"
EXCEPTION_STACKTRACE = "NServiceBus.ExceptionInfo.StackTrace"
EXCEPTION_DATA_PREFIX = "NServiceBus.ExceptionInfo.Data."

MESSAGE_INTENTS = ("Send", "Publish", "Reply", "Subscribe", "Unsubscribe")

# The transport truncates ExceptionInfo.Message to this many characters.
EXCEPTION_MESSAGE_MAX = 16384

# --- Headers JSON ------------------------------------------------------------------------


class PoisonHeaders(errors.SqltransportError, ValueError):
    """The Headers column cannot be read as NServiceBus headers.

    Carries the raw `text` unchanged so the caller can move the row to the error
    queue as it is, the way the .NET transport treats unparseable headers.
    """

    def __init__(self, reason: str, text: Any) -> None:
        self.reason = reason
        self.text = text
        preview = text if not isinstance(text, str) or len(text) <= 200 else text[:200] + "..."
        super().__init__(f"unreadable message headers ({reason}): {preview!r}")


# What DataContractJsonSerializer escapes: `"`, `\`, `/`, control characters (with the
# short forms \b \t \n \f \r), UTF-16 surrogates (so characters beyond U+FFFF become a
# \uXXXX\uXXXX pair), U+FFFE/U+FFFF and the Unicode newlines U+0085/U+2028/U+2029, all
# in lowercase hex. Every other character, ASCII or not, is written as is.
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"/\\\\\x85\u2028\u2029\ud800-\udfff\ufffe\uffff\U00010000-\U0010ffff]')


def _escape_char(match: re.Match) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return "\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
    return "\\u%04x" % code


def _json_string(value: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, value) + '"'


# Python's C encoder (ensure_ascii=False) writes what DataContractJsonSerializer writes for
# `"`, `\`, every control character (short forms, else lowercase \u00xx) and every other
# character as is, except: `/` (it leaves bare; never part of any escape it writes, so
# replacing it afterwards is exact) and the characters below, which it leaves raw.
_NOT_LIKE_PYTHON = re.compile('[\x85\u2028\u2029\ud800-\udfff\ufffe\uffff\U00010000-\U0010ffff]')
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


def encode_headers(headers: Mapping[str, str]) -> str:
    """Headers as the .NET transport writes them: `{"k":"v",...}`, byte for byte.

    Compact, insertion order kept, `/` as `\\/`. Keys and values must be `str`;
    `None` is refused rather than written as `null`, because a missing header and
    an empty one mean different things to NServiceBus and `null` means neither.
    """
    if type(headers) is dict and all(type(k) is str and type(v) is str for k, v in headers.items()):
        text = _COMPACT(headers)  # the usual map, in C
        if text.isascii() or _NOT_LIKE_PYTHON.search(text) is None:
            return text.replace("/", "\\/")
    return _encode_headers_exactly(headers)


def _encode_headers_exactly(headers: Mapping[str, str]) -> str:
    """Character by character: any mapping, every escape, and the errors worded."""
    if not isinstance(headers, Mapping):
        raise TypeError(f"headers must be a mapping of str to str, not {type(headers).__name__}")
    parts = []
    for key, value in headers.items():
        if not isinstance(key, str):
            raise TypeError(f"header names must be str, not {type(key).__name__}: {key!r}")
        if not isinstance(value, str):
            if value is None:
                raise TypeError(f"header {key!r} is None; NServiceBus headers are never null, leave the header out instead")
            raise TypeError(f"header {key!r} must be a str, not {type(value).__name__}: {value!r}")
        parts.append(_json_string(key) + ":" + _json_string(value))
    return "{" + ",".join(parts) + "}"


class _Pairs(list):
    """A JSON object as (key, value) pairs, so duplicates and nesting stay visible."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder for every call: json.loads with options builds a new JSONDecoder each time.
_DECODER = json.JSONDecoder(object_pairs_hook=_Pairs, parse_int=str, parse_float=str, parse_constant=_refuse_constant, strict=False)
# The usual headers (a flat map of distinct keys to strings) straight into a dict, in C.
_PLAIN_DECODER = json.JSONDecoder(strict=False)


def _plain_headers(body: str) -> dict[str, str] | None:
    """The headers when they are the usual case, else None (then the careful decoder decides).

    A plain dict hides duplicate keys, so they are counted instead: with string values only
    and no escaped quote, every pair holds exactly four quote characters."""
    if '\\"' in body:
        return None
    try:
        headers = _PLAIN_DECODER.decode(body)
    except (ValueError, RecursionError):
        return None
    if type(headers) is not dict or body.count('"') != 4 * len(headers):
        return None
    for value in headers.values():
        if type(value) is not str:
            return None
    return headers


def decode_headers(text: str) -> dict[str, str]:
    """Headers from any sender the transport has seen; `PoisonHeaders` for the rest.

    Accepts `/` or `\\/`, `\\uXXXX` escapes in either case (surrogate pairs joined),
    non-ASCII as is, any whitespace or indentation, a leading UTF-8 BOM, and raw
    control characters inside strings (older SimpleJson-era writers left them).

    Scalar values from hand-written senders are read as .NET's
    DataContractJsonSerializer reads them into Dictionary<string, string>: the token
    text verbatim, so `true` -> "true", `1.50` -> "1.50", `1E5` -> "1E5". A `null`
    value (the .NET transport itself writes one for a null HelpLink or Source) leaves
    the header out: .NET keeps a null entry, which Python's dict[str, str] cannot,
    and NServiceBus treats a null header like a missing one.

    Poison: empty text, invalid JSON, anything but a top-level object, arrays or
    nested objects as values, NaN/Infinity, and duplicate keys (.NET's dictionary
    Add throws on them, and silently picking one could misroute a reply).
    """
    if not isinstance(text, str):
        raise TypeError(f"headers text must be str, not {type(text).__name__}")
    body = text[1:] if text.startswith("\ufeff") else text
    if not body.strip():
        raise PoisonHeaders("empty", text)
    plain = _plain_headers(body)
    if plain is not None:
        return plain
    try:
        parsed = _DECODER.decode(body)
    except RecursionError:
        raise PoisonHeaders("nested too deeply", text) from None
    except ValueError as error:
        raise PoisonHeaders(f"invalid JSON: {error}", text) from None
    if not isinstance(parsed, _Pairs):
        raise PoisonHeaders("not a JSON object", text)
    headers = {}
    seen: set[str] = set()
    for key, value in parsed:
        if key in seen:
            raise PoisonHeaders(f"duplicate header {key!r}", text)
        seen.add(key)
        if isinstance(value, str):
            headers[key] = value
        elif value is True:
            headers[key] = "true"
        elif value is False:
            headers[key] = "false"
        elif value is None:
            continue
        elif isinstance(value, _Pairs):
            raise PoisonHeaders(f"header {key!r} is a nested object", text)
        else:
            raise PoisonHeaders(f"header {key!r} is an array", text)
    return headers


def first_values(text: str) -> dict[str, str] | None:
    """Headers `decode_headers` refuses but that are a JSON object (a name twice, a value not text):
    each name's first value, as the error queue's groups read them, a value that is no text as its
    JSON; None for text that is no JSON object. What a listing shows of a poison message."""
    try:
        pairs = json.loads(text.lstrip("\ufeff"), object_pairs_hook=lambda p: p)
    except (ValueError, RecursionError, TypeError, AttributeError):
        return None
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
        return None
    out: dict[str, str] = {}
    for name, value in pairs:
        if name not in out and value is not None:
            out[name] = value if isinstance(value, str) else json.dumps(value)
    return out


# A header's value cut out of headers text that cannot be read as a whole, as status's count of the
# error queue on PostgreSQL cuts it out: a JSON string after the header's name (only JSON's escapes).
_STRING_AFTER = r'"{name}"\s*:\s*("(?:[^"\\]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{{4}}))*")'
_FAILED_Q_VALUE = re.compile(_STRING_AFTER.format(name=re.escape("NServiceBus.FailedQ")))
# The TimeSent header as senders write it (a plain string: the format has no character JSON escapes)
_TIME_SENT_VALUE = re.compile(r'"NServiceBus\.TimeSent"\s*:\s*"([^"\\]*)"')


def failed_q_of_unreadable(text: str) -> str | None:
    """The queue a message with unreadable headers failed in, where its text still names one (so
    that a retry accounts for every message status counts under a FailedQ); None: it names none."""
    found = _FAILED_Q_VALUE.search(text) if isinstance(text, str) else None
    if found is None:
        return None
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def time_sent_of(text: str | None) -> datetime | None:
    """NServiceBus.TimeSent of a message's raw headers (None: no message, no header, unreadable):
    the header found in the text where senders write it plainly, else through `decode_headers`."""
    if text is None:
        return None
    try:
        found = _TIME_SENT_VALUE.search(text)
        return parse_time_sent(found.group(1) if found else decode_headers(text)[TIME_SENT])
    except (PoisonHeaders, KeyError, ValueError, TypeError):
        return None


# --- Canonical addresses (3.1+) ----------------------------------------------------------


def _quote(name: str) -> str:
    return "[" + name.replace("]", "]]") + "]"


@dataclass(frozen=True)
class Address:
    """A queue address `table@[schema]@[catalog]`, engine-neutral.

    `None` means "the receiver's default" (schema dbo, the connection's catalog).
    An empty or blank schema/catalog is stored as None, as the .NET transport does.
    The table part is written unbracketed, so it can never contain `@`.
    """

    table: str
    schema: str | None = None
    catalog: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.table, str):
            raise TypeError(f"table must be str, not {type(self.table).__name__}")
        if not self.table.strip():
            raise errors.UsageError("address table part is empty")
        if "@" in self.table:
            raise errors.UsageError(f"address table part {self.table!r} contains '@'; the canonical form cannot carry it")
        for field_name in ("schema", "catalog"):
            value = getattr(self, field_name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise TypeError(f"{field_name} must be str or None, not {type(value).__name__}")
            if not value.strip():
                object.__setattr__(self, field_name, None)

    def format(self) -> str:
        """`table`, `table@[schema]`, `table@[schema]@[catalog]` or `table@[]@[catalog]`."""
        text = self.table
        if self.schema is not None:
            text += "@" + _quote(self.schema)
        if self.catalog is not None:
            if self.schema is None:
                text += "@[]"
            text += "@" + _quote(self.catalog)
        return text

    def __str__(self) -> str:
        return self.format()


def _next_part(rest: str, what: str, text: str) -> tuple[str, str, bool]:
    """(part, text after it, whether an '@' followed) for one schema or catalog part."""
    if rest.startswith("["):
        pieces = []
        start = 1
        after = ""
        while True:
            close = rest.find("]", start)
            if close < 0:
                raise errors.UsageError(f"address {text!r}: the {what} part has no closing ']' (a ']' inside brackets is written ']]')")
            if rest.startswith("]]", close):
                pieces.append(rest[start : close + 1])
                start = close + 2
                continue
            pieces.append(rest[start:close])
            after = rest[close + 1 :]
            break
        if not after:
            return "".join(pieces), "", False
        if after[0] != "@":
            raise errors.UsageError(
                f"address {text!r}: unexpected {after[0]!r} after the closing ']' of the {what} part "
                "(a ']' inside brackets is written ']]')"
            )
        return "".join(pieces), after[1:], True
    part, sep, after = rest.partition("@")
    if "[" in part or "]" in part:
        raise errors.UsageError(
            f"address {text!r}: the unbracketed {what} part {part!r} contains a bracket; write it as [name] with ']' doubled"
        )
    return part, after, bool(sep)


def parse_address(text: str) -> Address:
    """Read `table[@schema[@catalog]]`, each optional part bracketed or not.

    The table is everything before the first `@` (as in v2 addresses). A bracketed
    part may contain `@`, `.` and `]]`; dots are never separators, so database names
    like `nsb.prod` survive. Empty parts (`@[]`) mean the default, as in .NET.
    Trailing text, a fourth part and unbalanced brackets are refused instead of
    being silently dropped as the .NET parser does.
    """
    if not isinstance(text, str):
        raise TypeError(f"address must be str, not {type(text).__name__}")
    table, sep, rest = text.partition("@")
    if not table.strip():
        raise errors.UsageError(f"address {text!r}: the table part (before the first '@') is empty")
    if not sep:
        return Address(table)
    schema, rest, more = _next_part(rest, "schema", text)
    catalog = None
    if more:
        catalog, rest, more = _next_part(rest, "catalog", text)
        if more:
            raise errors.UsageError(
                f"address {text!r}: more than table, schema and catalog parts "
                "(an '@' inside a schema or catalog must be bracketed; a table cannot contain '@')"
            )
    return Address(table, schema, catalog)


# --- The row's Id --------------------------------------------------------------------------

# The namespace of the Ids made for message ids that are not uuids (row_id): fixed, so every copy of a
# message with such an id gets the one Id.
ROW_ID_NAMESPACE = uuid.UUID("57a8dbab-7a8e-4d14-99fa-0341ae77677e")
_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)


def row_id(message_id: str | None) -> str:
    """The queue row's `Id` (uniqueidentifier, uuid) for a message with this id: the id itself where
    it is a uuid in its canonical form (`8-4-4-4-12` hex digits, as every engine reads one), a new
    uuid where there is none, and for any other id (NServiceBus allows any string in
    `NServiceBus.MessageId`: `order-42`) a uuid derived from it (version 5, ROW_ID_NAMESPACE), so
    that every copy of the message has one Id as a uuid id's copies do (the outbox recognises a
    copy by it). The header keeps the id as given; upstream writes a new Guid for every message."""
    if message_id is None or message_id == "":
        return str(uuid.uuid4())
    if _CANONICAL_UUID.fullmatch(message_id):
        return message_id
    return str(uuid.uuid5(ROW_ID_NAMESPACE, message_id))


# --- Timestamps --------------------------------------------------------------------------

_TIME_SENT = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?::(\d{1,7}))? Z", re.ASCII)


def format_time_sent(dt: datetime) -> str:
    """`yyyy-MM-dd HH:mm:ss:ffffff Z` in UTC (colon before the microseconds, literal ` Z`).

    Aware datetimes in other zones are converted to UTC, as .NET's ToUniversalTime
    does; naive ones are refused because their zone would be a guess.
    """
    if not isinstance(dt, datetime):
        raise TypeError(f"expected a datetime, not {type(dt).__name__}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise errors.UsageError(f"naive datetime {dt!r}: give a timezone-aware (UTC) datetime")
    d = dt.astimezone(timezone.utc)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d} {d.hour:02d}:{d.minute:02d}:{d.second:02d}:{d.microsecond:06d} Z"


def parse_time_sent(text: str) -> datetime:
    """A UTC-aware datetime from the wire format, also with 0-7 fractional digits.

    Seven digits (.NET ticks, written by older senders) are truncated to
    microseconds; rounding could carry into the next second.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected str, not {type(text).__name__}")
    match = _TIME_SENT.fullmatch(text)
    if match is None:
        raise errors.UsageError(f"{text!r} is not in the NServiceBus format 'yyyy-MM-dd HH:mm:ss:ffffff Z'")
    year, month, day, hour, minute, second, fraction = match.groups()
    micro = int((fraction or "").ljust(6, "0")[:6])
    try:
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=timezone.utc)
    except ValueError as error:
        raise errors.UsageError(f"{text!r} is not a valid time: {error}") from None


# --- Header sets -------------------------------------------------------------------------


def _require_text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, not {type(value).__name__}")
    if not value.strip():
        raise errors.UsageError(f"{name} is empty")
    return value


class SenderHeaders(TypedDict, total=False):
    """standard_headers' optional keyword arguments, declared once: what a sender may set where
    NServiceBus's defaults do not fit it (each None, or left out: the default)."""

    correlation_id: str | None  # default: the message id
    conversation_id: str | None  # default: a new GUID
    originating_endpoint: str | None  # default: not written
    machine: str | None  # default: this host's name
    now: datetime | None  # the time sent; default: now, UTC


_SENDER_HEADERS = frozenset(SenderHeaders.__annotations__)


def standard_headers(
    *,
    message_id: str,
    enclosed_types: Sequence[str] | str,
    intent: str = "Send",
    reply_to: str | Address | None,
    content_type: str = "application/json",
    **sender: Unpack[SenderHeaders],
) -> dict[str, str]:
    """The headers a .NET receiver needs from a non-.NET sender, with NServiceBus's defaults.

    CorrelationId defaults to the message id and ConversationId to a new GUID, as
    NServiceBus does for a message sent outside a handler. `reply_to` is required
    (pass None for a send-only sender) so that leaving it out is a decision; it is
    checked as a canonical address. OriginatingEndpoint is only written when given.
    The other keyword arguments are SenderHeaders'.
    """
    unknown = sorted(set(sender) - _SENDER_HEADERS)
    if unknown:
        raise TypeError(f"standard_headers() got an unexpected keyword argument {unknown[0]!r}")
    correlation_id, conversation_id, now = sender.get("correlation_id"), sender.get("conversation_id"), sender.get("now")
    originating_endpoint, machine = sender.get("originating_endpoint"), sender.get("machine")
    _require_text("message_id", message_id)
    if isinstance(enclosed_types, str):
        types_value = _require_text("enclosed_types", enclosed_types)
    else:
        types = list(enclosed_types)
        if not types:
            raise errors.UsageError("enclosed_types is empty")
        for name in types:
            _require_text("each enclosed type", name)
            if ";" in name:
                raise errors.UsageError(f"enclosed type {name!r} contains ';', the separator between types")
        types_value = ";".join(types)
    if intent not in MESSAGE_INTENTS:
        raise errors.UsageError(f"intent {intent!r} is not one of {', '.join(MESSAGE_INTENTS)}")
    _require_text("content_type", content_type)

    headers = {
        MESSAGE_ID: message_id,
        ENCLOSED_MESSAGE_TYPES: types_value,
        CONTENT_TYPE: content_type,
        MESSAGE_INTENT: intent,
    }
    if reply_to is not None:
        if isinstance(reply_to, Address):
            headers[REPLY_TO_ADDRESS] = reply_to.format()
        else:
            parse_address(_require_text("reply_to", reply_to))
            headers[REPLY_TO_ADDRESS] = reply_to
    headers[CORRELATION_ID] = message_id if correlation_id is None else _require_text("correlation_id", correlation_id)
    headers[CONVERSATION_ID] = str(uuid.uuid4()) if conversation_id is None else _require_text("conversation_id", conversation_id)
    headers[TIME_SENT] = format_time_sent(datetime.now(timezone.utc) if now is None else now)
    if originating_endpoint is not None:
        headers[ORIGINATING_ENDPOINT] = _require_text("originating_endpoint", originating_endpoint)
    headers[ORIGINATING_MACHINE] = socket.gethostname() if machine is None else _require_text("machine", machine)
    return headers


def _type_name(cls: type) -> str:
    # Like traceback output: built-ins unqualified, everything else module.QualName.
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _inner(exc: BaseException) -> BaseException | None:
    if exc.__cause__ is not None:
        return exc.__cause__
    if exc.__context__ is not None and not exc.__suppress_context__:
        return exc.__context__
    return None


def _source(exc: BaseException) -> str:
    # .NET's Exception.Source names the assembly that threw; the nearest Python
    # equivalent is the module of the frame that raised.
    tb = exc.__traceback__
    if tb is None:
        return type(exc).__module__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", type(exc).__module__))


def error_headers(
    headers: Mapping[str, str],
    exc: BaseException,
    failed_queue: str,
    now: datetime | None = None,
) -> dict[str, str]:
    """A new dict: `headers` plus what NServiceBus adds when moving a message to the error queue.

    ExceptionType/InnerExceptionType/Message/Source/StackTrace, FailedQ and
    TimeOfFailure (TimeSent format), so ServiceControl and ServicePulse show the
    failure and can retry to FailedQ. ExceptionInfo.* headers left by an earlier
    failure are dropped first, so they always describe this failure, and the retry counts
    (NServiceBus.Retries, NServiceBus.FLRetries) go, as NServiceBus drops them. HelpLink has
    no Python counterpart and is left out (.NET writes null there, which readers
    treat as missing).
    """
    if not isinstance(exc, BaseException):
        raise TypeError(f"exc must be an exception, not {type(exc).__name__}")
    _require_text("failed_queue", failed_queue)
    gone = (DELAYED_RETRIES, IMMEDIATE_RETRIES)  # NServiceBus's move to the error queue drops both counts
    result = {key: value for key, value in headers.items() if not key.startswith(EXCEPTION_INFO_PREFIX) and key not in gone}
    result[EXCEPTION_TYPE] = _type_name(type(exc))
    inner = _inner(exc)
    if inner is not None:
        result[INNER_EXCEPTION_TYPE] = _type_name(type(inner))
    result[EXCEPTION_MESSAGE] = str(exc)[:EXCEPTION_MESSAGE_MAX]
    result[EXCEPTION_SOURCE] = _source(exc)
    result[EXCEPTION_STACKTRACE] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    result[FAILED_Q] = failed_queue
    result[TIME_OF_FAILURE] = format_time_sent(datetime.now(timezone.utc) if now is None else now)
    return result


def delayed_retries_done(headers: Mapping[str, str]) -> int:
    """How many delayed retries a message has had (its NServiceBus.Retries header; 0 when missing or
    not a whole number, as a hostile or foreign header may be)."""
    value = headers.get(DELAYED_RETRIES, "")
    return int(value) if value.isascii() and value.isdigit() else 0


def delayed_retry_headers(headers: Mapping[str, str], now: datetime | None = None) -> dict[str, str]:
    """A new dict: `headers` as NServiceBus sends a message to its next delayed retry: the count of
    delayed retries one more, and the time of this one (TimeSent format)."""
    result = dict(headers)
    result[DELAYED_RETRIES] = str(delayed_retries_done(headers) + 1)
    result[DELAYED_RETRIES_TIMESTAMP] = format_time_sent(datetime.now(timezone.utc) if now is None else now)
    return result


# What ServiceControl's retry takes off a failed message before sending it back (its HeaderFilter:
# every header whose name starts with one of these): the record of the failure and of the
# recoverability that led to it, so the endpoint starts afresh and a new failure is recorded anew.
RETRY_REMOVED_PREFIXES = (
    "NServiceBus.Retries",  # and NServiceBus.Retries.Timestamp
    FAILED_Q,
    TIME_OF_FAILURE,
    EXCEPTION_INFO_PREFIX,
    "NServiceBus.Timeout.Expire",
    "ServiceControl.EditOf",
)


def retry_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A new dict: the headers of a failed message as a retry sends it back to its queue, without
    the headers RETRY_REMOVED_PREFIXES name; every other header (MessageId, TimeSent, the
    conversation, the processing headers of the failed attempt) is kept, in its order."""
    return {key: value for key, value in headers.items() if not key.startswith(RETRY_REMOVED_PREFIXES)}


__all__ += [name for name in list(globals()) if name.isupper() and not name.startswith("_") and name not in __all__]
