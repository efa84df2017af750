"""Agents the API contract tests run (worker subprocesses import this module).

``support`` is the agent the OpenAPI document's examples name: it waits for an
``approval`` signal, so sessions created from the examples have something to
receive, cancel and read. ``fragile`` (from ``tests.agents``) fails for good
when its flag file is missing, which makes dead letters.
"""

from __future__ import annotations

from resumable import Agent, Complete, Signal, StepContext, Wait
from tests.agents import fragile

__all__ = ["fragile", "support"]

support = Agent("support")


@support.step
def ask_approval(ctx: StepContext) -> Wait:
    return ctx.wait(Signal("approval"), then="finish", timeout=3600)


@support.step
def finish(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete({"woke_by": ctx.wake.kind, "payload": ctx.wake.payload})
