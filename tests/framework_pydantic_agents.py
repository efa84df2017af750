"""PydanticAI agents run by the integration tests' workers: the model is
PydanticAI's own ``FunctionModel``, which asks the test's fake server what to
answer (so the server counts every model request, across worker processes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from resumable.integrations.pydantic_ai import durable
from tests.framework_tools import effect, fake_url


@dataclass
class Deps:
    api: str
    gate: str | None = None


async def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """One model request = one POST to the fake server, which picks the answer."""
    sent = [
        {"role": "tool", "content": str(part.content)}
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            f"{fake_url()}/v1/chat/completions", json={"model": "fn", "messages": sent}
        )
    reply: dict[str, Any] = answer.json()["choices"][0]["message"]
    parts: list[ModelResponsePart] = [
        ToolCallPart(
            call["function"]["name"], call["function"]["arguments"], tool_call_id=call["id"]
        )
        for call in reply.get("tool_calls") or []
    ]
    if reply.get("content"):
        parts.append(TextPart(reply["content"]))
    return ModelResponse(parts=parts)


support = Agent(FunctionModel(scripted_model), name="support", deps_type=Deps)


@support.tool
async def lookup(ctx: RunContext[Deps], order: str) -> dict[str, Any]:
    """Look an order up."""
    return await effect(ctx.deps.api, "/lookup", {"order": order}, None)


@support.tool(requires_approval=True)
async def refund(ctx: RunContext[Deps], order: str, amount: int) -> str:
    """Refund an order (a human approves it first)."""
    done = await effect(ctx.deps.api, "/refund", {"order": order, "amount": amount}, ctx.deps.gate)
    return f"refunded {amount} as {done['id']}"


def _deps(stored: Any) -> Deps:
    return Deps(**stored)


pydantic_refunds = durable(support, name="pydantic_refunds", deps=_deps)
pydantic_refunds_sync = durable(support, name="pydantic_refunds_sync", deps=_deps, sync=True)


def _two_refunds_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask for two refunds at once (two approvals pending), then list what
    each refund call answered."""
    returns = [
        str(part.content)
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if not returns:
        return ModelResponse(
            parts=[
                ToolCallPart("refund", {"order": "o1", "amount": 10}, tool_call_id="r1"),
                ToolCallPart("refund", {"order": "o2", "amount": 20}, tool_call_id="r2"),
            ]
        )
    return ModelResponse(parts=[TextPart(" | ".join(returns))])


two_refunds = Agent(FunctionModel(_two_refunds_model), name="two_refunds")


@two_refunds.tool_plain(requires_approval=True, name="refund")
def refund_order(order: str, amount: int) -> str:
    """Refund an order (a human approves it first)."""
    return f"refunded {amount} on {order}"
