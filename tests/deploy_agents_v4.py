"""The `trip` agent's first versioned release (version 2), taking over the
unversioned sessions of tests/deploy_agents_v1.py: `pay` is renamed `charge`
(the old name stays an alias, so sessions waiting at `pay` run `charge`),
the state moves from ``{"nights": n}`` to ``{"booking": {"nights": n}}``
(``@trip.migrate(from_version=0)``), and charging in euros is a patch that
only sessions started on version 2 take (``ctx.patched("euros")``)."""

from __future__ import annotations

from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from resumable.waits import Signal, Wait
from tests.agents import post_json
from tests.deploy_agents_v1 import undo

trip = Agent(
    "trip",
    version=2,
    patches={"euros": 2},
    retry=RetryPolicy(max_attempts=1000, min_delay=0.2, max_delay=0.3, compensation_attempts=3),
)
trip.compensation(undo)


@trip.migrate(from_version=0)
def booking_from_nights(state: dict[str, Any]) -> dict[str, Any]:
    return {"booking": {"nights": state.pop("nights")}, **state}


@trip.step
def book(ctx: StepContext) -> Wait:
    body = {"what": "hotel", "nights": 2}
    ctx.tool("hotel", post_json, f"{ctx.input['api']}/book", body, compensate="undo")
    ctx.state["booking"] = {"nights": 2}
    return ctx.wait(Signal("go"), then="charge")


@trip.step(aliases=["pay"])
def charge(ctx: StepContext) -> Complete:
    currency = "EUR" if ctx.patched("euros") else "USD"
    nights = ctx.state["booking"]["nights"]  # a KeyError if the state was not migrated
    body = {"what": "charge", "nights": nights, "currency": currency}
    ctx.tool("charge", post_json, f"{ctx.input['api']}/charge", body)
    return Complete({"paid": True, "currency": currency, "started_on": ctx.version})
