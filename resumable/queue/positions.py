"""Where a run of a session stands between two steps.

The runner's loop and its continuation on the event loop (``async_runs.py``)
advance the same position, so a run that meets an ``async def`` step carries
on from exactly where the worker thread left it: the same step count and run
budget, state, sequence number, attempts and checkpoint writer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from resumable.queue.checkpoint_writer import CheckpointWriter
from resumable.queue.failures import HeldLease
from resumable.waits import Wake


@dataclass
class RunPosition:
    """The step about to run, and what the run has done so far."""

    session_id: Any
    epoch: int
    cursor: str
    state: dict[str, Any]
    seq: int
    attempts: int
    wake: Wake | None
    writer: CheckpointWriter
    steps_run: int = 0
    started: float = field(default_factory=time.monotonic)
    #: Audit events that ride with the next step's commit (a poll check's
    #: ``resumed``, see ``wakes.Wakes.resumed_event``).
    events: list[dict[str, Any]] = field(default_factory=list)

    def held(self) -> HeldLease:
        return HeldLease(self.session_id, self.epoch, self.attempts, self.writer.secrets)
