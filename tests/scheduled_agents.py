"""An agent whose code defines a schedule: the worker that loads it records
the schedule, and the scheduler starts its sessions (test_schedules.py)."""

from __future__ import annotations

from resumable import Agent, Complete, StepContext

heartbeat = Agent("heartbeat")
heartbeat.schedule("heartbeat-every-second", every=1, input={"beat": True}, overlap="allow")


@heartbeat.step
def beat(ctx: StepContext) -> Complete:
    return Complete({"beat": ctx.input["beat"]})
