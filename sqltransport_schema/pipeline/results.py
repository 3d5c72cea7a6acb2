"""What a pipeline job returns: a dataclass whose JSON (`--format json`) is its fields, as they are."""

from __future__ import annotations

from dataclasses import asdict


class JobResult:
    """Base of the jobs' result dataclasses (move, archive, replay, backfill)."""

    def to_json(self) -> dict:
        return asdict(self)
