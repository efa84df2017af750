"""Run a PydanticAI agent durably: every model request and tool call recorded,
one model turn per step, deferred tools suspending the session.

    from pydantic_ai import Agent
    from resumable.integrations.pydantic_ai import durable

    support = Agent("openai:gpt-5", name="support", output_type=str)
    ...  # its tools, as they are
    support_session = durable(support, name="support")  # a resumable Agent

Start a session with ``{"prompt": "...", "deps": {...}}`` (or just the prompt);
its result is the run's output as JSON. A tool declared with
``requires_approval=True`` (or one that raises ``ApprovalRequired`` or
``CallDeferred``) suspends the session on ``Signal("approval")`` with the
calls in ``state["pending"]``; see ``resumable.integrations._session`` for
the signal's payload. With ``external_tools=``, a call executed elsewhere
(an ``ExternalToolset`` tool, or one that raises ``CallDeferred``) is
answered at a single-use signed callback URL instead, which its pending
entry carries (``callback_url``): the external executor POSTs the tool's
result there (``{"result": ...}`` or ``{"error": "..."}``).

Only PydanticAI's public interface is used: a capability passed to
``Agent.run`` wraps each model request (``wrap_model_request``) and each tool
execution (``wrap_tool_execute``) in a recorded call, and
``parallel_tool_call_execution_mode("sequential")`` keeps tool calls in a
fixed order, so each keeps its position and idempotency key on a replay.
A turn ends where the next model request would start: the capability stops
the run there (``TurnEnded``), the conversation is committed, and the next
step continues it from the message history.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import (
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolDenied,
    ToolFailed,
)
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, ToolCallPart
from pydantic_ai.tools import ToolDefinition
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

DepsT = TypeVar("DepsT")

_RESPONSE = TypeAdapter(ModelResponse)
#: The recorded calls' names (the console and ``sessions show`` list them).
MODEL_REQUEST = "model_request"
TOOL_PREFIX = "tool:"


class TurnEnded(BaseException):
    """Raised by the recording capability where the run's next model request
    would start: the turn is over. A ``BaseException`` so that no ``except
    Exception`` in the framework or a tool takes it for a failure."""

    def __init__(self, messages: list[ModelMessage]) -> None:
        super().__init__("model turn ended")
        self.messages = messages


@dataclass
class _Recording(AbstractCapability[Any]):
    """Makes this run's model requests and tool executions recorded calls, and
    ends the run at its second model request (one turn per step)."""

    record: Record
    requests: int = 0

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: Any, handler: Any
    ) -> ModelResponse:
        if self.requests >= 1:
            raise TurnEnded(list(ctx.messages))
        self.requests += 1

        async def send() -> Any:
            response = await handler(request_context)
            return _RESPONSE.dump_python(response, mode="json")

        # The request's identity: its position in the conversation. The
        # messages themselves carry timestamps a replay would not reproduce.
        recorded = await self.record(
            MODEL_REQUEST, {"messages": len(ctx.messages)}, send, side_effects=False
        )
        response = _RESPONSE.validate_python(recorded)
        # The agent stamps the model it sent a request to on the response only
        # when the request is sent; a replayed one is stamped here the same way.
        response.model_id = response.model_id or _model_id(request_context)
        return response

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        async def execute() -> Any:
            return to_jsonable_python(await handler(args))

        request = {"tool_call_id": call.tool_call_id, "args": call.args_as_dict()}
        return await self.record(TOOL_PREFIX + call.tool_name, request, execute, defer_record=True)


class _Runner(Generic[DepsT]):
    """One framework agent, and how a session's input becomes its deps."""

    def __init__(
        self,
        agent: PydanticAgent[DepsT, Any],
        deps: Callable[[Any], DepsT] | None,
        run_options: dict[str, Any],
        external_tools: bool | Collection[str] = False,
    ) -> None:
        self.agent = agent
        self.deps = deps
        self.run_options = run_options
        self.external_tools = external_tools
        self.output_type = [*_flat(agent.output_type), DeferredToolRequests]

    async def advance(
        self, ctx: StepContext, record: Record, decisions: Decisions | None
    ) -> Outcome:
        state = ctx.state
        history = (
            ModelMessagesTypeAdapter.validate_python(state["messages"])
            if "messages" in state
            else None
        )
        prompt = None if history is not None else prompt_of(ctx.input)
        deps = self.deps(deps_input(ctx.input)) if self.deps is not None else None
        try:
            with self.agent.parallel_tool_call_execution_mode("sequential"):
                result: AgentRunResult[Any] = await self.agent.run(
                    prompt,
                    message_history=history,
                    deferred_tool_results=_results(decisions) if decisions else None,
                    deps=deps,  # type: ignore[arg-type]
                    output_type=self.output_type,
                    capabilities=[_Recording(record)],
                    **self.run_options,
                )
        except TurnEnded as ended:
            state["messages"] = _dumped(ended.messages)
            state["turns"] = state.get("turns", 0) + 1
            return TurnDone()
        state["messages"] = _dumped(result.all_messages())
        output = result.output
        if isinstance(output, DeferredToolRequests):
            return Paused(_pending(output, self._by_callback))
        return Finished(to_jsonable_python(output))

    def _by_callback(self, tool: str) -> bool:
        """Whether an external call of `tool` is answered at a callback URL."""
        if isinstance(self.external_tools, bool):
            return self.external_tools
        return tool in self.external_tools


