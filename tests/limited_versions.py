"""Two versions of one agent (test_concurrency.py): version 1 has no
limit; version 2, deployed while a version-1 session waits, limits the
agent to one run at a time and takes over version 1's sessions."""

from __future__ import annotations

import os
from typing import Any

from resumable import Agent, Complete, Concurrency, Signal, StepContext, Wait

VERSION = int(os.environ.get("LIMITED_AGENT_VERSION", "1"))

migrating = Agent(
    "migrating",
    version=VERSION,
    concurrency=Concurrency(limit=1) if VERSION >= 2 else None,
)


@migrating.step
def ask(ctx: StepContext) -> Wait:
    return ctx.wait(Signal("go"), then="answer")


@migrating.step
def answer(ctx: StepContext) -> Complete:
    return Complete({"version": ctx.version, "migrated": ctx.state.get("migrated", False)})


if VERSION >= 2:

    @migrating.migrate(from_version=1)
    def from_v1(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "migrated": True}
