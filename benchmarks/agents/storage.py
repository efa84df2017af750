"""The agent of ``benchmarks/storage.py``; its worker imports it.

A session runs ``input["steps"]`` steps. Each step appends ``input["grow"]``
characters of fresh text to ``state["messages"]`` (the way a conversation
grows), makes ``input["calls"]`` recorded tool calls, and names the next
step. The last one completes, or, with ``input["end"] == "callback"``,
suspends on a callback no one answers: a session waiting for a person.
``bench_storage_incremental`` runs the same steps with incremental
checkpoints.

The text is random bytes written in hexadecimal, different in every session
and step: PostgreSQL's compression (pglz, which finds repeats and does not
code entropy) leaves it as it is, so the sizes measured are what text that
does not compress takes; prose or JSON that repeats itself takes less.
"""

from __future__ import annotations

import random
from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.checkpoints import Incremental
from resumable.waits import Wait

AGENT_NAME = "bench_storage"
INCREMENTAL_AGENT_NAME = "bench_storage_incremental"


def _lookup(query: str, step: int) -> dict[str, Any]:
    """What a tool call returns: small, like most tools' answers."""
    return {"query": query, "step": step, "found": 3}


def work(ctx: StepContext) -> str | Complete | Wait:
    step = int(ctx.state.get("step", 0)) + 1
    ctx.state["step"] = step
    rng = random.Random(f"{ctx.session_id}:{step}")
    grow = int(ctx.input.get("grow", 0))
    messages = list(ctx.state.get("messages", []))
    messages.append(rng.randbytes(grow // 2).hex())
    ctx.state["messages"] = messages
    for index in range(int(ctx.input.get("calls", 0))):
        ctx.tool("lookup", _lookup, f"q{step}.{index}", step)
    if step < int(ctx.input["steps"]):
        return "work"
    if ctx.input.get("end") == "callback":
        return ctx.wait(ctx.callback("answer"), then="answered")
    return Complete({"steps": step})


def answered(ctx: StepContext) -> Complete:
    return Complete({"steps": ctx.state.get("step", 0)})


# The same steps twice: checkpointed the default way (each step's row holds
# the whole state) and incrementally (a JSON Patch a step, a whole state
# every 20th).
storage = Agent(AGENT_NAME, description="Benchmark agent: state that grows a step at a time.")
incremental = Agent(
    INCREMENTAL_AGENT_NAME,
    checkpoints=Incremental(),
    description="Benchmark agent: state that grows a step at a time, checkpointed as patches.",
)
for _agent in (storage, incremental):
    _agent.step(work, name="work")
    _agent.step(answered, name="answered")