def _flat(output_type: Any) -> list[Any]:
    if isinstance(output_type, Sequence) and not isinstance(output_type, str):
        return [t for t in output_type if t is not DeferredToolRequests]
    return [output_type]


def _dumped(messages: Sequence[ModelMessage]) -> Any:
    return ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")


def _pending(
    requests: DeferredToolRequests, by_callback: Callable[[str], bool]
) -> list[dict[str, Any]]:
    def entry(part: ToolCallPart, kind: str) -> dict[str, Any]:
        call = {
            "id": part.tool_call_id,
            "tool": part.tool_name,
            "args": to_jsonable_python(part.args_as_dict()),
            "kind": kind,
        }
        if kind == "external" and by_callback(part.tool_name):
            call["callback_url"] = None  # made when the session waits on it
        return call

    return [entry(p, "approval") for p in requests.approvals] + [
        entry(p, "external") for p in requests.calls
    ]


def _results(decisions: Decisions) -> DeferredToolResults:
    results = DeferredToolResults()
    for call_id, decision in decisions.items():
        if "result" in decision:
            results.calls[call_id] = decision["result"]
        elif "error" in decision:
            results.calls[call_id] = ToolFailed(str(decision["error"]))
        elif decision.get("approved"):
            results.approvals[call_id] = True
        else:
            reason = decision.get("reason") or "The user rejected this tool call."
            results.approvals[call_id] = ToolDenied(reason)
    return results


def durable(
    agent: PydanticAgent[DepsT, Any],
    *,
    name: str | None = None,
    deps: Callable[[Any], DepsT] | None = None,
    sync: bool = False,
    approval_topic: str = "approval",
    approval_timeout: float | timedelta | None = None,
    external_tools: bool | Collection[str] = False,
    retry: RetryPolicy = DEFAULT_POLICY,
    checkpoints: CheckpointStrategy | None = None,
    **run_options: Any,
) -> Agent:
    """A resumable ``Agent`` that runs `agent` durably.

    ``name`` defaults to the PydanticAI agent's name. ``deps`` builds the
    run's dependencies from the session input's ``deps`` (JSON): a dataclass
    or a function that also opens what cannot be stored (a client). ``sync``
    runs the steps on worker threads instead of the worker's event loop.
    ``approval_topic``/``approval_timeout`` are the signal deferred calls wait
    for and how long (then each undecided call is refused, the model told
    why). ``external_tools``: the tools (``True``: every tool) whose calls
    executed elsewhere (``ExternalToolset``, ``CallDeferred``) are answered at
    a single-use signed callback URL of their own, carried by the call's
    entry in ``state["pending"]`` (``callback_url``), instead of through the
    signal; they share the approval timeout (then the model sees "No result
    arrived in time."). ``run_options`` are passed to every ``agent.run``
    (``model=``, ``model_settings=``, ``usage_limits=``: limits count per
    turn).
    """
    agent_name = name or agent.name
    if not agent_name:
        raise ValueError("durable(agent) needs name=... when the PydanticAI agent has no name")
    if isinstance(external_tools, str):
        raise TypeError("external_tools takes tool names (a list or set) or True, not one string")
    runner = _Runner(agent, deps, run_options, external_tools)
    return build_agent(
        agent_name,
        runner.advance,
        sync=sync,
        shape=SessionShape(approval_topic, approval_timeout),
        retry=retry,
        checkpoints=checkpoints,
        description=f"PydanticAI agent {agent.name or agent_name!r}",
    )


def _model_id(request_context: Any) -> str | None:
    """The id the agent stamps on a response it sent a request for."""
    model_id: str | None = getattr(request_context, "model_id", None)
    if model_id is None:
        model = getattr(request_context, "model", None)
        model_id = getattr(model, "model_id", None)
    return model_id
