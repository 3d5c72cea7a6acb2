"""The golden sources: seed 003 and transport-facts.md from the shared folder, or their committed copies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


GOLDEN = TESTS / "golden"


# Beside the repository; SQLTRANSPORT_SHARED names it for a clone made elsewhere (.ci/run's).
SHARED = Path(os.environ.get("SQLTRANSPORT_SHARED") or TESTS.parents[1] / "shared")


SEED_003 = SHARED / "seeds" / "003_7a6ac8b7339ec90b.txt"


FACTS = SHARED / "reference" / "transport-facts.md"


def shared_present() -> bool:
    return SHARED.is_dir()


# =========================================================================== golden sources
RUNTIME_FIXTURE = GOLDEN / "mssql_seed003_runtime.txt"  # seed 003 from its "Runtime" line to the end


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


def runtime_part(seed: str) -> str:
    lines = seed.splitlines()
    assert lines.count(RUNTIME_HEADING) == 1, "seed 003: expected one 'Runtime' heading"
    return "\n".join(lines[lines.index(RUNTIME_HEADING) :]) + "\n"


def runtime_text(source: str) -> str:
    if source == "fixture":
        return RUNTIME_FIXTURE.read_text(encoding="utf-8")
    if not shared_present():
        pytest.skip(f"{SHARED} is absent; the tests/golden copies are used instead")
    return runtime_part(SEED_003.read_text(encoding="utf-8"))


def raw_seed_statement(text: str, name: str) -> str:
    before, after = SEED_RUNTIME[name]
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines.count(before) == 1, f"seed 003: expected the line {before!r} exactly once"
    start = lines.index(before) + 1
    end = len(lines) if after is None else lines.index(after, start)
    statement = "\n".join(lines[start:end]).strip()
    assert statement and "{0}" in statement, (name, statement[:200])
    return statement
