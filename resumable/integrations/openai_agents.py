"""Run an OpenAI Agents SDK agent durably: every model request and function
tool call recorded, ``needs_approval`` tools suspending the session.

    from agents import Agent, function_tool
    from resumable.integrations.openai_agents import durable

    triage = Agent(name="triage", instructions="...", tools=[refund], model=model)
    triage_session = durable(triage)  # a resumable Agent

Start a session with ``{"prompt": "...", "deps": {...}}`` (``deps`` builds the
run's context); its result is the run's ``final_output`` as JSON.

Only the SDK's public interface is used. Each step runs the agent with
``RunConfig(model=...)`` set to a ``Model`` that makes each request a recorded
call, and a clone of the agent whose ``FunctionTool``s record their
``on_invoke_tool``; ``ToolExecutionConfig(max_function_tool_concurrency=1)``
keeps tool calls in a fixed order. A turn ends where the next model request
would start: the model raises ``TurnEnded`` with the input it was about to
send (the whole conversation, in the Responses format), which is committed,
and the next step runs the agent on it. An interruption (a tool that
``needs_approval``) commits ``RunState.to_json()`` and suspends; decisions
are applied with ``state.approve``/``state.reject(rejection_message=...)``
and the run goes on with ``Runner.run(agent, state)``.

Tools executed elsewhere: the SDK has no kind of tool whose call ends the
run for someone else to answer, so ``durable(..., external_tools=[...])``
models one with its public interface: the run works on a clone of each named
``FunctionTool`` with ``needs_approval=True``, so that a call interrupts the
run like an approval; the session waits on a single-use signed callback URL
for it (``callback_url`` in the call's pending entry), and once the result is
POSTed there the interruption is approved and the clone's ``on_invoke_tool``
answers with that result (the tool's own function is never called); an
error or a timeout rejects it with the message the model sees.

Handoffs: the run goes on with the agent given to ``durable`` after a turn
boundary (each turn is a new run on the conversation so far); tools of other
agents are not recorded. Use it with one agent, or record those tools yourself.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from datetime import timedelta
from typing import Any

from agents import (
    Agent as SDKAgent,
)
from agents import (
    FunctionTool,
    Model,
    ModelProvider,
    ModelResponse,
    RunConfig,
    Runner,
    RunState,
    ToolExecutionConfig,
    Usage,
)
from agents.items import TResponseOutputItem
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from resumable.agent import Agent
from resumable.checkpoints import CheckpointStrategy
from resumable.context import StepContext
from resumable.integrations._recording import Record, idempotency_key
from resumable.integrations._session import (
    Decisions,
    Finished,
    Outcome,
    Paused,
    SessionShape,
    TurnDone,
    build_agent,
    deps_input,
    prompt_of,
)
from resumable.retries import DEFAULT_POLICY, RetryPolicy

__all__ = ["TurnEnded", "durable", "idempotency_key"]

_OUTPUT = TypeAdapter(list[TResponseOutputItem])
MODEL_REQUEST = "model_request"
TOOL_PREFIX = "tool:"


class TurnEnded(BaseException):
    """Raised by the recording model where the run's next model request would
    start; carries the input it would have sent (the conversation so far)."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__("model turn ended")
        self.items = items


def _dump_response(response: ModelResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        "output": _OUTPUT.dump_python(response.output, mode="json"),
        "usage": [usage.requests, usage.input_tokens, usage.output_tokens, usage.total_tokens],
        "response_id": response.response_id,
    }


def _load_response(recorded: dict[str, Any]) -> ModelResponse:
    requests, input_tokens, output_tokens, total = recorded["usage"]
    return ModelResponse(
        output=_OUTPUT.validate_python(recorded["output"]),
        usage=Usage(
            requests=requests,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=total,
        ),
        response_id=recorded["response_id"],
    )


class _RecordingModel(Model):
    """The agent's model, each request a recorded call; the run's second
    request ends the step's turn instead of being sent."""

    def __init__(self, inner: Model, record: Record) -> None:
        self.inner = inner
        self.record = record
        self.requests = 0

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        if self.requests >= 1:
            raise TurnEnded(to_jsonable_python(items))
        self.requests += 1

        async def send() -> Any:
            response = await self.inner.get_response(system_instructions, input, *args, **kwargs)
            return _dump_response(response)

        recorded = await self.record(MODEL_REQUEST, {"items": len(items)}, send, side_effects=False)
        return _load_response(recorded)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("streaming is not supported by resumable's integration")


def _external_tool(tool: FunctionTool, results: Mapping[str, Any]) -> FunctionTool:
    """`tool` executed elsewhere: a call interrupts the run (as an approval
    would) and, once approved with its result, answers with that result."""

    async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
        if ctx.tool_call_id not in results:  # pragma: no cover - approved only with a result
            return f"No result for the call {ctx.tool_call_id!r} of {tool.name!r}."
        result = results[ctx.tool_call_id]
        return result if isinstance(result, str) else json.dumps(result)

    return dataclasses.replace(tool, needs_approval=True, on_invoke_tool=on_invoke_tool)


def _recorded_tool(tool: FunctionTool, record: Record) -> FunctionTool:
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
        async def execute() -> Any:
            return to_jsonable_python(await invoke(ctx, arguments))

        try:
            args: Any = json.loads(arguments or "{}")
        except ValueError:
            args = arguments
        request = {"call_id": ctx.tool_call_id, "args": args}
        return await record(TOOL_PREFIX + tool.name, request, execute, defer_record=True)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


