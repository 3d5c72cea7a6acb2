"""Wire format: headers JSON, canonical addresses, timestamps, standard and error headers.

Expected byte forms are written by hand from what .NET's DataContractJsonSerializer
(the transport's header serializer) produces, so a Python sender stays readable by
.NET receivers and the other way round.
"""

from __future__ import annotations

import json
import random
import re
import socket
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from sqltransport_schema import wire
from sqltransport_schema.wire import (
    Address,
    PoisonHeaders,
    decode_headers,
    encode_headers,
    error_headers,
    format_time_sent,
    parse_address,
    parse_time_sent,
    standard_headers,
)

UTC = timezone.utc
UPPER_HEX = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9a-f]{4})")
NOW = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

# Characters that exercise every escaping rule: control characters, JSON specials,
# `/`, Latin/CJK, the Unicode newlines, U+FFFD..U+FFFF, astral characters (surrogate
# pairs in .NET) and lone surrogates (which a .NET string can hold too).
POOL = (
    [chr(c) for c in range(0x20)]
    + list('"\\/\'{}[]:,@ .')
    + list("abcXYZ019")
    + ["\x7f", "\x85", "\xa0", "é", "ß", "中", "\u2028", "\u2029", "\ufeff", "\ufffd", "\ufffe", "\uffff"]
    + ["😀", "🇳🇱", "\U0010ffff", "\U00010000", "\ud800", "\udfff", "\udc00"]
)


def random_text(rng: random.Random, max_len: int = 12) -> str:
    return "".join(rng.choice(POOL) for _ in range(rng.randint(0, max_len)))


