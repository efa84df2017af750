"""An agent kept apart from tests/agents.py, for a worker that loads only it
(a deployment whose workers load different agents on one queue)."""

from __future__ import annotations

from resumable import Agent, Complete, StepContext

lonely = Agent("lonely")


@lonely.step
def only(ctx: StepContext) -> Complete:
    return Complete({"ran": True})
