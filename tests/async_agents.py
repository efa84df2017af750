"""Agents with ``async def`` steps, tools, checks and compensations, mixed with
sync ones; worker subprocesses import this module."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from resumable import Agent, Complete, StepContext
from resumable.checkpoints import EventSourced, Incremental
from resumable.errors import PermanentError
from resumable.retries import RetryPolicy
from resumable.waits import Poll, Wait
from tests.agents import _reduce, bump, post_json, transition

# One client per event loop (a worker has one): a client per call would load
# the CA bundle each time, CPU the other sessions on the loop wait for.
_clients: dict[int, httpx.AsyncClient] = {}


async def apost_json(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """An async tool: POST to the fake external API, passing our key on."""
    loop = id(asyncio.get_running_loop())
    if loop not in _clients:
        _clients[loop] = httpx.AsyncClient(timeout=10)
    answer = await _clients[loop].post(url, json=body, headers={"Idempotency-Key": idempotency_key})
    answer.raise_for_status()
    result: dict[str, Any] = answer.json()
    return result


async def hold_while_flagged(ctx: StepContext, name: str, every: float = 0.02) -> None:
    """Announce that this step is running, then wait (without blocking the
    loop) while the test's hold file exists."""
    gate = Path(ctx.input["gate_dir"])
    (gate / f"entered-{name}-{ctx.session_id}-{ctx.seq}").touch()
    deadline = time.monotonic() + 120
    while (gate / "hold").exists() and time.monotonic() < deadline:
        await asyncio.sleep(every)


# -- every kind of wait, async and sync steps mixed -----------------------------------

trip = Agent("async_trip")


@trip.check
async def async_ready(args: dict[str, Any]) -> str | None:
    await asyncio.sleep(0)
    path = Path(args["path"])
    return path.read_text() if path.exists() else None


@trip.step
async def plan(ctx: StepContext) -> Wait:
    api = ctx.input["api"]
    booked = await ctx.tool("charge", apost_json, f"{api}/charge", {"what": "plan"})
    ctx.state["booked"] = booked["id"]
    # Two async tool calls at once: each keeps its position (and key) on replay.
    a, b = await asyncio.gather(
        ctx.tool("quote", apost_json, f"{api}/quote", {"what": "a"}),
        ctx.tool("quote", apost_json, f"{api}/quote", {"what": "b"}),
    )
    ctx.state["quotes"] = [a["what"], b["what"]]
    if ctx.input.get("gate_dir"):
        await hold_while_flagged(ctx, "plan")
    callback = ctx.callback("reply")
    ctx.state["callback_url"] = callback.url
    return ctx.wait(callback, then="after_callback")


@trip.step
def after_callback(ctx: StepContext) -> Wait:
    assert ctx.wake is not None
    ctx.state["reply"] = ctx.wake.payload
    ctx.tool("note", post_json, f"{ctx.input['api']}/note", {"what": "sync"})
    return ctx.sleep(0.3, then="after_timer")


@trip.step
async def after_timer(ctx: StepContext) -> Wait:
    assert ctx.wake is not None and ctx.wake.kind == "timer"
    await ctx.tool("charge", apost_json, f"{ctx.input['api']}/charge", {"what": "timer"})
    return ctx.wait(Poll("async_ready", {"path": ctx.input["path"]}, every=0.2), then="finish")


