"""A research agent: an LLM in a loop, with a tool and a human approval.

The model (any OpenAI-compatible chat API) reads the question, may ask for
the ``fetch_url`` tool, and writes a report; a human then approves it or sends
it back with feedback, and the loop goes round again. Input::

    {"question": "...", "model": "gpt-4o-mini", "max_llm_calls": 12,
     "approval_timeout": 604800}

Configuration, read by the worker that makes the calls (the key never enters
the session's state or the tool-call record)::

    OPENAI_BASE_URL   default https://api.openai.com/v1
    OPENAI_API_KEY    required
    OPENAI_MODEL      default gpt-4o-mini (when the input names no model)

Why it survives anything:

- Each LLM call is a ``ctx.tool`` call. Its answer is recorded the moment it
  arrives, so a worker that dies afterwards costs nothing: the next worker
  replays the step and gets the recorded answer instead of paying for (and
  possibly getting a different) completion.
- The conversation lives in ``ctx.state``, committed after every step.
- Waiting for the human is a ``Signal`` wait: the session is ``suspended`` and
  holds no worker, for minutes or for a week. Approve with
  ``POST /v1/sessions/{id}/signals/approval`` and ``{"approved": true, "by": "..."}``,
  or send it back with ``{"approved": false, "feedback": "..."}``.
- Rate limits and server errors are ``TransientError``: the step is retried
  with backoff (honouring ``Retry-After``); other client errors fail it for good.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from resumable import (
    Agent,
    Complete,
    PermanentError,
    RetryPolicy,
    Signal,
    StepContext,
    TransientError,
    Wait,
)

research = Agent(
    "research",
    description="Answers a question with an LLM and a web tool; a human approves the report.",
    retry=RetryPolicy(max_attempts=5, min_delay=1.0, max_delay=60.0),
)

SYSTEM_PROMPT = (
    "You are a careful research assistant. Use the fetch_url tool to read sources "
    "before answering, then write a short report that cites them."
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "fetch_url",
            "description": "Fetch a web page and return its text.",
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string", "description": "An http(s) URL."}},
                "required": ["url"],
            },
        },
    }
]
_WEEK = 7 * 24 * 3600


def chat(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """One chat completion; returns the assistant message (role, content, tool_calls)."""
    base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        raise PermanentError("OPENAI_API_KEY is not set on the worker")
    try:
        response = httpx.post(
            f"{base}/chat/completions",
            json={"model": model, "messages": messages, "tools": tools},
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )
    except httpx.TransportError as exc:
        raise TransientError(f"LLM API unreachable: {exc}") from exc
    if response.status_code == 429 or response.status_code >= 500:
        retry_after = response.headers.get("Retry-After")
        raise TransientError(
            f"LLM API answered {response.status_code}",
            retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
        )
    if response.status_code >= 400:
        raise PermanentError(f"LLM API answered {response.status_code}: {response.text[:300]}")
    message: dict[str, Any] = response.json()["choices"][0]["message"]
    kept = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        kept["tool_calls"] = message["tool_calls"]
    return kept


def fetch_url(url: str) -> dict[str, Any]:
    """The tool the model may call. A read: harmless if a crash repeats it."""
    if not url.startswith(("http://", "https://")):
        return {"url": url, "error": "only http(s) URLs can be fetched"}
    try:
        response = httpx.get(url, timeout=30, follow_redirects=True)
    except httpx.HTTPError as exc:
        return {"url": url, "error": str(exc)}
    return {"url": url, "status": response.status_code, "text": response.text[:8000]}


def run_tool(ctx: StepContext, call: dict[str, Any]) -> dict[str, Any]:
    """Run one tool call the model asked for, as an idempotent ``ctx.tool`` call."""
    function = call.get("function", {})
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError:
        return {"error": "the arguments were not valid JSON"}
    if function.get("name") == "fetch_url" and isinstance(arguments.get("url"), str):
        result: dict[str, Any] = ctx.tool("fetch_url", fetch_url, arguments["url"])
        return result
    return {"error": f"unknown tool or arguments: {function.get('name')!r}"}


@research.step
def start(ctx: StepContext) -> str:
    question = str(ctx.input["question"])
    ctx.state["task"] = question
    ctx.state["model"] = ctx.input.get("model") or os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    ctx.state["conversation"] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    ctx.state["llm_calls"] = 0
    return "think"


@research.step
def think(ctx: StepContext) -> str | Complete:
    """One turn of the loop: ask the model; run the tools it wants, or stop with a draft."""
    conversation: list[dict[str, Any]] = ctx.state["conversation"]
    if ctx.state["llm_calls"] >= int(ctx.input.get("max_llm_calls", 12)):
        return Complete({"status": "gave_up", "llm_calls": ctx.state["llm_calls"]})
    message = ctx.tool("llm", chat, ctx.state["model"], conversation, TOOLS)
    ctx.state["llm_calls"] += 1
    conversation.append(message)
    tool_calls = message.get("tool_calls") or []
    for call in tool_calls:
        result = run_tool(ctx, call)
        conversation.append(
            {"role": "tool", "tool_call_id": call.get("id"), "content": json.dumps(result)}
        )
    if tool_calls:
        return "think"
    ctx.state["draft"] = message.get("content") or ""
    return "ask_approval"


@research.step
def ask_approval(ctx: StepContext) -> Wait:
    timeout = float(ctx.input.get("approval_timeout", _WEEK))
    return ctx.wait(Signal("approval"), then="review", timeout=timeout)


@research.step
def review(ctx: StepContext) -> str | Complete:
    wake = ctx.wake
    if wake is None or wake.timed_out:
        return Complete({"status": "expired", "draft": ctx.state["draft"]})
    decision = wake.payload if isinstance(wake.payload, dict) else {}
    if decision.get("approved") is True:
        return Complete(
            {
                "status": "approved",
                "report": ctx.state["draft"],
                "approved_by": decision.get("by"),
                "llm_calls": ctx.state["llm_calls"],
            }
        )
    feedback = str(decision.get("feedback") or "Please revise the report.")
    ctx.state["conversation"].append({"role": "user", "content": f"Reviewer: {feedback}"})
    return "think"
