"""An incremental agent whose steps change a little of a larger state, for
tests/integration/test_live_state.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.checkpoints import Incremental
from resumable.errors import PermanentError
from resumable.retries import RetryPolicy
from tests.agents import hold_while_flagged

patched = Agent("live_patched", checkpoints=Incremental(snapshot_every=50))


def expected(n: int) -> dict[str, Any]:
    """The state after step `n`, computed independently of the agent."""
    state: dict[str, Any] = {"padding": "x" * 4000, "log": []}
    for step in range(1, n + 1):
        state["n"] = step
        state["flag"] = True if step % 2 else 1  # equal in Python, not in JSON
        state["log"].append({"step": step, "even": step % 2 == 0, "ratio": step / 2})
    return state


@patched.step
def grow(ctx: StepContext) -> str | Complete:
    if ctx.seq == ctx.input.get("hold_at"):
        hold_while_flagged(ctx, "grow")
    if ctx.seq == 1:
        ctx.state.update({"padding": "x" * 4000, "log": []})
    ctx.state["n"] = ctx.seq
    ctx.state["flag"] = True if ctx.seq % 2 else 1
    ctx.state["log"].append({"step": ctx.seq, "even": ctx.seq % 2 == 0, "ratio": ctx.seq / 2})
    if ctx.seq >= int(ctx.input["steps"]):
        return Complete({"n": ctx.seq})
    return "grow"


fragile = Agent(
    "live_fragile", checkpoints=Incremental(snapshot_every=50), retry=RetryPolicy(max_attempts=1)
)


@fragile.step
def note(ctx: StepContext) -> str | Complete:
    """Steps 1-3 change the state; step 4 fails until the flag file exists."""
    if ctx.seq == 1:
        ctx.state["padding"] = "x" * 4000
    if ctx.seq >= 4:
        if not Path(ctx.input["flag"]).exists():
            raise PermanentError("the flag is not set")
        return Complete({"notes": ctx.state["notes"], "patched": ctx.state.get("patched")})
    ctx.state.setdefault("notes", []).append(ctx.seq)
    return "note"
