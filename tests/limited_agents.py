"""Agents with concurrency limits (test_concurrency.py).

Each step reports to a turnstile (a small HTTP server in the test) when it
enters and leaves, so the test counts how many sessions of a key were
inside at once; a step holds while its gate file exists, so a test can
kill a worker with a slot in hand.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from resumable import Agent, Complete, Concurrency, Signal, StepContext, Wait


def _report(url: str, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def _inside(ctx: StepContext) -> None:
    """Enter the turnstile, stay a while (and while the gate file is there), leave."""
    body = {"key": str(ctx.input.get("tenant")), "session": str(ctx.session_id)}
    _report(ctx.input["turnstile"], "/enter", body)
    time.sleep(float(ctx.input.get("seconds", 0.2)))
    hold = ctx.input.get("hold")
    while hold and Path(hold).exists():
        time.sleep(0.05)
    _report(ctx.input["turnstile"], "/leave", body)


per_tenant = Agent("per-tenant", concurrency=Concurrency(limit=2, key="tenant"))


@per_tenant.step
def work(ctx: StepContext) -> Complete:
    _inside(ctx)
    return Complete({"tenant": ctx.input.get("tenant")})


one_at_a_time = Agent("one-at-a-time", concurrency=Concurrency(limit=1))


@one_at_a_time.step
def first(ctx: StepContext) -> str | Wait:
    _inside(ctx)
    if ctx.input.get("wait_for_signal"):
        return ctx.wait(Signal("go"), then="last")
    return "last"


@one_at_a_time.step
def last(ctx: StepContext) -> Complete:
    return Complete({"done": True})


# Only its middle step is limited: one session per tenant calls at a time.
step_limited = Agent("step-limited")


@step_limited.step
def prepare(ctx: StepContext) -> str:
    ctx.state["prepared"] = True
    return "call"


@step_limited.step(concurrency=Concurrency(limit=1, key="tenant"))
def call(ctx: StepContext) -> str:
    _inside(ctx)
    return "finish"


@step_limited.step
def finish(ctx: StepContext) -> Complete:
    return Complete({"prepared": ctx.state["prepared"]})