@trip.step
async def finish(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete(
        {
            "booked": ctx.state["booked"],
            "quotes": ctx.state["quotes"],
            "reply": ctx.state["reply"],
            "polled": ctx.wake.payload,
        }
    )


# -- many in flight (a paused worker) ------------------------------------------------

crowd = Agent("async_crowd")


@crowd.step
async def gather_one(ctx: StepContext) -> Complete:
    await hold_while_flagged(ctx, "crowd", every=0.1)
    charge = await ctx.tool(
        "charge", apost_json, f"{ctx.input['api']}/charge", {"n": ctx.input["n"]}
    )
    return Complete({"charge": charge["id"]})


# -- a time limit and a saga ----------------------------------------------------------

slow = Agent(
    "async_slow", retry=RetryPolicy(max_attempts=3, min_delay=0.1, max_delay=0.2, time_limit=1)
)


@slow.step
async def dawdle(ctx: StepContext) -> Complete:
    tries = bump(ctx.input["counter"])
    if tries == 1:
        await asyncio.sleep(60)  # cancelled by the time limit
    return Complete({"tries": tries})


saga = Agent("async_saga", retry=RetryPolicy(max_attempts=1, compensation_attempts=3))


@saga.compensation
async def cancel_booking(
    request: dict[str, Any], response: dict[str, Any], idempotency_key: str
) -> None:
    url, body = request["args"]
    await apost_json(url.rsplit("/", 1)[0] + "/undo", {"what": body["what"]}, idempotency_key)


@saga.step
async def book(ctx: StepContext) -> str:
    api = ctx.input["api"]
    await ctx.tool("book", apost_json, f"{api}/book", {"what": "room"}, compensate="cancel_booking")
    return "confirm_booking"


@saga.step
async def confirm_booking(ctx: StepContext) -> Complete:
    raise PermanentError("the hotel is closed")


# A compensated call, then a failure in the same step: the call's result is
# recorded before the saga runs (it is not left for a commit that never comes).
saga_in_one_step = Agent(
    "async_saga_in_one_step", retry=RetryPolicy(max_attempts=1, compensation_attempts=3)
)
saga_in_one_step.compensation(cancel_booking)


@saga_in_one_step.step
async def book_then_fail(ctx: StepContext) -> Complete:
    api = ctx.input["api"]
    await ctx.tool(
        "book", apost_json, f"{api}/book", {"what": "table"}, compensate="cancel_booking"
    )
    raise PermanentError("the kitchen is closed")


# A compensated call, then a commit that rolls back (releasing a lock it does
# not hold is a CoordinationError in the commit's transaction): the call's
# result, which was to ride with that commit, is recorded before the saga.
saga_rolled_back = Agent(
    "async_saga_rolled_back", retry=RetryPolicy(max_attempts=1, compensation_attempts=3)
)
saga_rolled_back.compensation(cancel_booking)


@saga_rolled_back.step
async def book_then_release_a_stranger(ctx: StepContext) -> str:
    body = {"what": "car"}
    await ctx.tool(
        "book", apost_json, f"{ctx.input['api']}/book", body, compensate="cancel_booking"
    )
    ctx.release("never-held")
    return "book_then_release_a_stranger"


# More sagas at once than the loop has database threads, each compensation
# handing blocking work to a thread as agent code may (asyncio.to_thread).
saga_crowd = Agent("async_saga_crowd", retry=RetryPolicy(max_attempts=1, compensation_attempts=3))


@saga_crowd.compensation
async def release_seat(
    request: dict[str, Any], response: dict[str, Any], idempotency_key: str
) -> None:
    url, body = request["args"]
    await asyncio.sleep(0.3)  # the sagas overlap: each waits here while the others start
    await asyncio.to_thread(post_json, url.rsplit("/", 1)[0] + "/undo", body, idempotency_key)


@saga_crowd.step
async def hold_seat(ctx: StepContext) -> str:
    api, seat = ctx.input["api"], ctx.input["n"]
    await ctx.tool("hold", apost_json, f"{api}/hold", {"seat": seat}, compensate="release_seat")
    return "seat_confirmed"


@saga_crowd.step
async def seat_confirmed(ctx: StepContext) -> Complete:
    raise PermanentError("the flight is full")


# -- a blocking call inside an async step ---------------------------------------------

blocker = Agent("async_blocker")


@blocker.step
async def wait_or_block(ctx: StepContext) -> Complete:
    if ctx.input.get("gate_dir"):
        (Path(ctx.input["gate_dir"]) / f"entered-{ctx.session_id}").touch()
    if ctx.input.get("block"):
        time.sleep(float(ctx.input["seconds"]))  # the mistake: it blocks the whole loop
    else:
        await asyncio.sleep(float(ctx.input["seconds"]))
    await ctx.tool("charge", apost_json, f"{ctx.input['api']}/charge", {"n": ctx.input["n"]})
    return Complete({"n": ctx.input["n"]})


# -- many quick steps: a busy loop, no blocking call -----------------------------------

busy = Agent("async_busy")


@busy.step
async def think(ctx: StepContext) -> Complete:
    """Short awaits only (an LLM call's stand-in), with a little CPU between
    them (a prompt to build, an answer to parse): innocent, however long the
    loop's rounds get."""
    await hold_while_flagged(ctx, "think", every=0.1)
    for _ in range(int(ctx.input["rounds"])):
        await asyncio.sleep(0.005)
        end = time.thread_time() + float(ctx.input["cpu"])
        while time.thread_time() < end:
            pass
    return Complete({"rounds": ctx.input["rounds"]})


# -- mistakes, told clearly ------------------------------------------------------------

mistakes = Agent("async_mistakes", retry=RetryPolicy(max_attempts=1))


async def _later() -> str:
    return "never"


@mistakes.step
def forgot_async(ctx: StepContext) -> Any:
    if ctx.input.get("tool"):
        return ctx.tool("charge", apost_json, "http://127.0.0.1:9/charge", {})
    return _later()  # a coroutine returned by a sync step


# -- many steps (a stop mid-run) --------------------------------------------------------

relay = Agent("async_relay")


@relay.step
async def hop(ctx: StepContext) -> str | Complete:
    n = ctx.state.get("n", 0) + 1
    await asyncio.sleep(float(ctx.input.get("sleep", 0.1)))
    await ctx.tool("charge", apost_json, f"{ctx.input['api']}/charge", {"n": n})
    if ctx.input.get("gate_dir") and n == ctx.input.get("hold_at"):
        await hold_while_flagged(ctx, "hop")
    ctx.state["n"] = n
    if n >= int(ctx.input["steps"]):
        return Complete({"n": n})
    return "hop"


# -- every checkpoint strategy, with redaction ---------------------------------------------


async def _async_advance(ctx: StepContext) -> str | Complete:
    """tests.agents' history step, as an async step with an async tool call
    that carries a secret (redacted in the tool-call record and checkpoints)."""
    n = ctx.seq
    secret = ctx.input.get("secret")
    if ctx.input.get("api"):
        body = {"n": n, "api_key": secret} if secret else {"n": n}
        await ctx.tool("charge", apost_json, f"{ctx.input['api']}/charge", body)
    if secret:
        ctx.state["credentials"] = {"api_key": secret}
    if ctx.agent == "async_hist_events":
        ctx.emit({"n": n})
    else:
        transition(ctx.state, n)
    if n >= int(ctx.input["steps"]):
        return Complete({"n": n})
    return "advance"


async_hist_snapshot = Agent("async_hist_snapshot")
async_hist_incremental = Agent("async_hist_incremental", checkpoints=Incremental(snapshot_every=5))
async_hist_events = Agent("async_hist_events", checkpoints=EventSourced(_reduce, snapshot_every=7))
for _history_agent in (async_hist_snapshot, async_hist_incremental, async_hist_events):
    _history_agent.step(name="advance")(_async_advance)


# -- a slow sync step between async ones ----------------------------------------------------

mixed = Agent("async_mixed")


@mixed.step
async def before_sync(ctx: StepContext) -> str:
    (Path(ctx.input["gate_dir"]) / f"entered-{ctx.session_id}").touch()
    await asyncio.sleep(0.05)
    return "slow_sync"


@mixed.step
def slow_sync(ctx: StepContext) -> str:
    time.sleep(float(ctx.input["seconds"]))  # fine here: a sync step runs on a thread
    return "after_sync"


@mixed.step
async def after_sync(ctx: StepContext) -> Complete:
    await ctx.tool("charge", apost_json, f"{ctx.input['api']}/charge", {"n": ctx.input["n"]})
    return Complete({"n": ctx.input["n"]})


# A tool whose result PostgreSQL cannot store (NUL in a string): refused at
# the call, as any value that is not JSON, never left to fail the commit.
unstorable = Agent("async_unstorable_result", retry=RetryPolicy(max_attempts=2))


async def answer_with_nul(url: str, idempotency_key: str) -> dict[str, Any]:
    await apost_json(url, {"what": "nul"}, idempotency_key)
    return {"text": "a\x00b"}


@unstorable.step
async def ask_badly(ctx: StepContext) -> Complete:
    answer = await ctx.tool("answer", answer_with_nul, f"{ctx.input['api']}/answer")
    return Complete(answer)
