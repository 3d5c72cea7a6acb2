"""The overview's depth over the last hour as an SVG drawn on the server (no chart library and no
script: the Content-Security-Policy allows none inline): the geometry here, a pure function of the
samples; templates/_depth.html writes it out, autoescaped like every page (queue names are text)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

WINDOW = timedelta(hours=1)
WIDTH, HEIGHT, LEFT, BOTTOM, TOP, RIGHT = 640, 220, 48, 24, 10, 150  # the plot's box and its margins (legend on the right)
COLOURS = ("#1d3557", "#e63946", "#2a9d8f", "#f4a261", "#6a4c93", "#8d99ae", "#264653", "#e76f51")


@dataclass
class Line:
    queue: str
    colour: str
    points: list[tuple[float, float, datetime, int]] = field(default_factory=list)  # x, y, taken, depth

    @property
    def polyline(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in self.points)


@dataclass
class Chart:
    width: int
    height: int
    lines: list[Line]
    top: int  # the depth the top of the plot stands for
    start: datetime
    end: datetime
    box: tuple[int, int, int, int]  # left, top, right, bottom of the plot


def depth_chart(samples: Sequence[tuple[datetime, dict[str, int]]]) -> Chart | None:
    """Each queue's depth over the samples of the last hour (the latest sample's hour), one line a
    queue; None with fewer than two samples (nothing to draw yet)."""
    if len(samples) < 2:
        return None
    end = samples[-1][0]
    shown = [(at, depths) for at, depths in samples if at >= end - WINDOW]
    if len(shown) < 2:
        return None
    start = shown[0][0]
    queues = sorted({q for _, depths in shown for q in depths})
    top = max([d for _, depths in shown for d in depths.values()] + [1])
    left, right, plot_top, bottom = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
    span = (end - start).total_seconds() or 1.0
    lines = []
    for i, queue in enumerate(queues):
        line = Line(queue, COLOURS[i % len(COLOURS)])
        for at, depths in shown:
            if queue in depths:
                x = left + (right - left) * (at - start).total_seconds() / span
                y = bottom - (bottom - plot_top) * depths[queue] / top
                line.points.append((x, y, at, depths[queue]))
        lines.append(line)
    return Chart(WIDTH, HEIGHT, lines, top, start, end, (left, plot_top, right, bottom))