class _Runner:
    def __init__(
        self,
        agent: SDKAgent[Any],
        context: Callable[[Any], Any] | None,
        model_provider: ModelProvider | None,
        max_turns: int,
        external_tools: Collection[str] = (),
    ) -> None:
        self.agent = agent
        self.context = context
        self.model_provider = model_provider
        self.max_turns = max_turns
        self.external_tools = frozenset(external_tools)
        tools = {t.name for t in agent.tools if isinstance(t, FunctionTool)}
        unknown = sorted(self.external_tools - tools)
        if unknown:
            raise ValueError(
                f"external_tools names {', '.join(map(repr, unknown))}, not a function "
                f"tool of agent {agent.name!r}"
            )

    def _model(self) -> Model:
        model = self.agent.model
        if isinstance(model, Model):
            return model
        if self.model_provider is None:
            raise ValueError(
                f"agent {self.agent.name!r} names its model ({model!r}): pass "
                "durable(..., model_provider=...) to resolve it, or give the agent a Model"
            )
        return self.model_provider.get_model(model)

    async def advance(
        self, ctx: StepContext, record: Record, decisions: Decisions | None
    ) -> Outcome:
        state = ctx.state
        results = {
            call_id: decision["result"]
            for call_id, decision in (decisions or {}).items()
            if "result" in decision
        }
        agent = self.agent.clone(tools=[self._tool(t, record, results) for t in self.agent.tools])
        context = self.context(deps_input(ctx.input)) if self.context is not None else None
        run_input: Any
        if decisions is not None:
            run_state = await RunState.from_json(agent, state.pop("run_state"))
            _decide(run_state, decisions)
            run_input = run_state
        elif "input" in state:
            run_input = state["input"]
        else:
            run_input = prompt_of(ctx.input)
        config = RunConfig(
            model=_RecordingModel(self._model(), record),
            tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1),
            tracing_disabled=True,
        )
        try:
            result = await Runner.run(
                agent, run_input, context=context, run_config=config, max_turns=self.max_turns
            )
        except TurnEnded as ended:
            state["input"] = ended.items
            state["turns"] = state.get("turns", 0) + 1
            return TurnDone()
        if result.interruptions:
            state["run_state"] = result.to_state().to_json()
            return Paused([self._pending(item) for item in result.interruptions])
        state["input"] = to_jsonable_python(result.to_input_list())
        return Finished(to_jsonable_python(result.final_output))

    def _tool(self, tool: Any, record: Record, results: Mapping[str, Any]) -> Any:
        if not isinstance(tool, FunctionTool):
            return tool
        if tool.name in self.external_tools:
            return _external_tool(tool, results)
        return _recorded_tool(tool, record)

    def _pending(self, item: Any) -> dict[str, Any]:
        call = {
            "id": item.call_id,
            "tool": item.tool_name,
            "args": _arguments(item.arguments),
            "kind": "approval",
        }
        if item.tool_name in self.external_tools:
            call["kind"] = "external"
            call["callback_url"] = None  # made when the session waits on it
        return call


def _arguments(arguments: str | None) -> Any:
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return arguments


def _decide(run_state: RunState[Any], decisions: Decisions) -> None:
    for item in run_state.get_interruptions():
        decision = decisions.get(item.call_id or "", {})
        if "result" in decision:
            run_state.approve(item)  # the external tool answers with the result
        elif "error" in decision:
            run_state.reject(item, rejection_message=str(decision["error"]))
        elif decision.get("approved"):
            run_state.approve(item)
        else:
            reason = decision.get("reason") or "The user rejected this tool call."
            run_state.reject(item, rejection_message=reason)


def durable(
    agent: SDKAgent[Any],
    *,
    name: str | None = None,
    context: Callable[[Any], Any] | None = None,
    model_provider: ModelProvider | None = None,
    sync: bool = False,
    approval_topic: str = "approval",
    approval_timeout: float | timedelta | None = None,
    external_tools: Collection[str] = (),
    max_turns: int = 10,
    retry: RetryPolicy = DEFAULT_POLICY,
    checkpoints: CheckpointStrategy | None = None,
) -> Agent:
    """A resumable ``Agent`` that runs `agent` durably.

    ``name`` defaults to the SDK agent's name. ``context`` builds the run's
    context from the session input's ``deps``. ``model_provider`` resolves a
    model given by name (an agent with a ``Model`` instance needs none).
    ``sync`` runs the steps on worker threads instead of the event loop.
    ``approval_topic``/``approval_timeout``: the signal interruptions wait for,
    and how long (then each undecided call is rejected, the model told why).
    ``external_tools``: names of the agent's function tools executed
    elsewhere: a call suspends the session on a single-use signed callback
    URL (``callback_url`` in its entry of ``state["pending"]``), the body
    POSTed there is the tool's result the model sees (``{"result": ...}`` or
    ``{"error": "..."}``); the tool's own function is never called. They
    share the approval timeout (then the model sees "No result arrived in
    time.").
    """
    if isinstance(external_tools, str):
        raise TypeError("external_tools takes tool names (a list or set), not one string")
    runner = _Runner(agent, context, model_provider, max_turns, external_tools)
    return build_agent(
        name or agent.name,
        runner.advance,
        sync=sync,
        shape=SessionShape(approval_topic, approval_timeout),
        retry=retry,
        checkpoints=checkpoints,
        description=f"OpenAI Agents SDK agent {agent.name!r}",
    )
