"""The `trip` agent after a deploy whose `book` step no longer books a hotel:
a session that recorded the booking and is replaying `book` (its worker was
killed mid-step) makes fewer calls than it recorded, which is a divergence."""

from __future__ import annotations

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from resumable.waits import Signal, Wait
from tests.deploy_agents_v1 import undo

trip = Agent(
    "trip",
    retry=RetryPolicy(max_attempts=1000, min_delay=0.2, max_delay=0.3, compensation_attempts=3),
)
trip.compensation(undo)


@trip.step
def book(ctx: StepContext) -> Wait:
    return ctx.wait(Signal("go"), then="pay")


@trip.step
def pay(ctx: StepContext) -> Complete:
    return Complete({"paid": True})
