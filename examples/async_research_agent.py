"""The research agent with ``async def`` steps: the same loop as
``research_agent.py`` (an LLM with a web tool, then a human approval), its
LLM calls made with the ``openai`` package's ``AsyncOpenAI`` client.

An async step awaits on the worker's event loop, so one worker process keeps
hundreds of such sessions waiting on their LLM at once (up to
``RESUMABLE_MAX_INFLIGHT``) instead of one per thread. Everything that makes
the sync version survive a crash holds unchanged: ``await ctx.tool("llm",
...)`` records the completion the moment it arrives, so a worker killed
afterwards costs nothing: the next one replays the step and gets the
recorded answer instead of paying for another. The sync steps it shares with
``research_agent.py`` (``start``, ``ask_approval``, ``review``) run on worker
threads, in the same agent.

Configuration as for ``research_agent.py``: ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``OPENAI_MODEL``. Try it against the fake API::

    python examples/fake_llm.py --port 8765
    OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=sk-fake \\
        resumable worker --agents examples.async_research_agent
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import openai
from openai import AsyncOpenAI

from examples import research_agent
from examples.research_agent import TOOLS
from resumable import Agent, Complete, PermanentError, RetryPolicy, StepContext, TransientError

async_research = Agent(
    "async_research",
    start="start",
    description="The research agent with async LLM calls (AsyncOpenAI).",
    retry=RetryPolicy(max_attempts=5, min_delay=1.0, max_delay=60.0),
)


async def chat(
    model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """One chat completion through AsyncOpenAI; the assistant message as a dict.

    The client's own retries are off: a failed call is the step's failure,
    retried by the session's policy with the LLM answers it already has kept.
    """
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        raise PermanentError("OPENAI_API_KEY is not set on the worker")
    base_url = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
    async with AsyncOpenAI(api_key=key, base_url=base_url, max_retries=0, timeout=120) as llm:
        try:
            completion = await llm.chat.completions.create(
                model=model,
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
            )
        except (
            openai.APIConnectionError,
            openai.RateLimitError,
            openai.InternalServerError,
        ) as exc:
            raise TransientError(f"LLM API: {exc}") from exc
        except openai.APIStatusError as exc:
            raise PermanentError(f"LLM API answered {exc.status_code}: {exc.message}") from exc
    message = completion.choices[0].message
    kept: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        kept["tool_calls"] = [call.model_dump(mode="json") for call in message.tool_calls]
    return kept


async def fetch_url(url: str) -> dict[str, Any]:
    """The tool the model may call. A read: harmless if a crash repeats it."""
    if not url.startswith(("http://", "https://")):
        return {"url": url, "error": "only http(s) URLs can be fetched"}
    try:
        async with httpx.AsyncClient(timeout=30, follow_redirects=True) as http:
            response = await http.get(url)
    except httpx.HTTPError as exc:
        return {"url": url, "error": str(exc)}
    return {"url": url, "status": response.status_code, "text": response.text[:8000]}


async def run_tool(ctx: StepContext, call: dict[str, Any]) -> dict[str, Any]:
    """Run one tool call the model asked for, as an idempotent ``ctx.tool`` call."""
    function = call.get("function", {})
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError:
        return {"error": "the arguments were not valid JSON"}
    if function.get("name") == "fetch_url" and isinstance(arguments.get("url"), str):
        result: dict[str, Any] = await ctx.tool("fetch_url", fetch_url, arguments["url"])
        return result
    return {"error": f"unknown tool or arguments: {function.get('name')!r}"}


# The sync steps are the sync agent's own: one agent mixes both kinds freely.
async_research.step(research_agent.start, name="start")
async_research.step(research_agent.ask_approval, name="ask_approval")
async_research.step(research_agent.review, name="review")


@async_research.step
async def think(ctx: StepContext) -> str | Complete:
    """One turn of the loop: ask the model; run the tools it wants, or stop with a draft."""
    conversation: list[dict[str, Any]] = ctx.state["conversation"]
    if ctx.state["llm_calls"] >= int(ctx.input.get("max_llm_calls", 12)):
        return Complete({"status": "gave_up", "llm_calls": ctx.state["llm_calls"]})
    message = await ctx.tool("llm", chat, ctx.state["model"], conversation, TOOLS)
    ctx.state["llm_calls"] += 1
    conversation.append(message)
    tool_calls = message.get("tool_calls") or []
    for call in tool_calls:
        result = await run_tool(ctx, call)
        conversation.append(
            {"role": "tool", "tool_call_id": call.get("id"), "content": json.dumps(result)}
        )
    if tool_calls:
        return "think"
    ctx.state["draft"] = message.get("content") or ""
    return "ask_approval"
