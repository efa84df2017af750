"""PydanticAI agents run by the integration tests' workers: the model is
PydanticAI's own ``FunctionModel``, which asks the test's fake server what to
answer (so the server counts every model request, across worker processes)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic_ai import Agent, ExternalToolset, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

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


# -- a tool executed elsewhere, answered at a signed callback URL ------------------------


def _answers(messages: list[ModelMessage]) -> list[str]:
    """What each tool call answered (a failure too), as the model is shown it."""
    return [
        part.model_response_str()
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


async def media_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask a render farm to transcode a video (and, when the prompt says so,
    in the same turn, for a refund a human approves); then say what each call
    answered. Each model request is counted at the test's fake server."""
    async with httpx.AsyncClient(timeout=30) as http:
        counted = await http.post(
            f"{fake_url()}/model",
            json={"messages": len(messages)},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
    counted.raise_for_status()
    answers = _answers(messages)
    if answers:
        return ModelResponse(parts=[TextPart("Done: " + " | ".join(answers))])
    calls = [ToolCallPart("transcode", {"video": "v1", "format": "webm"}, tool_call_id="t1")]
    prompt = next(
        part.content
        for part in messages[0].parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    )
    if "refund" in prompt:
        calls.append(ToolCallPart("refund", {"order": "o1", "amount": 10}, tool_call_id="r1"))
    if "twice" in prompt:
        calls.append(ToolCallPart("transcode", {"video": "v2", "format": "mp4"}, tool_call_id="t2"))
    return ModelResponse(parts=calls)


TRANSCODE = ToolDefinition(
    name="transcode",
    description="Transcode a video (a render farm does it, and posts the result back).",
    parameters_json_schema={
        "type": "object",
        "properties": {"video": {"type": "string"}, "format": {"type": "string"}},
        "required": ["video", "format"],
    },
)

media = Agent(FunctionModel(media_model), name="media", toolsets=[ExternalToolset([TRANSCODE])])


@media.tool_plain(requires_approval=True, name="refund")
def refund_media(order: str, amount: int) -> str:
    """Refund an order (a human approves it first)."""
    return f"refunded {amount} on {order}"


pydantic_media = durable(media, name="pydantic_media", external_tools=["transcode"])
pydantic_media_sync = durable(media, name="pydantic_media_sync", external_tools=True, sync=True)
pydantic_media_timeout = durable(
    media, name="pydantic_media_timeout", external_tools=["transcode"], approval_timeout=2
)
