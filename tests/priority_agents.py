"""Agents for the priority tests (test_priorities.py): each run's step
reports the lane (queue) of the message that ran it, so a test sees which
lane a start, a retry's delayed message, a yield or a child went on."""

from __future__ import annotations

import time
from pathlib import Path

from dramatiq.middleware import CurrentMessage

from resumable import Agent, Children, Complete, RetryPolicy, StepContext, TransientError, Wait


def _lane() -> str:
    message = CurrentMessage.get_current_message()
    return "" if message is None else message.queue_name


ordered = Agent("ordered")


@ordered.step
def run(ctx: StepContext) -> Complete:
    time.sleep(float((ctx.input or {}).get("seconds", 0.0)))
    return Complete({"lane": _lane()})


# Fails its first attempt: the retry's delayed message must come back on its lane.
retried = Agent("retried", retry=RetryPolicy(max_attempts=3, min_delay=0.2, max_delay=0.3))


@retried.step
def attempt(ctx: StepContext) -> Complete:
    marker = Path(ctx.input["marker"])
    if not marker.exists():  # the first attempt
        marker.write_text(_lane())
        raise TransientError("first attempt fails")
    return Complete({"first": marker.read_text(), "lane": _lane()})


# Spawns a child (which has its parent's priority) and waits for it.
parent = Agent("parent")


@parent.step
def spawn(ctx: StepContext) -> Wait:
    child = ctx.spawn("ordered", {})
    return ctx.wait(Children([child]), then="done")


@parent.step
def done(ctx: StepContext) -> Complete:
    return Complete({"lane": _lane()})
