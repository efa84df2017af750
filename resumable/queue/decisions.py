"""What a step decided: its return value validated, and what its commit writes.

A step returns the name of its next step, ``Next(...)``, ``Complete(...)``
or a wait. ``Agent.interpret`` checks that and names the step it goes to
(an unknown one is the step's failure, before anything is written), the same
rule ``resumable.testing`` applies. ``transition`` says which status the step
leaves the session in (still ``running``, ``completed``, ``suspended``, or
``pending`` when the run yields or the worker stops) and the audit events
committed with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resumable.agent import Decision
from resumable.context import StepContext
from resumable.models.status import SessionStatus
from resumable.queue.checkpoint_writer import CheckpointWriter, StepState
from resumable.queue.tool_calls import ToolCalls
from resumable.waits import Wake


@dataclass(frozen=True)
class StepRun:
    """A step that ran and returned something valid, ready to commit."""

    name: str
    ctx: StepContext
    tools: ToolCalls
    decision: Decision
    wake: Wake | None
    state: StepState
    result: str
    ms: float


def transition(
    step: StepRun,
    out_of_budget: bool,
    stopping: bool,
    steps_run: int,
    writer: CheckpointWriter,
    slot_changes: bool = False,
) -> tuple[SessionStatus, list[dict[str, Any]]]:
    """The status a step leaves the session in, and its audit events.

    `slot_changes`: the next step is under another concurrency limit than
    the one the run holds a slot of (or none); the run ends, so that the
    next one is claimed under the right one (``resumable/limits.py``)."""
    decision = step.decision
    payload: dict[str, Any] = {
        "next": decision.next_step,
        "ms": step.ms,
        "tool_calls": step.tools.executed,
        "tool_calls_replayed": step.tools.replayed,
    }
    if step.wake is not None:
        payload["woken_by"] = step.wake.kind
    events: list[dict[str, Any]] = [
        {"step": step.name, "type": "step_completed", "payload": payload}
    ]
    if decision.done:
        events.append({"step": step.name, "type": "session_completed", "payload": {}})
        return SessionStatus.COMPLETED, events
    if decision.wait is not None:
        events.append(
            {
                "step": decision.next_step,
                "type": "suspended",
                "payload": writer.redact(decision.wait),
            }
        )
        return SessionStatus.SUSPENDED, events
    if stopping:
        # The commit releases the lease: the worker is stopping (a hand-back).
        payload = {"reason": "worker stopping"}
        events.append({"step": decision.next_step, "type": "lease_released", "payload": payload})
        return SessionStatus.PENDING, events
    if out_of_budget or slot_changes:
        yielded: dict[str, Any] = {"steps": steps_run}
        if slot_changes and not out_of_budget:
            yielded["reason"] = "concurrency slot"
        events.append({"step": decision.next_step, "type": "run_yielded", "payload": yielded})
        return SessionStatus.PENDING, events
    return SessionStatus.RUNNING, events
