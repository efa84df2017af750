"""A saga of two bookings for test_record_faults.py: book A, book B, then a
permanent failure, so both bookings are undone, each once. Every call goes
to the ledger (a small HTTP server in the test) with its idempotency key."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

from resumable import Agent, StepContext, Wait
from resumable.errors import PermanentError
from resumable.retries import RetryPolicy


def post(url: str, name: str, idempotency_key: str) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps({"name": name, "key": idempotency_key}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


# One attempt: any failure the step is charged with is final, so a failure
# that is not the step's must not be charged to it.
booker = Agent("booker", retry=RetryPolicy(max_attempts=1, compensation_attempts=5))


@booker.compensation
def undo(request: dict[str, Any], response: dict[str, Any], idempotency_key: str) -> None:
    url, name = request["args"]
    post(url, f"undo-{name}", idempotency_key)


@booker.step
def book_a(ctx: StepContext) -> str:
    ctx.tool("book_a", post, ctx.input["ledger"], "a", compensate="undo")
    return "book_b"


@booker.step
def book_b(ctx: StepContext) -> str:
    ctx.tool("book_b", post, ctx.input["ledger"], "b", compensate="undo")
    return "give_up"


@booker.step
def give_up(ctx: StepContext) -> None:
    raise PermanentError("the trip is off")


abooker = Agent("abooker", retry=RetryPolicy(max_attempts=1, compensation_attempts=5))
abooker.compensation(undo)


async def apost(url: str, name: str, idempotency_key: str) -> dict[str, Any]:
    return await asyncio.to_thread(post, url, name, idempotency_key)


@abooker.step(name="book_a")
async def abook_a(ctx: StepContext) -> str:
    await ctx.tool("book_a", apost, ctx.input["ledger"], "a", compensate="undo")
    return "book_b"


@abooker.step(name="book_b")
async def abook_b(ctx: StepContext) -> str:
    await ctx.tool("book_b", apost, ctx.input["ledger"], "b", compensate="undo")
    await asyncio.sleep(0.2)  # its record goes on a database thread, not with the commit
    return "give_up"


@abooker.step(name="give_up")
async def agive_up(ctx: StepContext) -> None:
    raise PermanentError("the trip is off")


approver = Agent("approver", retry=RetryPolicy(max_attempts=1))


@approver.step
def ask(ctx: StepContext) -> Wait:
    """A token is committed as the step makes it: the database lost at that
    moment is not the step's failure either."""
    return ctx.wait(ctx.callback("approval"), then="done")


@approver.step
def done(ctx: StepContext) -> None:
    return None