def utf16(text: str) -> str:
    """The string as UTF-16 (and so .NET) sees it: a high + low lone surrogate is one character."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def random_headers(rng: random.Random) -> dict[str, str]:
    headers = {}
    for _ in range(rng.randint(0, 8)):
        headers[utf16(random_text(rng))] = utf16(random_text(rng, 40))
    return headers


def reference_encode(headers: dict[str, str]) -> str:
    """An independent model of the .NET writer, walking UTF-16 code units."""

    def string(value: str) -> str:
        raw = value.encode("utf-16-le", "surrogatepass")
        out = []
        for i in range(0, len(raw), 2):
            unit = int.from_bytes(raw[i : i + 2], "little")
            char = chr(unit)
            if char in '"\\/':
                out.append("\\" + char)
            elif unit < 0x20:
                out.append({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(unit, "\\u%04x" % unit))
            elif 0xD800 <= unit <= 0xDFFF or unit >= 0xFFFE or unit in (0x85, 0x2028, 0x2029):
                out.append("\\u%04x" % unit)
            else:
                out.append(char)
        return '"' + "".join(out) + '"'

    return "{" + ",".join(string(k) + ":" + string(v) for k, v in headers.items()) + "}"


# --- encode: exact bytes --------------------------------------------------------------


@pytest.mark.parametrize(
    "headers, expected",
    [
        ({}, "{}"),
        ({"a": "b", "c": "d"}, '{"a":"b","c":"d"}'),
        (
            {"NServiceBus.ReplyToAddress": "Sales@[dbo]@[nsb]", "x": "a/b"},
            '{"NServiceBus.ReplyToAddress":"Sales@[dbo]@[nsb]","x":"a\\/b"}',
        ),
        ({"q": 'say "hi" \\ back'}, '{"q":"say \\"hi\\" \\\\ back"}'),
        ({"c": "\x00\x01\b\t\n\x0b\f\r\x1f\x7f"}, '{"c":"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f\x7f"}'),
        ({"u": "é中ß\xa0\ufffd\ufeff"}, '{"u":"é中ß\xa0\ufffd\ufeff"}'),
        ({"nl": "\x85\u2028\u2029"}, '{"nl":"\\u0085\\u2028\\u2029"}'),
        ({"e": "😀"}, '{"e":"\\ud83d\\ude00"}'),
        ({"max": "\U0010ffff\ufffe\uffff"}, '{"max":"\\udbff\\udfff\\ufffe\\uffff"}'),
        ({"lone": "\ud800x\udc00"}, '{"lone":"\\ud800x\\udc00"}'),
        ({"k/é\n": "v"}, '{"k\\/é\\n":"v"}'),
        ({"empty": ""}, '{"empty":""}'),
    ],
)
def test_encode_exact_form(headers, expected):
    assert encode_headers(headers) == expected


def test_the_fast_encoder_writes_what_the_exact_one_writes_for_every_character():
    """The usual map is encoded by Python's C encoder plus `/`; every BMP character, astral
    ones at the plane edges, and mixtures must come out as the character-by-character writer has them."""
    from sqltransport_schema.wire import _encode_headers_exactly

    astral = [chr(cp) for cp in (0x10000, 0x1F600, 0x10FFFF)]
    for cp in range(0x10000):
        headers = {f"k{chr(cp)}": f"a{chr(cp)}/b"}
        assert encode_headers(headers) == _encode_headers_exactly(headers), hex(cp)
    rng = random.Random(7)
    pool = [chr(c) for c in range(0x100)] + ["\u2028", "\u2029", "\ud800", "\udfff", "\ufffe", "\uffff", "中", "☃"] + astral
    for _ in range(2000):
        headers = {"".join(rng.choices(pool, k=rng.randrange(8))): "".join(rng.choices(pool, k=rng.randrange(30))) for _ in range(3)}
        assert encode_headers(headers) == _encode_headers_exactly(headers)


def test_encode_keeps_insertion_order():
    headers = {"z": "1", "a": "2", "m": "3"}
    assert encode_headers(headers) == '{"z":"1","a":"2","m":"3"}'


@pytest.mark.parametrize(
    "headers, match",
    [
        ({"a": None}, "never null"),
        ({"a": 1}, "must be a str"),
        ({"a": b"x"}, "must be a str"),
        ({1: "a"}, "names must be str"),
        ({None: "a"}, "names must be str"),
    ],
)
def test_encode_rejects_non_strings(headers, match):
    with pytest.raises(TypeError, match=match):
        encode_headers(headers)


def test_encode_rejects_non_mapping():
    with pytest.raises(TypeError, match="mapping"):
        encode_headers([("a", "b")])


# --- round trips (property style, fixed seed) --------------------------------------------


def test_round_trip_many_generated_headers():
    rng = random.Random(20240102)
    for _ in range(3000):
        headers = random_headers(rng)
        text = encode_headers(headers)
        assert text == reference_encode(headers)
        decoded = decode_headers(text)
        assert decoded == headers
        assert list(decoded) == list(headers)
        # Always strict JSON, storable in nvarchar(max): no raw control characters, no lone surrogates.
        assert json.loads(text) == headers
        text.encode("utf-8")
        assert not any(ord(c) < 0x20 for c in text)


def test_older_sender_forms_of_generated_headers_decode_the_same():
    rng = random.Random(7)
    for _ in range(1500):
        headers = random_headers(rng)
        ascii_form = json.dumps(headers, ensure_ascii=True)
        forms = [
            ascii_form,  # everything non-ASCII as \uXXXX (astral as pairs), `/` plain
            UPPER_HEX.sub(lambda m: m.group(1) + "\\u" + m.group(2).upper(), ascii_form),
            json.dumps(headers, ensure_ascii=False),  # non-ASCII raw, `/` plain
            json.dumps(headers, ensure_ascii=True, indent=2),
            "\ufeff" + encode_headers(headers),
            "\ufeff" + json.dumps(headers, indent="\t", separators=(" ,", " : ")),
        ]
        for form in forms:
            assert decode_headers(form) == headers


# --- decode: every older form ------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"x":"a\\/b"}', {"x": "a/b"}),
        ('{"x":"a/b"}', {"x": "a/b"}),
        ('{"x":"\\u00e9\\u4E2D\\u00C9"}', {"x": "é中É"}),
        ('{"x":"é中"}', {"x": "é中"}),
        ('{"x":"\\ud83d\\ude00"}', {"x": "😀"}),
        ('{"x":"\\uD83D\\uDE00"}', {"x": "😀"}),
        ('{"x":"😀"}', {"x": "😀"}),
        ('{"x":"\\ud800"}', {"x": "\ud800"}),
        ('{"x":"\\u0001\\b\\f\\n\\r\\t\\"\\\\"}', {"x": "\x01\b\f\n\r\t\"\\"}),
        ('\ufeff{"a":"b"}', {"a": "b"}),
        ('{\r\n\t"a" : "b",\r\n\t"c" : "d"\r\n}\r\n', {"a": "b", "c": "d"}),
        ('  {  }  ', {}),
        ("{}", {}),
        # the v4 timeout migration script appended a header this way
        (
            '{"a":"b", "NServiceBus.SqlServer.ForwardDestination": "Sales" }',
            {"a": "b", "NServiceBus.SqlServer.ForwardDestination": "Sales"},
        ),
        # SimpleJson-era writers left most control characters raw inside strings
        ('{"a":"x\x01y\x1fz"}', {"a": "x\x01y\x1fz"}),
        ('{"a":"line1\nline2"}', {"a": "line1\nline2"}),
    ],
)
def test_decode_older_forms(text, expected):
    decoded = decode_headers(text)
    assert decoded == expected
    assert list(decoded) == list(expected)


def test_decode_scalars_as_dotnet_reads_them_into_string_values():
    text = '{"n":1,"neg":-0,"f":-1.50,"e":1E5,"t":true,"F":false,"z":null,"s":"x"}'
    assert decode_headers(text) == {
        "n": "1",
        "neg": "-0",
        "f": "-1.50",
        "e": "1E5",
        "t": "true",
        "F": "false",
        "s": "x",
    }


def test_decode_null_value_leaves_the_header_out():
    # .NET itself writes null for a null ExceptionInfo.HelpLink / Source.
    decoded = decode_headers('{"NServiceBus.ExceptionInfo.HelpLink":null,"a":"b"}')
    assert decoded == {"a": "b"}
    assert "NServiceBus.ExceptionInfo.HelpLink" not in decoded


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("   \r\n", "empty"),
        ("\ufeff", "empty"),
        ("[]", "not a JSON object"),
        ('[{"a":"b"}]', "not a JSON object"),
        ('"a"', "not a JSON object"),
        ("1", "not a JSON object"),
        ("true", "not a JSON object"),
        ("null", "not a JSON object"),
        ('{"a":["b"]}', "array"),
        ('{"a":[]}', "array"),
        ('{"a":{"b":"c"}}', "nested object"),
        ('{"a":{}}', "nested object"),
        ('{"a":"b","a":"c"}', "duplicate"),
        ('{"a":"b","a":"b"}', "duplicate"),
        ('{"a":"\\"","a":"c"}', "duplicate"),
        ('{"a":"b","\\u0061":"c"}', "duplicate"),
        ('{"a":"b","c":"d","a":"e","f":"g"}', "duplicate"),
        ('{ "a" : "x\\\\" , "a" : "y" }', "duplicate"),
        ('{"a":"b","c":{"a":"b","a":"b"}}', "nested object"),
        ('{"a":"b"', "invalid JSON"),
        ('{"a":"b"}x', "invalid JSON"),
        ('{"a":"b"}{"c":"d"}', "invalid JSON"),
        ("{'a':'b'}", "invalid JSON"),
        ('{a:"b"}', "invalid JSON"),
        ('{"a":"b",}', "invalid JSON"),
        ('{"a":NaN}', "invalid JSON"),
        ('{"a":Infinity}', "invalid JSON"),
        ('{"a":-Infinity}', "invalid JSON"),
        ('{"a":"\\x41"}', "invalid JSON"),
        ('{"a":"\\u12"}', "invalid JSON"),
        ('{, "NServiceBus.SqlServer.ForwardDestination": "Sales" }', "invalid JSON"),
        ("<headers/>", "invalid JSON"),
        ("[" * 100000 + "]" * 100000, "nested too deeply|not a JSON object|invalid JSON"),
    ],
)
def test_poison_headers(text, reason):
    with pytest.raises(PoisonHeaders, match=reason) as caught:
        decode_headers(text)
    assert caught.value.text is text
    assert isinstance(caught.value, ValueError)


def test_poison_message_is_short_for_huge_text():
    text = '{"a":"' + "x" * 100000
    with pytest.raises(PoisonHeaders) as caught:
        decode_headers(text)
    assert caught.value.text == text
    assert len(str(caught.value)) < 1000


def test_decode_requires_str():
    with pytest.raises(TypeError):
        decode_headers(b'{"a":"b"}')


# --- canonical addresses -----------------------------------------------------------------


@pytest.mark.parametrize(
    "address, text",
    [
        (Address("Sales"), "Sales"),
        (Address("Sales", "dbo"), "Sales@[dbo]"),
        (Address("Sales", "dbo", "nsb"), "Sales@[dbo]@[nsb]"),
        (Address("Sales", None, "nsb"), "Sales@[]@[nsb]"),
        (Address("Sales.Delayed", "my]schema", "cat]]x"), "Sales.Delayed@[my]]schema]@[cat]]]]x]"),
        (Address("Sales", "a@b", "c@d"), "Sales@[a@b]@[c@d]"),
        (Address("Sales", "dbo", "nsb.prod.eu"), "Sales@[dbo]@[nsb.prod.eu]"),
        (Address("Sales", "[x]"), "Sales@[[x]]]"),
        (Address("Sales.host-a"), "Sales.host-a"),
    ],
)
def test_address_format_and_parse(address, text):
    assert address.format() == text
    assert str(address) == text
    assert parse_address(text) == address


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Sales@dbo", Address("Sales", "dbo")),
        ("Sales@dbo@nsb", Address("Sales", "dbo", "nsb")),
        ("Sales@dbo@nsb.prod", Address("Sales", "dbo", "nsb.prod")),
        ("Sales@[dbo]@nsb.prod", Address("Sales", "dbo", "nsb.prod")),
        ("Sales@dbo@[nsb.prod]", Address("Sales", "dbo", "nsb.prod")),
        ("Sales@[]@[nsb]", Address("Sales", None, "nsb")),
        ("Sales@@nsb", Address("Sales", None, "nsb")),
        ("Sales@[]", Address("Sales")),
        ("Sales@", Address("Sales")),
        ("Sales@[dbo]@[]", Address("Sales", "dbo")),
        ("Sales@[a@b]@[c@d@e]", Address("Sales", "a@b", "c@d@e")),
        ("Sales@[a]]@]]b]", Address("Sales", "a]@]b")),
        ("Sales.Delayed@[dbo]", Address("Sales.Delayed", "dbo")),
        ("my.table@[my.schema]@[my.db]", Address("my.table", "my.schema", "my.db")),
        ("Sa]les[@[dbo]", Address("Sa]les[", "dbo")),
    ],
)
def test_parse_address_accepts(text, expected):
    assert parse_address(text) == expected


def test_address_round_trip_generated_names():
    rng = random.Random(42)
    alphabet = list("abcXYZ09 ._-$#@[]]é中😀")
    table_alphabet = [c for c in alphabet if c != "@"]

    def name(chars):
        return "".join(rng.choice(chars) for _ in range(rng.randint(1, 10)))

    for _ in range(3000):
        table = name(table_alphabet)
        if not table.strip():
            continue
        schema = rng.choice([None, name(alphabet)])
        catalog = rng.choice([None, name(alphabet)])
        address = Address(table, schema, catalog)
        assert parse_address(address.format()) == address


def test_address_blank_parts_mean_default():
    assert Address("Sales", "", "") == Address("Sales")
    assert Address("Sales", "  ", "nsb").schema is None


@pytest.mark.parametrize(
    "args, error, match",
    [
        (("Sa@les",), ValueError, "contains '@'"),
        (("",), ValueError, "empty"),
        (("   ",), ValueError, "empty"),
        ((None,), TypeError, "table must be str"),
        (("Sales", 1), TypeError, "schema"),
        (("Sales", "dbo", 2), TypeError, "catalog"),
    ],
)
def test_address_rejects(args, error, match):
    with pytest.raises(error, match=match):
        Address(*args)


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "table part"),
        ("@[dbo]", "table part"),
        ("  @dbo", "table part"),
        ("Sales@[dbo", "no closing"),
        ("Sales@[dbo]]", "no closing"),
        ("Sales@[dbo]@[nsb", "catalog part has no closing"),
        ("Sales@[dbo]x", "after the closing"),
        ("Sales@[dbo]@[nsb]x", "after the closing"),
        ("Sales@[dbo]]x]y", "after the closing"),
        ("Sales@[dbo]@[nsb]@[x]", "more than table, schema and catalog"),
        ("Sales@dbo@nsb@x", "more than table, schema and catalog"),
        ("Sa@les@dbo@nsb", "more than table, schema and catalog"),
        ("Sales@[dbo]@nsb@", "more than table, schema and catalog"),
        ("Sales@db]o", "unbracketed schema part"),
        ("Sales@dbo@n[sb", "unbracketed catalog part"),
        ("Sales@dbo]@[nsb]", "unbracketed schema part"),
    ],
)
def test_parse_address_rejects(text, match):
    with pytest.raises(ValueError, match=match):
        parse_address(text)


def test_parse_address_requires_str():
    with pytest.raises(TypeError):
        parse_address(None)


def test_address_is_frozen_and_hashable():
    address = Address("Sales", "dbo")
    with pytest.raises(AttributeError):
        address.table = "Billing"
    assert {address, Address("Sales", "dbo")} == {address}


# --- timestamps --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dt, text",
    [
        (NOW, "2024-01-02 03:04:05:678901 Z"),
        (datetime(2024, 12, 31, 23, 59, 59, tzinfo=UTC), "2024-12-31 23:59:59:000000 Z"),
        (datetime(5, 1, 1, tzinfo=UTC), "0005-01-01 00:00:00:000000 Z"),
        (datetime(2024, 1, 2, 5, 4, 5, 1, tzinfo=timezone(timedelta(hours=2))), "2024-01-02 03:04:05:000001 Z"),
        (datetime(2024, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))), "2023-12-31 23:30:00:000000 Z"),
    ],
)
def test_format_time_sent_exact(dt, text):
    assert format_time_sent(dt) == text


def test_format_time_sent_refuses_naive():
    with pytest.raises(ValueError, match="naive"):
        format_time_sent(datetime(2024, 1, 2, 3, 4, 5))


def test_format_time_sent_refuses_non_datetime():
    with pytest.raises(TypeError):
        format_time_sent("2024-01-02")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2024-01-02 03:04:05:678901 Z", NOW),
        ("2024-01-02 03:04:05:6789012 Z", NOW),  # .NET ticks, truncated
        ("2024-01-02 03:04:05:6789019 Z", NOW),
        ("2024-01-02 03:04:05:678 Z", NOW.replace(microsecond=678000)),
        ("2024-01-02 03:04:05:6 Z", NOW.replace(microsecond=600000)),
        ("2024-01-02 03:04:05 Z", NOW.replace(microsecond=0)),
        ("2024-12-31 23:59:59:9999999 Z", datetime(2024, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ],
)
def test_parse_time_sent(text, expected):
    parsed = parse_time_sent(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    [
        "2024-01-02T03:04:05.678901Z",
        "2024-01-02 03:04:05.678901 Z",
        "2024-01-02 03:04:05:678901Z",
        "2024-01-02 03:04:05:678901",
        "2024-01-02 03:04:05:67890123 Z",
        "2024-01-02 03:04:05: Z",
        "2024-13-02 03:04:05:000000 Z",
        "2024-02-30 03:04:05:000000 Z",
        "2024-01-02 24:00:00:000000 Z",
        " 2024-01-02 03:04:05:678901 Z",
        "2024-01-02 03:04:05:678901 Z\n",
        "٢٠٢٤-01-02 03:04:05:678901 Z",
        "",
    ],
)
def test_parse_time_sent_rejects(text):
    with pytest.raises(ValueError):
        parse_time_sent(text)


def test_time_sent_round_trip():
    rng = random.Random(3)
    start = datetime(1, 1, 1, tzinfo=UTC)
    span = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - start) // timedelta(microseconds=1)
    for _ in range(2000):
        dt = start + timedelta(microseconds=rng.randint(0, span))
        text = format_time_sent(dt)
        assert len(text) == len("yyyy-MM-dd HH:mm:ss:ffffff Z")
        assert parse_time_sent(text) == dt


# --- standard headers --------------------------------------------------------------------


def test_standard_headers_defaults():
    headers = standard_headers(
        message_id="0b4a3c6e-1111-2222-3333-444455556666",
        enclosed_types=["Sales.Messages.PlaceOrder, Sales.Messages", "Sales.Messages.IOrderCommand"],
        reply_to="Client@[dbo]@[nsb]",
        originating_endpoint="Client",
        now=NOW,
    )
    assert list(headers) == [
        wire.MESSAGE_ID,
        wire.ENCLOSED_MESSAGE_TYPES,
        wire.CONTENT_TYPE,
        wire.MESSAGE_INTENT,
        wire.REPLY_TO_ADDRESS,
        wire.CORRELATION_ID,
        wire.CONVERSATION_ID,
        wire.TIME_SENT,
        wire.ORIGINATING_ENDPOINT,
        wire.ORIGINATING_MACHINE,
    ]
    conversation = headers.pop(wire.CONVERSATION_ID)
    assert str(uuid.UUID(conversation)) == conversation
    assert headers == {
        "NServiceBus.MessageId": "0b4a3c6e-1111-2222-3333-444455556666",
        "NServiceBus.EnclosedMessageTypes": "Sales.Messages.PlaceOrder, Sales.Messages;Sales.Messages.IOrderCommand",
        "NServiceBus.ContentType": "application/json",
        "NServiceBus.MessageIntent": "Send",
        "NServiceBus.ReplyToAddress": "Client@[dbo]@[nsb]",
        "NServiceBus.CorrelationId": "0b4a3c6e-1111-2222-3333-444455556666",
        "NServiceBus.TimeSent": "2024-01-02 03:04:05:678901 Z",
        "NServiceBus.OriginatingEndpoint": "Client",
        "NServiceBus.OriginatingMachine": socket.gethostname(),
    }


def test_standard_headers_explicit_values_and_omissions():
    headers = standard_headers(
        message_id="m1",
        enclosed_types="Sales.OrderPlaced",
        intent="Publish",
        reply_to=None,
        content_type="text/xml",
        correlation_id="c1",
        conversation_id="conv1",
        machine="host-a",
        now=NOW,
    )
    assert headers == {
        "NServiceBus.MessageId": "m1",
        "NServiceBus.EnclosedMessageTypes": "Sales.OrderPlaced",
        "NServiceBus.ContentType": "text/xml",
        "NServiceBus.MessageIntent": "Publish",
        "NServiceBus.CorrelationId": "c1",
        "NServiceBus.ConversationId": "conv1",
        "NServiceBus.TimeSent": "2024-01-02 03:04:05:678901 Z",
        "NServiceBus.OriginatingMachine": "host-a",
    }


def test_standard_headers_new_conversation_each_time_and_current_time():
    kwargs = dict(message_id="m", enclosed_types=["T"], reply_to=None)
    first, second = standard_headers(**kwargs), standard_headers(**kwargs)
    assert first[wire.CONVERSATION_ID] != second[wire.CONVERSATION_ID]
    sent = parse_time_sent(first[wire.TIME_SENT])
    assert abs(datetime.now(UTC) - sent) < timedelta(minutes=1)


def test_standard_headers_reply_to_address_object():
    headers = standard_headers(message_id="m", enclosed_types="T", reply_to=Address("Client", None, "nsb.prod"), machine="h", now=NOW)
    assert headers[wire.REPLY_TO_ADDRESS] == "Client@[]@[nsb.prod]"


def test_standard_headers_encode_round_trip():
    headers = standard_headers(message_id="m", enclosed_types="T", reply_to="Client@[dbo]", machine="h", now=NOW)
    assert decode_headers(encode_headers(headers)) == headers


@pytest.mark.parametrize("intent", wire.MESSAGE_INTENTS)
def test_standard_headers_every_intent(intent):
    headers = standard_headers(message_id="m", enclosed_types="T", intent=intent, reply_to=None, machine="h", now=NOW)
    assert headers[wire.MESSAGE_INTENT] == intent


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        ({"intent": "send"}, ValueError, "intent"),
        ({"intent": "Timeout"}, ValueError, "intent"),
        ({"enclosed_types": []}, ValueError, "enclosed_types is empty"),
        ({"enclosed_types": ""}, ValueError, "enclosed_types is empty"),
        ({"enclosed_types": ["A;B"]}, ValueError, "';'"),
        ({"enclosed_types": ["A", ""]}, ValueError, "empty"),
        ({"message_id": ""}, ValueError, "message_id"),
        ({"message_id": None}, TypeError, "message_id"),
        ({"reply_to": "Client@[dbo"}, ValueError, "no closing"),
        ({"reply_to": ""}, ValueError, "reply_to"),
        ({"correlation_id": ""}, ValueError, "correlation_id"),
        ({"now": datetime(2024, 1, 2)}, ValueError, "naive"),
    ],
)
def test_standard_headers_rejects(overrides, error, match):
    kwargs = dict(message_id="m", enclosed_types="T", reply_to=None, machine="h", now=NOW)
    kwargs.update(overrides)
    with pytest.raises(error, match=match):
        standard_headers(**kwargs)


def test_standard_headers_reply_to_is_required_keyword():
    with pytest.raises(TypeError):
        standard_headers(message_id="m", enclosed_types="T")


# --- error headers -----------------------------------------------------------------------


class OrderRejected(Exception):
    pass


def fail_inside_handler():
    try:
        {}["missing"]
    except KeyError as inner:
        raise OrderRejected("order 42 rejected") from inner


def caught(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the test wants the exception object
        return exc
    raise AssertionError("did not raise")


def test_error_headers():
    original = {wire.MESSAGE_ID: "m1", "x": "y"}
    exc = caught(fail_inside_handler)
    headers = error_headers(original, exc, "Sales@[dbo]@[nsb]", now=NOW)
    assert original == {wire.MESSAGE_ID: "m1", "x": "y"}  # a new dict, input untouched
    assert headers[wire.MESSAGE_ID] == "m1" and headers["x"] == "y"
    assert headers["NServiceBus.ExceptionInfo.ExceptionType"] == f"{__name__}.OrderRejected"
    assert headers["NServiceBus.ExceptionInfo.InnerExceptionType"] == "KeyError"
    assert headers["NServiceBus.ExceptionInfo.Message"] == "order 42 rejected"
    assert headers["NServiceBus.ExceptionInfo.Source"] == __name__
    stack = headers["NServiceBus.ExceptionInfo.StackTrace"]
    assert "fail_inside_handler" in stack and "OrderRejected: order 42 rejected" in stack and "KeyError" in stack
    assert headers["NServiceBus.FailedQ"] == "Sales@[dbo]@[nsb]"
    assert headers["NServiceBus.TimeOfFailure"] == "2024-01-02 03:04:05:678901 Z"
    assert "NServiceBus.ExceptionInfo.HelpLink" not in headers
    assert decode_headers(encode_headers(headers)) == headers


def test_error_headers_builtin_exception_never_raised():
    headers = error_headers({}, ValueError("bad value"), "Sales", now=NOW)
    assert headers[wire.EXCEPTION_TYPE] == "ValueError"
    assert headers[wire.EXCEPTION_SOURCE] == "builtins"
    assert headers[wire.EXCEPTION_STACKTRACE] == "ValueError: bad value\n"
    assert wire.INNER_EXCEPTION_TYPE not in headers


def test_error_headers_implicit_context_and_suppressed_context():
    def implicit():
        try:
            raise KeyError("k")
        except KeyError:
            raise RuntimeError("while handling")  # noqa: B904  (the implicit context is the point)

    def suppressed():
        try:
            raise KeyError("k")
        except KeyError:
            raise RuntimeError("clean") from None

    assert error_headers({}, caught(implicit), "q", now=NOW)[wire.INNER_EXCEPTION_TYPE] == "KeyError"
    assert wire.INNER_EXCEPTION_TYPE not in error_headers({}, caught(suppressed), "q", now=NOW)


def test_error_headers_replace_stale_failure_info():
    stale = {
        "a": "b",
        wire.INNER_EXCEPTION_TYPE: "Old.Inner",
        wire.EXCEPTION_HELP_LINK: "http://old",
        wire.EXCEPTION_DATA_PREFIX + "k": "v",
        wire.FAILED_Q: "Old",
    }
    headers = error_headers(stale, ValueError("new"), "New", now=NOW)
    assert wire.INNER_EXCEPTION_TYPE not in headers
    assert wire.EXCEPTION_HELP_LINK not in headers
    assert wire.EXCEPTION_DATA_PREFIX + "k" not in headers
    assert headers[wire.FAILED_Q] == "New"
    assert headers["a"] == "b"


def test_error_headers_truncate_message():
    headers = error_headers({}, ValueError("x" * 20000), "q", now=NOW)
    assert len(headers[wire.EXCEPTION_MESSAGE]) == 16384


def test_error_headers_default_time_and_validation():
    headers = error_headers({}, ValueError("x"), "q")
    assert abs(datetime.now(UTC) - parse_time_sent(headers[wire.TIME_OF_FAILURE])) < timedelta(minutes=1)
    with pytest.raises(ValueError, match="failed_queue"):
        error_headers({}, ValueError("x"), "")
    with pytest.raises(TypeError):
        error_headers({}, "not an exception", "q")


def test_header_name_constants():
    assert wire.MESSAGE_ID == "NServiceBus.MessageId"
    assert wire.FORWARD_DESTINATION == "NServiceBus.SqlServer.ForwardDestination"
    assert wire.EXCEPTION_MESSAGE == "NServiceBus.ExceptionInfo.Message"
    assert wire.EXCEPTION_TYPE == "NServiceBus.ExceptionInfo.ExceptionType"
    assert wire.EXCEPTION_STACKTRACE == "NServiceBus.ExceptionInfo.StackTrace"
    assert wire.FAILED_Q == "NServiceBus.FailedQ"
    assert wire.TIME_OF_FAILURE == "NServiceBus.TimeOfFailure"
    assert wire.PROCESSING_ENDPOINT == "NServiceBus.ProcessingEndpoint"
    assert wire.ORIGINATING_MACHINE == "NServiceBus.OriginatingMachine"


def test_adjacent_lone_surrogates_are_one_character_on_the_wire():
    # UTF-16 cannot tell them apart from the astral character, so neither can .NET.
    assert encode_headers({"a": "\ud800\udc00"}) == encode_headers({"a": "\U00010000"}) == '{"a":"\\ud800\\udc00"}'
    assert decode_headers('{"a":"\\ud800\\udc00"}') == {"a": "\U00010000"}


def test_deep_nesting_is_poison_not_a_crash():
    with pytest.raises(PoisonHeaders, match="nested too deeply"):
        decode_headers('{"a":' + "[" * 100000 + "]" * 100000 + "}")


def test_the_runtime_still_offers_the_wire_module_users_import_from_it():
    """wire.py moved to the core; `from sqltransport_schema.runtime import wire` (in users' code) is the same module."""
    from sqltransport_schema.runtime import wire as old_home

    assert old_home is wire and old_home.encode_headers is encode_headers


def test_delayed_retry_headers_count_one_more_and_stamp_the_time():
    """NServiceBus's delayed retry: NServiceBus.Retries one more (0 when missing, or not a whole number
    as a hostile header may be), NServiceBus.Retries.Timestamp now; the rest unchanged."""
    now = datetime(2026, 12, 7, 15, 30, 1, 123456, tzinfo=timezone.utc)
    first = wire.delayed_retry_headers({"a": "b"}, now)
    assert first == {"a": "b", wire.DELAYED_RETRIES: "1", wire.DELAYED_RETRIES_TIMESTAMP: wire.format_time_sent(now)}
    assert wire.delayed_retry_headers(first, now)[wire.DELAYED_RETRIES] == "2"
    for hostile in ("-3", "two", "", "१", "1e9", " 2"):
        assert wire.delayed_retries_done({wire.DELAYED_RETRIES: hostile}) == 0, hostile
    assert wire.delayed_retries_done({wire.DELAYED_RETRIES: "99999999999999999999"}) == 99999999999999999999


def test_error_headers_drop_the_retry_counts_as_nservicebus_does():
    headers = {wire.DELAYED_RETRIES: "3", wire.IMMEDIATE_RETRIES: "5", wire.DELAYED_RETRIES_TIMESTAMP: "t", "x": "y"}
    moved = wire.error_headers(headers, ValueError("no"), "Sales@[dbo]")
    assert wire.DELAYED_RETRIES not in moved and wire.IMMEDIATE_RETRIES not in moved
    assert moved[wire.DELAYED_RETRIES_TIMESTAMP] == "t" and moved["x"] == "y"


# ---------------------------------------------------------------- the readers of poison headers


def test_first_values_reads_what_decode_headers_refuses_as_the_error_queue_groups_read_it():
    """A name twice: its first value; a value that is no text: its JSON; no JSON object: None."""
    assert wire.first_values('{"a":"1","a":"2","b":3,"c":null,"d":[1]}') == {"a": "1", "b": "3", "d": "[1]"}
    assert wire.first_values('\ufeff{"a":"x\\u0000y"}') == {"a": "x\x00y"}
    for text in ("[1]", "not json", "", '{"a":' * 100_000, None):
        assert wire.first_values(text) is None


def test_failed_q_of_unreadable_headers_is_cut_out_where_the_text_names_one():
    assert wire.failed_q_of_unreadable('{"NServiceBus.FailedQ": "Sa\\u006ces@[dbo]", "x": [}') == "Sales@[dbo]"
    assert wire.failed_q_of_unreadable('{"x": "NServiceBus.FailedQ"}') is None
    assert wire.failed_q_of_unreadable(None) is None


def test_time_sent_of_raw_headers():
    sent = "2026-11-01 12:00:00:000000 Z"
    assert wire.time_sent_of(f'{{"NServiceBus.TimeSent":"{sent}"}}') == wire.parse_time_sent(sent)
    assert wire.time_sent_of(f'{{"NServiceBus.TimeSent" : "{sent[:4]}\\u002d{sent[5:]}"}}') == wire.parse_time_sent(sent)  # escaped
    assert wire.time_sent_of('{"NServiceBus.TimeSent":"yesterday"}') is None and wire.time_sent_of(None) is None
