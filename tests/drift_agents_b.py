"""Another build of the unversioned `drift` agent (tests/drift_agents_a.py):
the same steps and one more, so it runs the same sessions from other code."""

from __future__ import annotations

from resumable import Agent, Complete, StepContext
from resumable.waits import Signal, Wait

drift = Agent("drift")


@drift.step
def ask(ctx: StepContext) -> Wait:
    return ctx.wait(Signal("go"), then="finish")


@drift.step
def finish(ctx: StepContext) -> Complete:
    return Complete({"done": True, "build": "b"})


@drift.step
def audit(ctx: StepContext) -> Complete:
    return Complete({"audited": True})
