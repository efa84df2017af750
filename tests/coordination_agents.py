"""Agents of the coordination tests; worker subprocesses import this module."""

from __future__ import annotations

from typing import Any

from resumable import Agent, StepContext
from resumable.retries import RetryPolicy

# -- shared state --------------------------------------------------------------------

incrementer = Agent("shared_incrementer")


@incrementer.step
def increment(ctx: StepContext) -> Any:
    """One atomic increment of the shared counter per step, `times` steps."""
    name = ctx.input.get("counter", "counter")
    ctx.update_shared(name, lambda n: (n or 0) + 1)
    done = ctx.state.get("done", 0) + 1
    ctx.state["done"] = done
    if done >= ctx.input["times"]:
        return ctx.complete({"done": done})
    return "increment"


shared_failing = Agent("shared_failing", retry=RetryPolicy(max_attempts=1))


@shared_failing.step
def update_then_fail(ctx: StepContext) -> Any:
    """Updates a document, then fails: the update must not commit."""
    ctx.update_shared("never", lambda _: "written")
    raise RuntimeError("the step fails after its update")


shared_reader = Agent("shared_reader")


@shared_reader.step
def read_own_write(ctx: StepContext) -> Any:
    before = ctx.shared("doc", default={})
    preview = ctx.update_shared("doc", lambda d: {**(d or {}), ctx.input["key"]: True})
    return ctx.complete({"before": before, "preview": preview, "after": ctx.shared("doc")})
