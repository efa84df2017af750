"""Agents whose calls without side effects (``side_effects=False``) ride with
the step's next write; worker subprocesses import this module.

Each runs one step: ``think`` (no side effects), ``charge`` (an effect), then
``think`` again, each a POST to the test's fake API, which counts requests per
idempotency key. ``hold_at`` names a point to stop at (``after-think``,
``in-charge``, before its effect, ``after-charge``) while the test's hold
file exists; ``fail_once`` makes the first attempt fail after the first
answer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from tests.agents import post_json

_RETRY = RetryPolicy(max_attempts=3, min_delay=0.1, max_delay=0.2, jitter=False)


def _point(ctx: StepContext, name: str) -> None:
    """At point `name`: fail once, or hold while the hold file exists."""
    gate = Path(ctx.input["gate_dir"])
    if ctx.input.get("fail_once") == name and not (gate / "failed").exists():
        (gate / "failed").touch()
        raise RuntimeError(f"failing once at {name}")
    if ctx.input.get("hold_at") != name:
        return
    (gate / f"entered-{name}").touch()
    deadline = time.monotonic() + 120
    while (gate / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _outcome(idea: dict[str, Any], charge: dict[str, Any], final: dict[str, Any]) -> Complete:
    return Complete({"idea": idea["id"], "charge": charge["id"], "final": final["id"]})


def _charging(ctx: StepContext) -> Any:
    def charge(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        _point(ctx, "in-charge")
        return post_json(url, body, idempotency_key)

    return charge


def _acharging(ctx: StepContext) -> Any:
    async def charge(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        return await asyncio.to_thread(_charging(ctx), url, body, idempotency_key)

    return charge


answers = Agent("answers", retry=_RETRY)


@answers.step
def ask(ctx: StepContext) -> Complete:
    api = ctx.input["api"]
    idea = ctx.tool("think", post_json, f"{api}/think", {"q": 1}, side_effects=False)
    _point(ctx, "after-think")
    charge = ctx.tool("charge", _charging(ctx), f"{api}/charge", {"for": idea["id"]})
    _point(ctx, "after-charge")
    final = ctx.tool("think", post_json, f"{api}/think", {"q": 2}, side_effects=False)
    return _outcome(idea, charge, final)


async def apost(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    return await asyncio.to_thread(post_json, url, body, idempotency_key)


answers_async = Agent("answers_async", retry=_RETRY)


@answers_async.step(name="ask")
async def ask_async(ctx: StepContext) -> Complete:
    api = ctx.input["api"]
    idea = await ctx.tool("think", apost, f"{api}/think", {"q": 1}, side_effects=False)
    await asyncio.to_thread(_point, ctx, "after-think")
    charge = await ctx.tool("charge", _acharging(ctx), f"{api}/charge", {"for": idea["id"]})
    await asyncio.to_thread(_point, ctx, "after-charge")
    final = await ctx.tool("think", apost, f"{api}/think", {"q": 2}, side_effects=False)
    return _outcome(idea, charge, final)


gathered = Agent("gathered", retry=_RETRY)


@gathered.step(name="ask")
async def ask_many(ctx: StepContext) -> Complete:
    """Answers and effects gathered at once: every effect's claim returns only
    once the answers made before it are written."""
    api = ctx.input["api"]
    ideas = await asyncio.gather(
        *(ctx.tool("think", apost, f"{api}/think", {"q": i}, side_effects=False) for i in range(4))
    )
    charges = await asyncio.gather(
        *(ctx.tool("charge", apost, f"{api}/charge", {"for": idea["id"]}) for idea in ideas),
        *(
            ctx.tool("think", apost, f"{api}/think", {"q": 10 + i}, side_effects=False)
            for i in range(4)
        ),
    )
    return Complete(sorted(c["id"] for c in charges[:4]))


deferred = Agent("deferred", retry=_RETRY)


@deferred.step(name="ask")
async def ask_deferred(ctx: StepContext) -> Complete:
    """A charge whose result rides with the next call's claim (``in-second``:
    inside that call, before its effect)."""
    api = ctx.input["api"]
    first = await ctx.tool("charge", apost, f"{api}/charge", {"n": 1}, defer_record=True)
    await asyncio.to_thread(_point, ctx, "after-charge")
    second = await ctx.tool("charge", _asecond(ctx), f"{api}/charge", {"n": 2}, defer_record=True)
    return Complete([first["id"], second["id"]])


def _asecond(ctx: StepContext) -> Any:
    async def charge(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        await asyncio.to_thread(_point, ctx, "in-second")
        return await apost(url, body, idempotency_key)

    return charge
