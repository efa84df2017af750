"""A session's run at a glance: its steps, waits and tool calls as bars on
one time axis, each with its duration in milliseconds.

Read from what is stored: a step's own duration from its ``step_completed``
event (``ms``, measured by the worker around the step function), a wait from
its ``suspended`` event to the ``resumed`` one (or to now), a tool call from
its record's creation to its last update. The bars are SVG attributes, not
inline styles: the console's Content-Security-Policy allows no inline style.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from resumable.models.records import AuditEventRecord, ToolCallRecord
from resumable.services.narration import duration

# The SVG's width in its own units; a bar is never thinner than MIN_WIDTH so
# a millisecond step beside a three-day wait still shows.
SCALE = 1000
MIN_WIDTH = 3


@dataclass(frozen=True)
class Bar:
    kind: str  # "step", "wait", "tool" (the CSS class of its colour)
    label: str
    start: datetime
    end: datetime
    # Where the bar sits on the SVG's axis, in SCALE units.
    x: int = 0
    width: int = 0

    @property
    def took(self) -> str:
        return duration((self.end - self.start).total_seconds())


def bars(events: list[AuditEventRecord], calls: list[ToolCallRecord], now: datetime) -> list[Bar]:
    """The bars of `events` (one page of a session's log, oldest first) and
    `calls`, in start order, placed on one axis."""
    found: list[Bar] = []
    waiting: AuditEventRecord | None = None
    for event in events:
        payload = event.payload or {}
        if event.event_type == "step_completed" and isinstance(payload.get("ms"), int | float):
            took = timedelta(milliseconds=float(payload["ms"]))
            label = f"step {event.step}" if event.step else "step"
            found.append(Bar("step", label, event.created_at - took, event.created_at))
        elif event.event_type == "suspended":
            waiting = event
        elif event.event_type == "resumed" and waiting is not None:
            by = payload.get("by")
            label = f"wait, ended by {by}" if by else "wait"
            found.append(Bar("wait", label, waiting.created_at, event.created_at))
            waiting = None
    if waiting is not None:
        found.append(Bar("wait", "wait (still waiting)", waiting.created_at, now))
    for call in calls:
        end = call.updated_at if call.status != "started" else now
        found.append(Bar("tool", f"tool {call.tool} #{call.call_index}", call.created_at, end))
    if not found:
        return []
    found.sort(key=lambda bar: bar.start)
    origin = min(bar.start for bar in found)
    span = max((max(bar.end for bar in found) - origin).total_seconds(), 1e-3)
    placed = []
    for bar in found:
        x = round((bar.start - origin).total_seconds() / span * SCALE)
        width = max(MIN_WIDTH, round((bar.end - bar.start).total_seconds() / span * SCALE))
        placed.append(
            Bar(bar.kind, bar.label, bar.start, bar.end, min(x, SCALE - MIN_WIDTH), width)
        )
    return placed
