"""The `trip` agent after a deploy that lost the `pay` step, the `undo`
compensation (not `return_car`) and the `hotel_confirmed` poll check: sessions that need them
are parked, not given up."""

from __future__ import annotations

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from tests.deploy_agents_v1 import book_hotel, return_car

trip = Agent(
    "trip",
    retry=RetryPolicy(max_attempts=1000, min_delay=0.2, max_delay=0.3, compensation_attempts=3),
)


trip.compensation(return_car)  # kept: only `undo` was lost


@trip.step
def book(ctx: StepContext) -> Complete:
    book_hotel(ctx, nights=2)
    return Complete({"nights": 2})


@trip.step
def confirmed(ctx: StepContext) -> Complete:
    return Complete({"confirmed": True})
