"""The pipeline subcommands beyond move (plan, run, archive, replay, backfill)."""

from __future__ import annotations


def add_parsers(psub, spark_options, guard) -> None:
    pass
