"""Agents whose calls to a fake LLM share a rate limit (test_rate_limits.py).

The limit's numbers come from the worker's environment, so one module
serves every test: ``RATE_TEST_REQUESTS`` per ``RATE_TEST_PER`` seconds,
waiting in place up to ``RATE_TEST_IN_PLACE`` seconds. The tool turns the
fake's HTTP 429 into ``RateLimited`` with its Retry-After, as a user's
client of a real provider would.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from benchmarks.harness import fake_llm
from resumable import Agent, Complete, RateLimit, RetryPolicy, StepContext

LLM = RateLimit(
    "llm",
    requests=int(os.environ.get("RATE_TEST_REQUESTS", "10")),
    per=float(os.environ.get("RATE_TEST_PER", "1")),
    tokens=int(os.environ["RATE_TEST_TOKENS"]) if os.environ.get("RATE_TEST_TOKENS") else None,
    cost=lambda answer: answer.get("tokens", 0),
    wait_in_place=float(os.environ.get("RATE_TEST_IN_PLACE", "10")),
    estimate=float(os.environ["RATE_TEST_ESTIMATE"])
    if os.environ.get("RATE_TEST_ESTIMATE")
    else None,
)


def ask(url: str, session: str, idempotency_key: str = "", part: int = 0) -> dict[str, Any]:
    """POST the prompt; a 429 becomes ``RateLimited`` (its Retry-After honoured)."""
    return fake_llm.ask(url, {"session": session, "key": idempotency_key, "part": part}, timeout=10)


async def ask_async(
    url: str, session: str, idempotency_key: str = "", part: int = 0
) -> dict[str, Any]:
    return await asyncio.to_thread(ask, url, session, idempotency_key, part)


rated = Agent("rated", rate_limits=[LLM])


@rated.step
def chat(ctx: StepContext) -> Complete:
    answer = ctx.tool("chat", ask, ctx.input["llm"], str(ctx.session_id), rate_limit="llm")
    return Complete(answer)


rated_async = Agent("rated-async", rate_limits=[LLM])


@rated_async.step
async def achat(ctx: StepContext) -> Complete:
    answer = await ctx.tool(
        "chat", ask_async, ctx.input["llm"], str(ctx.session_id), rate_limit="llm"
    )
    return Complete(answer)


rated_gather = Agent("rated-gather", rate_limits=[LLM])


def _calls(ctx: StepContext) -> list[Any]:
    url, session = ctx.input["llm"], str(ctx.session_id)
    return [
        ctx.tool("chat", ask_async, url, session, part=part, rate_limit="llm")
        for part in range(int(ctx.input.get("calls", 3)))
    ]


@rated_gather.step
async def gathered(ctx: StepContext) -> Complete:
    """Calls made at once: one may stop the step for a far turn while the
    others wait in place for theirs."""
    return Complete(await asyncio.gather(*_calls(ctx)))


rated_group = Agent("rated-group", rate_limits=[LLM])


@rated_group.step
async def grouped(ctx: StepContext) -> Complete:
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(call) for call in _calls(ctx)]
    return Complete([task.result() for task in tasks])


rated_timed = Agent("rated-timed", rate_limits=[LLM], retry=RetryPolicy(time_limit=2.0))


@rated_timed.step
def timed(ctx: StepContext) -> Complete:
    """A turn further off than the step's time limit allows is not waited
    for in place (the step would time out): the session goes away for it."""
    answer = ctx.tool("chat", ask, ctx.input["llm"], str(ctx.session_id), rate_limit="llm")
    return Complete(answer)


rated_mixed = Agent("rated-mixed", rate_limits=[LLM])


@rated_mixed.step
async def mixed(ctx: StepContext) -> Complete:
    """A sync tool in an async step runs on the event loop: its call never
    sleeps there for a turn, its session goes away instead."""
    answer = ctx.tool("chat", ask, ctx.input["llm"], str(ctx.session_id), rate_limit="llm")
    return Complete(answer)
