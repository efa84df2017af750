"""The `trip` agent as first deployed: book a hotel for two nights, wait for a
`go` signal, then pay. Loaded by the workers of tests/integration/test_safe_deploys.py
(its v2 is tests/deploy_agents_v2.py; its versioned successor, which renames
`pay` and migrates the state, tests/deploy_agents_v4.py)."""

from __future__ import annotations

from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.errors import TransientError
from resumable.retries import RetryPolicy
from resumable.waits import Poll, Signal, Wait
from tests.agents import hold_while_flagged, post_json

trip = Agent(
    "trip",
    retry=RetryPolicy(max_attempts=1000, min_delay=0.2, max_delay=0.3, compensation_attempts=3),
)


@trip.compensation
def undo(request: dict[str, Any], response: dict[str, Any], idempotency_key: str) -> None:
    url, body = request["args"]
    post_json(url.rsplit("/", 1)[0] + "/undo", {"what": body["what"]}, idempotency_key)


@trip.compensation
def return_car(request: dict[str, Any], response: dict[str, Any], idempotency_key: str) -> None:
    url, _ = request["args"]
    post_json(url.rsplit("/", 1)[0] + "/return", {"what": "car"}, idempotency_key)


def book_hotel(ctx: StepContext, nights: int) -> None:
    body = {"what": "hotel", "nights": nights}
    ctx.tool("hotel", post_json, f"{ctx.input['api']}/book", body, compensate="undo")


@trip.check
def hotel_confirmed(args: dict[str, Any]) -> dict[str, Any] | None:
    return None  # the hotel never confirms: the session keeps polling


@trip.step
def book(ctx: StepContext) -> Wait:
    if not ctx.input.get("no_hotel"):
        book_hotel(ctx, nights=2)
        ctx.state["nights"] = 2  # what tests/deploy_agents_v4.py migrates
    if ctx.input.get("car"):  # booked after the hotel: its undo comes first
        ctx.tool(
            "car", post_json, f"{ctx.input['api']}/rent", {"what": "car"}, compensate="return_car"
        )
    if ctx.input.get("watch"):
        return ctx.wait(Poll("hotel_confirmed", {}, every=0.3), then="confirmed")
    if ctx.input.get("gate_dir"):
        hold_while_flagged(ctx, "book")  # the test kills the worker here
    if ctx.input.get("payments_down"):
        raise TransientError("the payment service is down", retry_after=0.2)
    return ctx.wait(Signal("go"), then="pay")


@trip.step
def pay(ctx: StepContext) -> Complete:
    return Complete({"paid": True})


@trip.step
def confirmed(ctx: StepContext) -> Complete:
    return Complete({"confirmed": True})
