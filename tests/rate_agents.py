"""Agents whose calls to a fake LLM share a rate limit (test_rate_limits.py).

The limit's numbers come from the worker's environment, so one module
serves every test: ``RATE_TEST_REQUESTS`` per ``RATE_TEST_PER`` seconds,
waiting in place up to ``RATE_TEST_IN_PLACE`` seconds. The tool turns the
fake's HTTP 429 into ``RateLimited`` with its Retry-After, as a user's
client of a real provider would.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from typing import Any

from resumable import Agent, Complete, RateLimit, RateLimited, StepContext

LLM = RateLimit(
    "llm",
    requests=int(os.environ.get("RATE_TEST_REQUESTS", "10")),
    per=float(os.environ.get("RATE_TEST_PER", "1")),
    tokens=int(os.environ["RATE_TEST_TOKENS"]) if os.environ.get("RATE_TEST_TOKENS") else None,
    cost=lambda answer: answer.get("tokens", 0),
    wait_in_place=float(os.environ.get("RATE_TEST_IN_PLACE", "10")),
)


def ask(url: str, session: str, idempotency_key: str = "") -> dict[str, Any]:
    """POST the prompt; a 429 becomes ``RateLimited`` (its Retry-After honoured)."""
    request = urllib.request.Request(
        url,
        data=json.dumps({"session": session, "key": idempotency_key}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as exc:
        if exc.code == 429:
            after = exc.headers.get("Retry-After")
            retry_after = float(after) if after else None
            raise RateLimited("the LLM said 429", retry_after=retry_after) from exc
        raise


async def ask_async(url: str, session: str, idempotency_key: str = "") -> dict[str, Any]:
    return await asyncio.to_thread(ask, url, session, idempotency_key)


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
