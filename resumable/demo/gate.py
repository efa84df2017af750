"""A pause point, so the demo can SIGKILL a worker at an exact instant.

A crash is only convincing if it lands in the worst place: after a side
effect happened and before the step's checkpoint committed. The demo cannot
time a SIGKILL into a window of microseconds, so the refund step calls
``pause_point`` there. With the session's input naming a gate directory it
announces that it got there and waits while a ``hold`` file exists; without
one (every real run) it does nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

from resumable.context import StepContext

_MAX_HOLD_SECONDS = 60.0


def reached(gate_dir: Path, name: str) -> Path:
    """The file a step touches when it reaches pause point `name`."""
    return gate_dir / f"{name}.reached"


def hold(gate_dir: Path) -> Path:
    """While this file exists, a step at a pause point waits."""
    return gate_dir / "hold"


def pause_point(ctx: StepContext, name: str) -> None:
    """Announce pause point `name` and wait while the demo holds the gate."""
    gate = ctx.input.get("demo_gate") if isinstance(ctx.input, dict) else None
    if not gate:
        return
    gate_dir = Path(gate)
    reached(gate_dir, name).touch()
    deadline = time.monotonic() + _MAX_HOLD_SECONDS
    while hold(gate_dir).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
