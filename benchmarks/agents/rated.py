"""Agents for ``benchmarks/rate_limits.py``; the worker subprocesses import them.

All three have one ``async def`` step making one call to the fake LLM
(``benchmarks/harness/fake_llm.py``, served by the benchmark process)
through ``ctx.tool``, and completing with its answer:

- ``bench_rated``: the call takes a turn of ``RateLimit("llm",
  requests=N, per=1, wait_in_place=W)``, N and W from ``BENCH_RATE_REQUESTS``
  and ``BENCH_RATE_IN_PLACE`` in the worker's environment (the benchmark
  passes its ``--rate`` and ``--wait-in-place``; W defaults to RateLimit's 10 s);
- ``bench_unrated``: the same call with no limit, the baseline: the
  provider's 429 (``RateLimited``) is then a ``TransientError``, retried
  with attempts under the default policy;
- ``bench_rated_loose``: a limit of a million calls a second
  (``"llm-loose"``, its own line), which no run reaches: what taking a
  turn costs when it never waits.

The tool POSTs with ``urllib`` on ``asyncio.to_thread`` (no new dependency;
the loop's default executor, a new connection per call, the same for every
agent) and turns an HTTP 429 into ``RateLimited`` with its Retry-After, as
a user's client of a real provider would.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from benchmarks.harness import fake_llm
from resumable import Agent, Complete, RateLimit, StepContext

RATED = "bench_rated"
UNRATED = "bench_unrated"
LOOSE = "bench_rated_loose"
REQUESTS_ENV = "BENCH_RATE_REQUESTS"
IN_PLACE_ENV = "BENCH_RATE_IN_PLACE"
# Far above anything a benchmark run reaches, and still a spacing Redis
# counts (one microsecond: a limit of 10**9 a second would round it to 0).
LOOSE_REQUESTS = 1_000_000

LLM = RateLimit(
    "llm",
    requests=int(os.environ.get(REQUESTS_ENV, "50")),
    per=1,
    wait_in_place=float(os.environ.get(IN_PLACE_ENV, "10")),
)
LLM_LOOSE = RateLimit("llm-loose", requests=LOOSE_REQUESTS, per=1)


def _post(url: str, session: str, idempotency_key: str) -> dict[str, Any]:
    return fake_llm.ask(url, {"session": session, "key": idempotency_key})


async def ask(url: str, session: str, idempotency_key: str = "") -> dict[str, Any]:
    """POST the prompt; a 429 becomes ``RateLimited`` (its Retry-After honoured)."""
    return await asyncio.to_thread(_post, url, session, idempotency_key)


rated = Agent(RATED, rate_limits=[LLM], description="Benchmark agent: rate-limited LLM call.")
unrated = Agent(UNRATED, description="Benchmark agent: the same call, no rate limit.")
loose = Agent(
    LOOSE, rate_limits=[LLM_LOOSE], description="Benchmark agent: a limit that never binds."
)


@rated.step
async def chat(ctx: StepContext) -> Complete:
    answer = await ctx.tool("chat", ask, ctx.input["llm"], str(ctx.session_id), rate_limit="llm")
    return Complete(answer)


@unrated.step(name="chat")
async def chat_unrated(ctx: StepContext) -> Complete:
    answer = await ctx.tool("chat", ask, ctx.input["llm"], str(ctx.session_id))
    return Complete(answer)


@loose.step(name="chat")
async def chat_loose(ctx: StepContext) -> Complete:
    answer = await ctx.tool(
        "chat", ask, ctx.input["llm"], str(ctx.session_id), rate_limit="llm-loose"
    )
    return Complete(answer)
