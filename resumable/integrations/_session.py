"""The steps every adapted framework runs as: one model turn per step, and a
suspension while a human (or an external system) decides on deferred calls.

A session of an adapted agent goes ``turn → turn → ... → complete``. Each
``turn`` step runs the framework from the conversation in ``ctx.state`` for
one model turn (a model request and the tool calls it asks for) and commits
the grown conversation, so the console shows it turn by turn and a crash
replays at most one turn, from its records. When the framework stops on
calls it may not make alone (a tool needing approval, a tool executed
elsewhere), the step commits the session as ``suspended`` on
``Signal(topic)`` with the calls listed in ``state["pending"]``; the
``decide`` step takes each signal's decisions and, once every call is
decided, runs the next turn with them. No worker, thread or task waits
meanwhile. With a timeout, the deadline is fixed when the run stops
(``state["deadline"]``, from the worker's clock): a signal that decides only
some calls leaves the others the time that was left, not a new timeout.

A call executed elsewhere can be answered at a single-use signed callback URL
instead (the adapters' ``external_tools=``): its entry in ``state["pending"]``
carries ``callback_url`` (and ``callback_token``), made with ``ctx.callback``,
and the body POSTed there is the tool's result. The core closes every open
callback of a session when the session wakes, for whatever reason; so that a
URL handed out stays valid until it is answered or the deadline passes, the
session waits on one such callback at a time, and on nothing else meanwhile:
the next call's URL is made when the previous one is answered (its entry
shows ``callback_url: null`` until then), and signals (approvals) posted
meanwhile are kept by the signal route and taken once every callback call is
answered. When the deadline passes during a callback wait, the signals
already posted are taken first (a wait on the signal with no time left), so a
decision that arrived in time is not reported as timed out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

from resumable.agent import Agent, Complete
from resumable.checkpoints import CheckpointStrategy, Incremental
from resumable.context import StepContext
from resumable.integrations._recording import (
    Record,
    async_recorder,
    run_in_sync_step,
)
from resumable.retries import DEFAULT_POLICY, RetryPolicy
from resumable.waits import Callback, Signal, Timer, Wait, check_seconds


@dataclass(frozen=True)
class Finished:
    """The framework's run ended with its final output (as JSON)."""

    output: Any


@dataclass(frozen=True)
class TurnDone:
    """One model turn is done; the conversation in the state goes on."""


@dataclass(frozen=True)
class Paused:
    """The run stopped on calls someone else decides: each ``{"id", "tool",
    "args", "kind"}``, ``kind`` being ``"approval"`` or ``"external"``; an
    external call to be answered at a callback URL also has ``"callback_url":
    None`` (filled in when its URL is made)."""

    pending: list[dict[str, Any]] = field(default_factory=list)


Outcome: TypeAlias = Finished | TurnDone | Paused
#: ``{call id: {"approved": bool, "reason": str | None}}`` for approvals,
#: ``{call id: {"result": value}}`` or ``{call id: {"error": message}}`` for
#: calls executed elsewhere.
Decisions: TypeAlias = dict[str, dict[str, Any]]
#: One framework's way to run one turn: from the state, with the decisions
#: on the calls it paused on (None on an ordinary turn).
Advance: TypeAlias = Callable[[StepContext, Record, Decisions | None], Awaitable[Outcome]]

TIMED_OUT_REASON = "No decision arrived in time."
TIMED_OUT_RESULT = "No result arrived in time."
#: How long, past the deadline, signals already posted are waited for (they
#: wake the session as soon as it suspends; the margin keeps the timeout from
#: overtaking that wake).
DRAIN_SECONDS = 1.0


def prompt_of(session_input: Any) -> Any:
    """A session's prompt: the input itself when it is text, else its ``prompt``."""
    if isinstance(session_input, dict):
        return session_input.get("prompt")
    return session_input


def deps_input(session_input: Any) -> Any:
    """The storable dependencies a session was started with (``input["deps"]``)."""
    return session_input.get("deps") if isinstance(session_input, dict) else None


