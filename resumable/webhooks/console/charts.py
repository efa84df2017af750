"""The console's charts, drawn on the server as SVG from the activity samples
(one a minute, written by the scheduler: ``models/activity_queries.py``).

No chart library and nothing fetched from elsewhere: each chart is a
polyline whose points are SVG attributes (the console's Content-Security-
Policy allows no inline style and no script from elsewhere). Steps and
failures per minute are the differences between consecutive samples'
running counts; a gap (no scheduler ran) or a count that went down (the
database restarted and reset it) leaves a hole rather than a spike.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from resumable.models.activity_queries import ActivitySample

# The SVG's drawing area, in its own units.
WIDTH, HEIGHT = 600, 100
# Two samples further apart than this are a gap, not a minute.
MAX_GAP = timedelta(minutes=3)


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    # Runs of "x,y x,y ..." (one polyline each; a hole splits them).
    lines: list[str]
    peak: float
    last: float | None
    points: int


Point = tuple[datetime, float | None]


def _rate(samples: Sequence[ActivitySample], count: Callable[[ActivitySample], int]) -> list[Point]:
    """Per minute, from a running count: a hole where it is not one."""
    points: list[Point] = []
    for before, after in itertools.pairwise(samples):
        minutes = (after.at - before.at).total_seconds() / 60
        grown = count(after) - count(before)
        ok = minutes > 0 and after.at - before.at <= MAX_GAP and grown >= 0
        points.append((after.at, grown / minutes if ok else None))
    return points


def _buckets(points: list[Point], start: datetime, size: timedelta) -> list[Point]:
    """The mean of each `size` bucket (a day of minutes in 144 points)."""
    sums: dict[int, list[float]] = {}
    for at, value in points:
        if value is not None:
            sums.setdefault(int((at - start) / size), []).append(value)
    return [(start + size * index, sum(v) / len(v)) for index, v in sorted(sums.items())]


def _chart(title: str, unit: str, points: list[Point], start: datetime, end: datetime) -> Chart:
    span = max((end - start).total_seconds(), 1.0)
    values = [v for _, v in points if v is not None]
    peak = max(values, default=0.0)
    scale = peak if peak > 0 else 1.0
    lines: list[str] = []
    run: list[str] = []
    for at, value in points:
        if value is None:
            if run:
                lines.append(" ".join(run))
            run = []
            continue
        x = (at - start).total_seconds() / span * WIDTH
        y = HEIGHT - value / scale * HEIGHT
        run.append(f"{x:.1f},{y:.1f}")
    if run:
        lines.append(" ".join(run))
    last = next((v for _, v in reversed(points) if v is not None), None)
    return Chart(title, unit, lines, peak, last, len(values))


def charts(samples: Sequence[ActivitySample], start: datetime, end: datetime) -> list[Chart]:
    """Steps and failures per minute, the sessions queued for a worker, those
    waiting, and the resumes' latency, from `start` to `end` (a day is drawn
    in 10-minute means)."""
    inside = [s for s in samples if start <= s.at <= end]
    series: list[tuple[str, str, list[Point]]] = [
        ("Steps", "per minute", _rate(inside, lambda s: s.steps)),
        ("Failures (dead letters)", "per minute", _rate(inside, lambda s: s.failures)),
        ("Queued for a worker", "sessions", [(s.at, float(s.pending)) for s in inside]),
        ("Waiting (suspended)", "sessions", [(s.at, float(s.suspended)) for s in inside]),
        # From a callback's or signal's arrival to the claim of the session it woke.
        ("Resume latency, p95", "ms", [(s.at, s.resume_p95_ms) for s in inside]),
    ]
    if end - start > timedelta(hours=2):
        size = (end - start) / 144
        series = [(t, u, _buckets(p, start, size)) for t, u, p in series]
    return [_chart(title, unit, points, start, end) for title, unit, points in series]
