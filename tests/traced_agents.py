"""The demo-like story the tracing test follows: a tool call, a callback
wait, then a step the test kills its worker in (held while a file exists)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from resumable import Agent, Complete, StepContext, Wait
from tests.agents import hold_while_flagged

traced = Agent("traced")


def look_up(order: str, idempotency_key: str) -> dict[str, Any]:
    return {"order": order, "total": 42, "key_seen": bool(idempotency_key)}


def refuse(order: str) -> None:
    raise ValueError(f"no such order {order}")


@traced.step
def plan(ctx: StepContext) -> Wait:
    ctx.state["order"] = ctx.tool("look_up", look_up, ctx.input["order"])
    if ctx.input.get("failing_tool"):
        try:
            ctx.tool("refuse", refuse, ctx.input["order"])
        except ValueError:
            ctx.state["refused"] = True
    ctx.log.info("planned order %s", ctx.input["order"], extra={"action": "planned"})
    callback = ctx.callback("approval")
    ctx.state["callback_url"] = callback.url
    return ctx.wait(callback, then="work")


@traced.step
def work(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    if ctx.input.get("gate_dir"):
        hold_while_flagged(ctx, "work")
    (Path(ctx.input["gate_dir"]) / "worked").touch() if ctx.input.get("gate_dir") else None
    logging.getLogger("tests.traced").debug("work done")
    return Complete({"approved": ctx.wake.payload})
