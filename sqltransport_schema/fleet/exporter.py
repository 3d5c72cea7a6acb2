"""fleet status --serve: the fleet's status rows (status.py) as Prometheus families, served by the
status exporter's collector and server (runtime/exporter.py): read again at most once per
--min-interval in the same worker processes, whatever the scrapes. One sample per target and
family, labelled with its name, stage and role (its URL never: it may name a host the scraper should
not learn, and its password is nobody's)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..runtime.exporter import SnapshotCollector, client
from . import status
from .file import Stage, Target
from .work import FAILED

if TYPE_CHECKING:
    from .pool import Pool

LABELS = ("target", "stage", "role")
METRICS = (
    ("sqltransport_fleet_target_reachable", "1 if the target's database answered the last read."),
    ("sqltransport_fleet_target_at_head", "1 if the target is at the head (and in sync, with --check)."),
    ("sqltransport_fleet_target_revisions_behind", "Revisions the target is behind the head (none: unreachable, or not below it)."),
    ("sqltransport_fleet_target_revision", "1 for the revision the target is at (label revision; <base>: none yet; unknown: not read)."),
    ("sqltransport_fleet_target_in_sync", "1 if check finds no drift in the target's tables (--check only)."),
    ("sqltransport_fleet_target_timed_out", "1 if the target gave no answer within the read timeout (a held lock, a stuck server)."),
    ("sqltransport_fleet_target_read_seconds", "Seconds the target's last read took (a timed-out one's: the time waited)."),
)
EXTRA_LABELS = {"sqltransport_fleet_target_revision": ("revision",)}


def families(rows: list[status.Row], stages: dict[str, str]) -> list:
    """The rows' metric families, in METRICS order, each only if it has samples."""
    core = client().core
    made = {name: core.GaugeMetricFamily(name, text, labels=LABELS + EXTRA_LABELS.get(name, ())) for name, text in METRICS}
    for row in rows:
        labels = [row.target.name, stages.get(row.target.name, ""), row.target.role or ""]
        result = row.result
        timed_out = "timed_out" in result.extra
        made["sqltransport_fleet_target_reachable"].add_metric(labels, int(result.reachable and not timed_out))
        made["sqltransport_fleet_target_timed_out"].add_metric(labels, int(timed_out))
        made["sqltransport_fleet_target_read_seconds"].add_metric(labels, round(result.seconds, 3))
        made["sqltransport_fleet_target_at_head"].add_metric(labels, int(row.ok))
        if result.outcome == FAILED:
            continue
        if result.pending is not None:
            made["sqltransport_fleet_target_revisions_behind"].add_metric(labels, result.pending)
        made["sqltransport_fleet_target_revision"].add_metric([*labels, result.revision_shown], 1)
        if result.drift is not None:
            made["sqltransport_fleet_target_in_sync"].add_metric(labels, int(bool(result.drift.get("in_sync"))))
    return [family for family in made.values() if family.samples]


class FleetCollector(SnapshotCollector):
    """The fleet's rows, read through the status pool's worker processes (kept for the exporter's life)."""

    COMMAND = "fleet status --serve"
    READS_WHAT = "the fleet"

    def __init__(
        self, pool: Pool, staged: list[tuple[Stage, list[Target]]], parallel: int, min_interval: float, *, log: Callable[[str], object]
    ) -> None:
        super().__init__(min_interval, log=log)
        self.pool, self.parallel = pool, parallel
        self.targets = [t for _, ts in staged for t in ts]
        self.stages = {t.name: s.name for s, ts in staged for t in ts}

    def read(self) -> tuple[list, float]:
        taken = time.time()
        results = {r.target: r for r in self.pool.run(self.targets, self.parallel, lambda: False)}
        return families([status.Row(t, results[t.name]) for t in self.targets], self.stages), taken
