"""The `trip` agent after a deploy that lost both the `pay` step and the
`undo` compensation: a saga that needs `undo` is parked, not given up."""

from __future__ import annotations

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from tests.deploy_agents_v1 import book_hotel

trip = Agent(
    "trip",
    retry=RetryPolicy(max_attempts=1000, min_delay=0.2, max_delay=0.3, compensation_attempts=3),
)


@trip.step
def book(ctx: StepContext) -> Complete:
    book_hotel(ctx, nights=2)
    return Complete({"nights": 2})
