"""The workload the fault matrix (``python -m tests.faults``) runs through every
fault; its worker processes import this module.

Four agents, each making its side effects against the external ledger (a
real HTTP server in the matrix's process) with the idempotency key resumable
hands it, and naming each logical call, so the matrix can count effects per
logical call both raw and deduplicated by key:

- ``fm_steps``: sync steps, one ledger call each, that also sleep on a
  durable timer (the scheduler wakes it) and wait for an external callback
  (the matrix POSTs it, signed, to the web process);
- ``fm_async``: the same steps as ``async def`` on the worker's event loop;
- ``fm_saga``: two bookings, then a permanent failure: the saga's
  compensations undo both, each once, and the session ends ``failed``;
- ``fm_lock``: takes a lock shared by every session of its kind, makes one
  fenced call under it and lets it go;
- ``fm_limited``: ``fm_steps``' steps under a concurrency limit of two per
  phase (``resumable/limits.py``): most of a batch's sessions wait for a
  slot, parked without a message, when the fault strikes;
- ``fm_rated``: ``fm_async``'s steps with each ledger call under a rate
  limit shared by every worker (``RateLimit``, five a second): calls wait
  for their turn in place, or their session lets its worker go until it.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

from resumable import Agent, Complete, Concurrency, RateLimit, StepContext
from resumable.errors import PermanentError
from resumable.retries import RetryPolicy
from resumable.waits import Timer, Wait

STEPS, ASYNC, SAGA, LOCK = "fm_steps", "fm_async", "fm_saga", "fm_lock"
LIMITED, RATED = "fm_limited", "fm_rated"
KINDS = (STEPS, ASYNC, SAGA, LOCK, LIMITED, RATED)
# The slots of each phase's key (its sessions' input "phase").
LIMITED_SLOTS = 2
LOCK_NAME = "fm-ledger"


def record_effect(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """The side effect: POST to the ledger, passing our idempotency key on."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def record_fenced(
    url: str, body: dict[str, Any], idempotency_key: str, fencing_token: int
) -> dict[str, Any]:
    """A write under the lock, carrying its fencing token as a fenced API expects."""
    return record_effect(url, {**body, "token": fencing_token}, idempotency_key)


def _call(ctx: StepContext, name: str) -> dict[str, Any]:
    return {"session": str(ctx.session_id), "n": name}


def _next(ctx: StepContext, n: int) -> str | Complete | Wait:
    """After call `n`: wait where the input says (a timer, a callback), else go on."""
    ctx.state["n"] = n
    if n >= int(ctx.input["steps"]):
        return Complete({"n": n})
    if n == ctx.input.get("timer_at"):
        return ctx.wait(Timer(seconds=float(ctx.input.get("timer_seconds", 0.3))), then="work")
    if n == ctx.input.get("callback_at"):
        return ctx.wait(ctx.callback("go"), then="work")
    return "work"


steps = Agent(STEPS, description="Fault matrix: sync steps, a timer and a callback.")


@steps.step
def work(ctx: StepContext) -> str | Complete | Wait:
    n = int(ctx.state.get("n", 0)) + 1
    ctx.tool("ledger", record_effect, ctx.input["ledger"], _call(ctx, f"step-{n}"))
    time.sleep(float(ctx.input.get("work_ms", 0)) / 1000)
    return _next(ctx, n)


limited = Agent(
    LIMITED,
    concurrency=Concurrency(limit=LIMITED_SLOTS, key="phase"),
    description="Fault matrix: the sync steps, two sessions of a phase at a time.",
)
limited.step(work)


async_steps = Agent(ASYNC, description="Fault matrix: the same steps, async.")


async def arecord_effect(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    return await asyncio.to_thread(record_effect, url, body, idempotency_key)


@async_steps.step(name="work")
async def awork(ctx: StepContext) -> str | Complete | Wait:
    n = int(ctx.state.get("n", 0)) + 1
    await asyncio.sleep(float(ctx.input.get("work_ms", 0)) / 1000)
    await ctx.tool("ledger", arecord_effect, ctx.input["ledger"], _call(ctx, f"step-{n}"))
    return _next(ctx, n)


rated = Agent(
    RATED,
    rate_limits=[RateLimit("fm-ledger", requests=5, per=1, wait_in_place=0.5)],
    description="Fault matrix: the async steps, their calls five a second for every worker.",
)


@rated.step(name="work")
async def rated_work(ctx: StepContext) -> str | Complete | Wait:
    n = int(ctx.state.get("n", 0)) + 1
    await asyncio.sleep(float(ctx.input.get("work_ms", 0)) / 1000)
    call = _call(ctx, f"step-{n}")
    await ctx.tool("ledger", arecord_effect, ctx.input["ledger"], call, rate_limit="fm-ledger")
    return _next(ctx, n)


saga = Agent(
    SAGA,
    retry=RetryPolicy(max_attempts=1, compensation_attempts=20, min_delay=0.1, max_delay=0.5),
    description="Fault matrix: two bookings, a permanent failure, both undone.",
)


def undo(request: dict[str, Any], response: dict[str, Any], idempotency_key: str) -> None:
    url, body = request["args"]
    record_effect(url, {**body, "n": f"undo-{body['n']}"}, idempotency_key)


saga.compensation(undo)


@saga.step
def book_first(ctx: StepContext) -> str:
    ctx.tool("book", record_effect, ctx.input["ledger"], _call(ctx, "book-1"), compensate="undo")
    time.sleep(float(ctx.input.get("work_ms", 0)) / 1000)
    return "book_second"


@saga.step
def book_second(ctx: StepContext) -> str:
    ctx.tool("book", record_effect, ctx.input["ledger"], _call(ctx, "book-2"), compensate="undo")
    time.sleep(float(ctx.input.get("work_ms", 0)) / 1000)
    return "give_up"


@saga.step
def give_up(ctx: StepContext) -> Complete:
    raise PermanentError("the fault matrix's saga always fails here")


lock = Agent(LOCK, description="Fault matrix: one fenced call under a shared lock.")


@lock.step
def acquire(ctx: StepContext) -> Wait:
    return ctx.lock(LOCK_NAME, then="write")


@lock.step
def write(ctx: StepContext) -> Complete:
    body = _call(ctx, "locked")
    ctx.tool("locked", record_fenced, ctx.input["ledger"], body, fence=LOCK_NAME)
    time.sleep(float(ctx.input.get("work_ms", 0)) / 1000)
    ctx.release(LOCK_NAME)
    return Complete({"locked": True})


def expected_calls(kind: str, session_input: dict[str, Any]) -> list[str]:
    """The logical calls a finished session of `kind` made, each exactly once."""
    if kind in (STEPS, ASYNC, LIMITED, RATED):
        return [f"step-{n}" for n in range(1, int(session_input["steps"]) + 1)]
    if kind == SAGA:
        return ["book-1", "book-2", "undo-book-1", "undo-book-2"]
    return ["locked"]


def expected_status(kind: str) -> str:
    return "failed" if kind == SAGA else "completed"
