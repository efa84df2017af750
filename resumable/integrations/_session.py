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
from resumable.waits import Signal, Timer, Wait, check_seconds


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
    "args", "kind"}``, ``kind`` being ``"approval"`` or ``"external"``."""

    pending: list[dict[str, Any]] = field(default_factory=list)


Outcome: TypeAlias = Finished | TurnDone | Paused
#: ``{call id: {"approved": bool, "reason": str | None}}`` for approvals,
#: ``{call id: {"result": value}}`` for calls executed elsewhere.
Decisions: TypeAlias = dict[str, dict[str, Any]]
#: One framework's way to run one turn: from the state, with the decisions
#: on the calls it paused on (None on an ordinary turn).
Advance: TypeAlias = Callable[[StepContext, Record, Decisions | None], Awaitable[Outcome]]

TIMED_OUT_REASON = "No decision arrived in time."


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
    Anything else decides nothing (a malformed signal changes nothing).
    """
    merged = dict(decided)
    if not isinstance(payload, dict):
        return merged
    kinds = {call["id"]: call["kind"] for call in pending}
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


def _approval(decision: dict[str, Any]) -> dict[str, Any]:
    reason = decision.get("reason")
    return {"approved": decision.get("approved") is True, "reason": str(reason) if reason else None}


def timed_out(pending: list[dict[str, Any]], decided: Decisions) -> Decisions:
    """`decided`, every undecided call refused because the wait timed out."""
    merged = dict(decided)
    for call in pending:
        if call["id"] not in merged:
            if call["kind"] == "approval":
                merged[call["id"]] = {"approved": False, "reason": TIMED_OUT_REASON}
            else:
                merged[call["id"]] = {"result": TIMED_OUT_REASON}
    return merged


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
            decided = timed_out(pending, decided)
        elif wake is not None:
            decided = merge_decisions(pending, decided, wake.payload)
        if any(call["id"] not in decided for call in pending):
            ctx.state["decided"] = decided
            return _wait_again(ctx, shape)
        for key in ("pending", "decided", "deadline"):
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
        return ctx.wait(Signal(shape.topic), then="decide", timeout=shape.timeout)
    return "turn"


def _wait_again(ctx: StepContext, shape: SessionShape) -> Wait:
    """Wait for the calls still undecided, until the deadline set when the run
    stopped on them: a decision on some calls does not give the others more
    time. (A ``timeout=`` would count again from now; a ``Timer`` at the
    deadline does not, and its firing reads as the wait's timeout.)"""
    deadline = ctx.state.get("deadline")
    if deadline is None:
        return ctx.wait(Signal(shape.topic), then="decide")
    return ctx.wait(Signal(shape.topic), Timer(at=datetime.fromisoformat(deadline)), then="decide")
