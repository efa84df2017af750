"""The `roll` agent, version 1, for the rolling-deploy test in
tests/integration/test_versions.py: each step posts which version ran it;
version 2 is tests/deploy_agents_roll_v2.py (no migration between them, so a
session runs only on workers of the version it started on)."""

from __future__ import annotations

from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from resumable.waits import Signal, Wait
from tests.agents import hold_while_flagged, post_json

VERSION = 1


def build(version: int) -> Agent:
    roll = Agent(
        "roll", version=version, retry=RetryPolicy(max_attempts=100, min_delay=0.1, max_delay=0.2)
    )

    def mark(ctx: StepContext, step: str) -> None:
        body: dict[str, Any] = {"what": step, "version": version, "session": str(ctx.session_id)}
        ctx.tool(step, post_json, f"{ctx.input['api']}/{step}", body)

    @roll.step
    def start(ctx: StepContext) -> Wait:
        mark(ctx, "start")
        return ctx.wait(Signal("go"), then="finish")

    @roll.step
    def finish(ctx: StepContext) -> Complete:
        mark(ctx, "finish")
        hold_while_flagged(ctx, f"finish-v{version}")  # the test SIGKILLs workers here
        return Complete({"version": version})

    return roll


roll = build(VERSION)
