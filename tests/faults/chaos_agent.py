"""The agent ``tests/faults/chaos.py`` runs under faults; worker subprocesses import it.

Each step makes one tool call against the external ledger (a real HTTP server
in the chaos run's process) and then works for ``input["work_ms"]`` so that kills
land inside steps, between the effect and the commit. The ledger is told which
logical call it is (session and step number) beside the idempotency key, so the
run can count effects per logical call both raw and deduplicated by key.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.checkpoints import Incremental

AGENT_NAME = "chaos"
INCREMENTAL_AGENT_NAME = "chaos_incremental"
ASYNC_AGENT_NAME = "chaos_async"

chaos = Agent(AGENT_NAME, description="Chaos agent: one ledger call per step.")
# The same steps with incremental checkpoints and a padded state, so most steps
# append a patch to the session row instead of rewriting it (chaos.py --incremental).
chaos_incremental = Agent(
    INCREMENTAL_AGENT_NAME,
    checkpoints=Incremental(snapshot_every=5),
    description="Chaos agent: one ledger call per step, incremental checkpoints.",
)


def record_effect(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """The side effect: POST to the ledger, passing our idempotency key on."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def announce(url: str, body: dict[str, Any]) -> None:
    """Tell the ledger a step attempt started (not an effect: no key, not deduped)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


def work(ctx: StepContext) -> str | Complete:
    n = int(ctx.state.get("n", 0)) + 1
    if ctx.input.get("padding"):
        ctx.state.setdefault("padding", "p" * int(ctx.input["padding"]))
    if ctx.input.get("announce"):
        announce(ctx.input["announce"], {"session": str(ctx.session_id), "n": n})
    receipt = ctx.tool(
        "ledger", record_effect, ctx.input["ledger"], {"session": str(ctx.session_id), "n": n}
    )
    time.sleep(float(ctx.input.get("work_ms", 0)) / 1000)
    ctx.state["n"] = n
    ctx.state.setdefault("receipts", []).append(receipt["id"])
    if n >= int(ctx.input["steps"]):
        return Complete({"n": n})
    return "work"


chaos.step(work, name="work")
chaos_incremental.step(work, name="work")

# The same agent with an async step on the worker's event loop (chaos.py --async):
# it works first and returns right after its call, so the call's result is
# usually recorded with the step's commit (queue/tool_calls.py).
chaos_async = Agent(ASYNC_AGENT_NAME, description="Chaos agent: async, one ledger call a step.")


async def arecord_effect(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    return await asyncio.to_thread(record_effect, url, body, idempotency_key)


@chaos_async.step(name="work")
async def awork(ctx: StepContext) -> str | Complete:
    n = int(ctx.state.get("n", 0)) + 1
    if ctx.input.get("announce"):
        await asyncio.to_thread(
            announce, ctx.input["announce"], {"session": str(ctx.session_id), "n": n}
        )
    await asyncio.sleep(float(ctx.input.get("work_ms", 0)) / 1000)
    receipt = await ctx.tool(
        "ledger", arecord_effect, ctx.input["ledger"], {"session": str(ctx.session_id), "n": n}
    )
    ctx.state["n"] = n
    ctx.state.setdefault("receipts", []).append(receipt["id"])
    if n >= int(ctx.input["steps"]):
        return Complete({"n": n})
    return "work"
