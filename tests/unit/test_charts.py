"""The console's charts from activity samples: rates from running counts,
with holes where a count is not one (a gap, a reset), and a day in means."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from resumable.models.activity_queries import ActivitySample
from resumable.webhooks.console.charts import HEIGHT, WIDTH, charts

START = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def _sample(minute: int, steps: int, *, pending: int = 0, failures: int = 0) -> ActivitySample:
    return ActivitySample(
        at=START + timedelta(minutes=minute),
        pending=pending,
        running=0,
        suspended=3,
        retrying=0,
        blocked=0,
        steps=steps,
        failures=failures,
    )


def test_steps_per_minute_with_a_hole_for_a_gap_and_for_a_reset() -> None:
    samples = [
        _sample(0, 100),
        _sample(1, 160),  # 60 a minute
        _sample(2, 280),  # 120 a minute: the peak
        _sample(10, 300),  # after an 8-minute gap: a hole
        _sample(11, 5),  # the count reset (a restart): a hole
        _sample(12, 35),  # 30 a minute
    ]
    steps, failures, queued, waiting, latency = charts(
        samples, START, START + timedelta(minutes=60)
    )
    assert (steps.peak, steps.last, steps.points) == (120.0, 30.0, 3)
    assert len(steps.lines) == 2  # split by the holes
    first = [tuple(map(float, p.split(","))) for p in steps.lines[0].split()]
    assert first == [(WIDTH / 60, HEIGHT / 2), (2 * WIDTH / 60, 0.0)]
    assert failures.peak == 0.0 and waiting.last == 3.0 and queued.points == 6
    assert latency.points == 0 and latency.lines == []  # no resume measured


def test_a_day_is_drawn_in_144_means() -> None:
    samples = [_sample(m, 10 * m, pending=m % 7) for m in range(24 * 60)]
    end = START + timedelta(days=1)
    steps, _, queued, _, _ = charts(samples, START, end)
    assert steps.points == 144 and steps.peak == 10.0
    assert queued.points == 144 and queued.last is not None
    assert 2.5 < queued.last < 3.5  # the mean of 0..6
