"""OpenAI Agents SDK agents run by the integration tests' workers, their
model an ``OpenAIChatCompletionsModel`` talking to the test's fake
OpenAI-compatible HTTP server (``tests/framework_fake_openai.py``)."""

from __future__ import annotations

from typing import Any

from agents import (
    Agent,
    Model,
    ModelProvider,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    function_tool,
)
from openai import AsyncOpenAI

from resumable.integrations.openai_agents import durable
from tests.framework_tools import effect, fake_url


class FakeProvider(ModelProvider):
    """Every model name is served by the fake server (read when first asked:
    the worker learns its address from its environment)."""

    def get_model(self, model_name: str | None) -> Model:
        client = AsyncOpenAI(base_url=f"{fake_url()}/v1", api_key="fake", max_retries=0)
        return OpenAIChatCompletionsModel(model=model_name or "fake", openai_client=client)


@function_tool
async def lookup(ctx: RunContextWrapper[dict[str, Any]], order: str) -> str:
    """Look an order up."""
    found = await effect(ctx.context["api"], "/lookup", {"order": order}, None)
    return f"order {order}: {found['id']}"


@function_tool(needs_approval=True)
async def refund(ctx: RunContextWrapper[dict[str, Any]], order: str, amount: int) -> str:
    """Refund an order (a human approves it first)."""
    done = await effect(
        ctx.context["api"], "/refund", {"order": order, "amount": amount}, ctx.context.get("gate")
    )
    return f"refunded {amount} as {done['id']}"


support = Agent(name="support", instructions="Help.", tools=[lookup, refund], model="fake")


def _context(stored: Any) -> dict[str, Any]:
    return dict(stored)


openai_refunds = durable(
    support, name="openai_refunds", context=_context, model_provider=FakeProvider()
)
openai_refunds_sync = durable(
    support, name="openai_refunds_sync", context=_context, model_provider=FakeProvider(), sync=True
)


@function_tool
def transcode(video: str, format: str) -> str:
    """Transcode a video (a render farm does it, and posts the result back)."""
    raise AssertionError("a tool executed elsewhere is never called on a worker")


@function_tool(needs_approval=True, name_override="refund")
def refund_media(order: str, amount: int) -> str:
    """Refund an order (a human approves it first)."""
    return f"refunded {amount} on {order}"


media = Agent(name="media", instructions="Help.", tools=[transcode, refund_media], model="fake")

openai_media = durable(
    media, name="openai_media", model_provider=FakeProvider(), external_tools=["transcode"]
)
openai_media_timeout = durable(
    media,
    name="openai_media_timeout",
    model_provider=FakeProvider(),
    external_tools=["transcode"],
    approval_timeout=3600,
)
