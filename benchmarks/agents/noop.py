"""A no-op agent for ``benchmarks/steps.py`` and ``cold_start.py``; their workers import it.

A session runs ``input["steps"]`` steps. Each step only increments a counter in
the state and names the next step; the one that reaches the count returns
``Complete``. The steps are distinct functions (``step_000``, ``step_001``, ...,
wrapping round after the last), so every step is a real "return the next step"
transition, however many steps a session runs.
"""

from __future__ import annotations

from resumable import Agent, Complete, StepContext
from resumable.agent import StepFunction

AGENT_NAME = "bench_noop"
STEP_NAMES = [f"step_{index:03d}" for index in range(100)]

noop = Agent(AGENT_NAME, description="Benchmark agent: every step only counts.")


def _make_step(following: str) -> StepFunction:
    def step(ctx: StepContext) -> str | Complete:
        counter = int(ctx.state.get("counter", 0)) + 1
        ctx.state["counter"] = counter
        if counter >= int(ctx.input["steps"]):
            return Complete({"steps": counter})
        return following

    return step


for _index, _name in enumerate(STEP_NAMES):
    noop.step(_make_step(STEP_NAMES[(_index + 1) % len(STEP_NAMES)]), name=_name)
