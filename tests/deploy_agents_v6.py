"""`trip` version 2 with a broken migration from version 0 (it expects state
the sessions never had): taking a session over parks it, and the fixed
release (tests/deploy_agents_v4.py) takes it over once resumed."""

from __future__ import annotations

from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from tests.deploy_agents_v1 import undo

trip = Agent(
    "trip",
    version=2,
    retry=RetryPolicy(max_attempts=1000, min_delay=0.2, max_delay=0.3, compensation_attempts=3),
)
trip.compensation(undo)


@trip.migrate(from_version=0)
def broken(state: dict[str, Any]) -> dict[str, Any]:
    return {"booking": {"nights": state["room_nights"]}}  # KeyError: no such field


@trip.step(aliases=["pay"])
def charge(ctx: StepContext) -> Complete:
    return Complete({"paid": True})