def merge_decisions(pending: list[dict[str, Any]], decided: Decisions, payload: Any) -> Decisions:
    """`decided` with what a signal's `payload` says about the pending calls.

    Accepted: ``{"approved": bool, "reason": "..."}`` for every undecided
    approval; ``{"decisions": {id: {"approved": bool, "reason": "..."}}}``
    per call; ``{"results": {id: value}}`` for calls executed elsewhere.
    Anything else decides nothing (a malformed signal changes nothing). A
    call answered at a callback URL is answered there only.
    """
    merged = dict(decided)
    if not isinstance(payload, dict):
        return merged
    kinds = {call["id"]: call["kind"] for call in pending if not by_callback(call)}
    per_call = payload.get("decisions")
    if isinstance(per_call, dict):
        for call_id, decision in per_call.items():
            if kinds.get(call_id) == "approval" and isinstance(decision, dict):
                merged[call_id] = _approval(decision)
    results = payload.get("results")
    if isinstance(results, dict):
        for call_id, value in results.items():
            if kinds.get(call_id) == "external":
                merged[call_id] = {"result": value}
    if "approved" in payload:
        for call_id, kind in kinds.items():
            if kind == "approval" and call_id not in merged:
                merged[call_id] = _approval(payload)
    return merged


def by_callback(call: dict[str, Any]) -> bool:
    """Whether the pending `call` is answered at a callback URL of its own."""
    return "callback_url" in call


def callback_topic(call: dict[str, Any]) -> str:
    """The topic of the callback a pending call is answered at (the audit
    events and the wake name it)."""
    return f"result:{call['id']}"


def posted_result(payload: Any) -> dict[str, Any]:
    """A callback's body as a decision: ``{"result": value}`` and ``{"error":
    "message"}`` (exactly that one key) say which; any other JSON body is the
    tool's result as it is."""
    if isinstance(payload, dict) and len(payload) == 1:
        if "error" in payload:
            return {"error": str(payload["error"])}
        if "result" in payload:
            return {"result": payload["result"]}
    return {"result": payload}


def merge_callback(
    pending: list[dict[str, Any]], decided: Decisions, topic: str | None, payload: Any
) -> Decisions:
    """`decided` with the result POSTed to the callback of `topic`."""
    merged = dict(decided)
    for call in pending:
        if by_callback(call) and callback_topic(call) == topic and call["id"] not in merged:
            merged[call["id"]] = posted_result(payload)
    return merged


def _approval(decision: dict[str, Any]) -> dict[str, Any]:
    reason = decision.get("reason")
    return {"approved": decision.get("approved") is True, "reason": str(reason) if reason else None}


def timed_out(
    pending: list[dict[str, Any]], decided: Decisions, *, callbacks_only: bool = False
) -> Decisions:
    """`decided`, every undecided call (or only those answered at a callback
    URL) refused because the wait timed out: an approval is rejected, an
    external call fails, the model told why."""
    merged = dict(decided)
    for call in pending:
        if call["id"] in merged or (callbacks_only and not by_callback(call)):
            continue
        if call["kind"] == "approval":
            merged[call["id"]] = {"approved": False, "reason": TIMED_OUT_REASON}
        else:
            merged[call["id"]] = {"error": TIMED_OUT_RESULT}
    return merged


def _waiting_on_callback(pending: list[dict[str, Any]], decided: Decisions) -> bool:
    return any(by_callback(call) and call["id"] not in decided for call in pending)


@dataclass(frozen=True)
class SessionShape:
    """How an adapted agent waits: the signal topic and the wait's timeout."""

    topic: str = "approval"
    timeout: float | timedelta | None = None


