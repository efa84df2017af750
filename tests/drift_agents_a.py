"""The unversioned `drift` agent as one build deploys it; tests/drift_agents_b.py
is another build of it (one more step), for the test of live workers that
disagree on an unversioned agent's code (tests/integration/test_versions.py)."""

from __future__ import annotations

from resumable import Agent, Complete, StepContext
from resumable.waits import Signal, Wait

drift = Agent("drift")


@drift.step
def ask(ctx: StepContext) -> Wait:
    return ctx.wait(Signal("go"), then="finish")


@drift.step
def finish(ctx: StepContext) -> Complete:
    return Complete({"done": True})
