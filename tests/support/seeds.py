"""The facts the SQL Server tests compare with: parts of seed 003 and of the reference documents,
copied into tests/fixtures/ (tests/fixtures/manifest.json names each one's source and digests;
tools/sync_fixtures.py makes and checks the copies). The tests never read the workplace folder."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


FIXTURES = TESTS / "fixtures"


RUNTIME_FIXTURE = FIXTURES / "mssql_seed003_runtime.txt"  # seed 003 from its "Runtime" line to the end


RUNTIME_HEADING = "Runtime"


SEED_RUNTIME = {
    # statement: (line just before it in seed 003, line just after it; None: end of the document)
    "peek": ("Checks if there are messages in the queue.", "Purge expired"),
    "purge_expired": ("Purges expired messages from the queue.", "Purge at startup"),
    "purge_all": ("Used by an endpoint to optionally purge all message on startup.", "Receive message"),
    "receive": ("Retrieves a message from the queue.", "The CorrelationId"),
    "send": ("Places a message on the queue.", "The CorrelationId"),
    "subscribe": ("Subscribe and endpoint to a topic.", "Unsubscribe from a topic"),
    "unsubscribe": ("Unsubscribe an endpoint from a topic.", "Find all subscribers"),
    "find_subscribers": ("Get a list of all endpoints that subscribe to a topic.", "Missing index warning"),
    "check_expires_index": (
        "Used to log a warning if a required index is missing. See also Upgrade from version 2 to 3.",
        "Check column type",
    ),
    "check_headers_type": (
        "Used to log a warning if the message headers data type is non-unicode. See also Supporting unicode characters in headers.",
        "Create Delayed Queue Table",
    ),
    "move_due_delayed": ("Moves due messages from the delayed queue table to the input queue table.", "Store Delayed Message"),
    "store_delayed": ("Stores a message in the delayed queue table.", None),
}


def runtime_text() -> str:
    text = RUNTIME_FIXTURE.read_text(encoding="utf-8")
    assert text.splitlines()[0] == RUNTIME_HEADING, "the runtime fixture starts at seed 003's 'Runtime' heading"
    return text


def raw_seed_statement(text: str, name: str) -> str:
    before, after = SEED_RUNTIME[name]
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines.count(before) == 1, f"seed 003: expected the line {before!r} exactly once"
    start = lines.index(before) + 1
    end = len(lines) if after is None else lines.index(after, start)
    statement = "\n".join(lines[start:end]).strip()
    assert statement and "{0}" in statement, (name, statement[:200])
    return statement