def build_agent(
    name: str,
    advance: Advance,
    *,
    sync: bool,
    shape: SessionShape,
    retry: RetryPolicy = DEFAULT_POLICY,
    checkpoints: CheckpointStrategy | None = None,
    description: str = "",
) -> Agent:
    """A resumable agent of two steps, ``turn`` and ``decide``, that runs
    `advance` one model turn per step. ``Incremental`` checkpoints by default:
    a conversation grows by appending, so a patch per turn is small."""
    agent = Agent(
        name,
        retry=retry,
        checkpoints=checkpoints or Incremental(snapshot_every=20),
        description=description,
    )

    async def run_turn(ctx: StepContext, record: Record) -> str | Complete | Wait:
        return _after(ctx, await advance(ctx, record, None), shape)

    async def run_decide(ctx: StepContext, record: Record) -> str | Complete | Wait:
        pending: list[dict[str, Any]] = ctx.state.get("pending") or []
        decided: Decisions = ctx.state.get("decided") or {}
        wake = ctx.wake
        if wake is not None and (wake.timed_out or wake.kind == "timer"):
            if _waiting_on_callback(pending, decided) and not ctx.state.get("draining"):
                # The signal was not waited on: take what it already brought.
                decided = timed_out(pending, decided, callbacks_only=True)
                ctx.state["draining"] = True
            else:
                decided = timed_out(pending, decided)
        elif wake is not None and wake.kind == "callback":
            decided = merge_callback(pending, decided, wake.topic, wake.payload)
        elif wake is not None:
            decided = merge_decisions(pending, decided, wake.payload)
        if any(call["id"] not in decided for call in pending):
            ctx.state["decided"] = decided
            return _wait_again(ctx, shape)
        for key in ("pending", "decided", "deadline", "draining"):
            ctx.state.pop(key, None)
        return _after(ctx, await advance(ctx, record, decided), shape)

    if sync:

        @agent.step(name="turn")
        def turn_sync(ctx: StepContext) -> str | Complete | Wait:
            return run_in_sync_step(ctx, lambda record: run_turn(ctx, record))

        @agent.step(name="decide")
        def decide_sync(ctx: StepContext) -> str | Complete | Wait:
            return run_in_sync_step(ctx, lambda record: run_decide(ctx, record))

    else:

        @agent.step(name="turn")
        async def turn(ctx: StepContext) -> str | Complete | Wait:
            return await run_turn(ctx, async_recorder(ctx))

        @agent.step(name="decide")
        async def decide(ctx: StepContext) -> str | Complete | Wait:
            return await run_decide(ctx, async_recorder(ctx))

    return agent


def _after(ctx: StepContext, outcome: Outcome, shape: SessionShape) -> str | Complete | Wait:
    if isinstance(outcome, Finished):
        return Complete(outcome.output)
    if isinstance(outcome, Paused):
        ctx.state["pending"] = outcome.pending
        ctx.state["decided"] = {}
        seconds = check_seconds(shape.timeout)
        if seconds is not None:
            deadline = datetime.now(UTC) + timedelta(seconds=seconds)
            ctx.state["deadline"] = deadline.isoformat()
        return ctx.wait(_condition(ctx, shape), then="decide", timeout=shape.timeout)
    return "turn"


def _wait_again(ctx: StepContext, shape: SessionShape) -> Wait:
    """Wait for the calls still undecided, until the deadline set when the run
    stopped on them: a decision on some calls does not give the others more
    time. (A ``timeout=`` would count again from now; a ``Timer`` at the
    deadline does not, and its firing reads as the wait's timeout.)"""
    if ctx.state.get("draining"):
        # Past the deadline: the signals posted in time (each wakes the
        # session as soon as it suspends), then the timeout.
        return ctx.wait(Signal(shape.topic), then="decide", timeout=DRAIN_SECONDS)
    condition = _condition(ctx, shape)
    deadline = ctx.state.get("deadline")
    if deadline is None:
        return ctx.wait(condition, then="decide")
    return ctx.wait(condition, Timer(at=datetime.fromisoformat(deadline)), then="decide")


def _condition(ctx: StepContext, shape: SessionShape) -> Callback | Signal:
    """What the session waits on now: the callback of the first undecided
    call answered at one (its URL made now, the first time), else the
    signal. One open callback at a time: see the module's docstring."""
    decided: Decisions = ctx.state.get("decided") or {}
    for call in ctx.state.get("pending") or []:
        if not by_callback(call) or call["id"] in decided:
            continue
        topic = callback_topic(call)
        if call.get("callback_token"):
            return Callback(call["callback_token"], topic, call["callback_url"])
        callback = ctx.callback(topic)
        call["callback_url"], call["callback_token"] = callback.url, callback.token
        return callback
    return Signal(shape.topic)
