"""Golden texts: DDL rendered step by step, held to a file in tests/golden (SQLTRANSPORT_UPDATE_GOLDEN=1 rewrites it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from sqltransport_schema.schema import TableSpec

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def render(engine_name: str, specs: list[TableSpec], separator: str, steps: Callable[[str, TableSpec], list[tuple[str, list[str]]]]) -> str:
    """Every labelled step of `steps` for each spec, batches separated."""
    out = []
    for spec in specs:
        for label, batches in steps(engine_name, spec):
            out.append(f"-- {label}: {spec.name.table}")
            for batch in batches:
                out += [batch, separator]
    return "\n".join(out) + "\n"


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SQLTRANSPORT_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} differs; review and rerun with SQLTRANSPORT_UPDATE_GOLDEN=1"
