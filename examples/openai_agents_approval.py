"""An OpenAI Agents SDK agent on resumable: fetching a page needs a human's
approval, and the session waits for it holding no worker.

The agent is an ordinary ``agents.Agent`` with a ``needs_approval`` tool.
``durable(...)`` turns it into a resumable agent: each model request and tool
call is recorded, the conversation is committed after each model turn, and
an interruption suspends the session (its ``RunState`` in the session's
state) until a signal approves or rejects each call. It talks to any
OpenAI-compatible Chat Completions API (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``OPENAI_MODEL``); the tests run the same integration against a fake one
(``tests/framework_fake_openai.py``)::

    export OPENAI_API_KEY=sk-...
    export RESUMABLE_API_TOKENS=dev-token
    .venv/bin/resumable dev --agents examples.openai_agents_approval &
    ID=$(.venv/bin/resumable enqueue openai_research --agents examples.openai_agents_approval \\
        --input '{"prompt": "How do durable agents survive crashes?"}')
    .venv/bin/resumable sessions show "$ID"      # suspended; state.pending lists fetch_url
    curl -X POST -H "Authorization: Bearer dev-token" -H 'Content-Type: application/json' \\
        -d '{"approved": true}' http://127.0.0.1:8000/v1/sessions/$ID/signals/approval
    .venv/bin/resumable sessions show "$ID"      # completed, with the report
"""

from __future__ import annotations

import os

import httpx
from agents import Agent, Model, ModelProvider, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

from resumable.integrations.openai_agents import durable


class ChatProvider(ModelProvider):
    """Models of the Chat Completions API at ``OPENAI_BASE_URL``, read by the worker."""

    def get_model(self, model_name: str | None) -> Model:
        client = AsyncOpenAI(base_url=os.environ.get("OPENAI_BASE_URL"))
        return OpenAIChatCompletionsModel(
            model=model_name or os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
            openai_client=client,
        )


@function_tool(needs_approval=True)
async def fetch_url(url: str) -> str:
    """Fetch a web page (a human approves each fetch first)."""
    async with httpx.AsyncClient(timeout=20) as http:
        page = await http.get(url)
    return page.text[:4000]


researcher = Agent(
    name="researcher",
    instructions="Read sources with fetch_url, then write a short report citing them.",
    tools=[fetch_url],
    model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
)

openai_research = durable(
    researcher, name="openai_research", model_provider=ChatProvider(), approval_timeout=86400
)
