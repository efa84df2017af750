"""A PydanticAI agent on resumable: a refund needs a human's approval, and the
session waits for it holding no worker.

The agent is an ordinary PydanticAI ``Agent`` (here with PydanticAI's own
``FunctionModel``, scripted, so it runs without a key; swap in
``"openai:gpt-5"`` or any model). ``durable(...)`` turns it into a resumable
agent: every model request and tool call is recorded, the conversation is
committed after each model turn, and the ``requires_approval`` tool suspends
the session until a signal decides. Try it from the repository root::

    export RESUMABLE_API_TOKENS=dev-token
    .venv/bin/resumable dev --agents examples.pydantic_ai_approval &
    ID=$(.venv/bin/resumable enqueue pydantic_refunds --agents examples.pydantic_ai_approval \\
        --input '{"prompt": "Refund order o-17", "deps": {"currency": "EUR"}}')
    .venv/bin/resumable sessions show "$ID"      # suspended; state.pending lists the refund
    curl -X POST -H "Authorization: Bearer dev-token" -H 'Content-Type: application/json' \\
        -d '{"approved": false, "reason": "Refunds over 20 EUR need a receipt."}' \\
        http://127.0.0.1:8000/v1/sessions/$ID/signals/approval
    .venv/bin/resumable sessions show "$ID"      # completed; the model read the reason

Send ``{"approved": true}`` instead to let the refund run (once: a recovered
session replays its record), or ``{"decisions": {"<call id>": {"approved":
..., "reason": ...}}}`` to decide each pending call on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from resumable.integrations.pydantic_ai import durable, idempotency_key


@dataclass
class Deps:
    """What a session is started with (``input["deps"]``): storable JSON."""

    currency: str


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A stand-in model: ask for the refund, then say how it went."""
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("refund", {"order": "o-17", "amount": 30})])
    return ModelResponse(parts=[TextPart(f"Refund outcome: {returns[-1].content}")])


support = Agent(FunctionModel(scripted), name="support", deps_type=Deps)


@support.tool(requires_approval=True)
def refund(ctx: RunContext[Deps], order: str, amount: int) -> str:
    """Refund an order. A real tool passes idempotency_key() to the payment API."""
    return f"refunded {amount} {ctx.deps.currency} on {order} (key {idempotency_key()})"


pydantic_refunds = durable(
    support, name="pydantic_refunds", deps=lambda stored: Deps(**stored), approval_timeout=86400
)
