"""Framework agents for ``benchmarks/frameworks.py``; its workers import this module,
and its bare baseline runs the same framework agents in the benchmark process.

Each framework's agent talks to an in-process fake model (no HTTP, no sleep),
so what a run costs is the framework's own work plus, in the durable runs,
resumable's. The session's prompt names its shape, ``"<shape> <tools>"``:

- ``single``: one model request that answers at once (one model turn);
- ``batched``: one request asking for every tool call at once, then the answer
  (two model turns, ``tools`` tool calls);
- ``turns``: one tool call per model request, then the answer (``tools + 1``
  model turns, ``tools`` tool calls).

The tool, ``bump``, only adds one to its argument.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent as SDKAgent
from agents import Model, ModelResponse, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import ModelResponse as PydanticResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from resumable.integrations.openai_agents import durable as durable_openai
from resumable.integrations.pydantic_ai import durable as durable_pydantic

PYDANTIC_AGENT = "bench_pydantic_ai"
OPENAI_AGENT = "bench_openai_agents"
SHAPES = ("single", "batched", "turns")


def prompt(shape: str, tools: int) -> str:
    return f"{shape} {tools}"


def counts(shape: str, tools: int) -> tuple[int, int]:
    """(model requests, tool calls) of one session of `shape`."""
    if shape == "single":
        return 1, 0
    if shape == "batched":
        return 2, tools
    return tools + 1, tools


def plan(text: str, done: int) -> list[int]:
    """The tool calls the model asks for next (their arguments), after `done`
    tool results; an empty list means: answer."""
    shape, tools = text.split()
    total = int(tools) if shape != "single" else 0
    if done >= total:
        return []
    if shape == "batched":
        return list(range(total))
    return [done]


# -- PydanticAI ----------------------------------------------------------------------------


def _pydantic_model(messages: list[ModelMessage], info: AgentInfo) -> PydanticResponse:
    text = next(
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    )
    done = sum(
        1
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    )
    calls = plan(text, done)
    parts: list[ModelResponsePart] = [
        ToolCallPart("bump", {"n": n}, tool_call_id=f"call_{done}_{n}") for n in calls
    ]
    return PydanticResponse(parts=parts or [TextPart(f"done after {done} tool calls")])


pydantic_agent = PydanticAgent(FunctionModel(_pydantic_model), name="bench")


@pydantic_agent.tool_plain
def bump(n: int) -> int:
    """Add one."""
    return n + 1


bench_pydantic_ai = durable_pydantic(pydantic_agent, name=PYDANTIC_AGENT)


# -- OpenAI Agents SDK ---------------------------------------------------------------------


class FakeModel(Model):
    """Answers from ``plan`` in the Responses format, in process."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else input
        text = next(str(i["content"]) for i in items if _get(i, "role") == "user")
        done = sum(1 for i in items if _get(i, "type") == "function_call_output")
        output: list[Any] = [
            ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call_{done}_{n}",
                name="bump",
                arguments=json.dumps({"n": n}),
            )
            for n in plan(text, done)
        ]
        if not output:
            output = [
                ResponseOutputMessage(
                    id=f"msg_{done}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            type="output_text",
                            text=f"done after {done} tool calls",
                            annotations=[],
                        )
                    ],
                )
            ]
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


@function_tool(name_override="bump")
def bump_sdk(n: int) -> int:
    """Add one."""
    return n + 1


openai_agent = SDKAgent(name="bench", instructions="Bump.", tools=[bump_sdk], model=FakeModel())
bench_openai_agents = durable_openai(openai_agent, name=OPENAI_AGENT, max_turns=100)
