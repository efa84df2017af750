"""The `trip` agent after a deploy that changed it: the hotel is booked for
three nights (another argument to the same tool call) and the `pay` step is
gone. Sessions recorded by tests/deploy_agents_v1.py diverge from it."""

from __future__ import annotations

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from tests.deploy_agents_v1 import book_hotel, undo

trip = Agent(
    "trip",
    retry=RetryPolicy(max_attempts=1000, min_delay=0.2, max_delay=0.3, compensation_attempts=3),
)
trip.compensation(undo)


@trip.step
def book(ctx: StepContext) -> Complete:
    book_hotel(ctx, nights=3)
    return Complete({"nights": 3})
