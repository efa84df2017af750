"""Agents for the operator console's tests; worker subprocesses import this module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.errors import PermanentError
from resumable.retries import RetryPolicy
from resumable.waits import Children, Signal, Wait

# What an attacker would like a page to run, stored where agents, tools and
# errors put values; the console must show each as text.
SCRIPT = "<script>alert(1)</script>"
IMAGE = '"><img src=x onerror=alert(1)>'
JAVASCRIPT_URL = "javascript:alert(1)"
HTTP_URL = "https://example.com/orders?id=1&q=a%20b"
UNICODE = "Zoë ✓ 東京 🚀 \u202egnp.exe"
LONG = "long:" + "x" * 100_000

# -- fixable: fails until an operator patches the state (or a flag file appears) ---

fixable = Agent("console_fixable", retry=RetryPolicy(max_attempts=1))


@fixable.step
def prepare(ctx: StepContext) -> str:
    ctx.state["order"] = {"id": ctx.input.get("order", 1), "items": ["book"]}
    return "check"


@fixable.step
def check(ctx: StepContext) -> Complete:
    flag = ctx.input.get("flag")
    if not ctx.state.get("fixed") and not (flag and Path(flag).exists()):
        raise PermanentError("the order needs state.fixed (retry with a patch)")
    return Complete({"fixed": ctx.state.get("fixed"), "order": ctx.state["order"]})


# -- compensated: a saga whose undo ran, so its dead letter refuses a retry -----------

compensated = Agent("console_compensated", retry=RetryPolicy(max_attempts=1))


def reserve(item: str, idempotency_key: str) -> dict[str, Any]:
    return {"reserved": item, "key": idempotency_key}


def release(request: dict[str, Any], response: dict[str, Any], idempotency_key: str) -> None:
    """Nothing outside to undo: the point is that the saga ran."""


compensated.compensation(release)


@compensated.step
def book(ctx: StepContext) -> str:
    ctx.tool("reserve", reserve, "seat", compensate="release")
    return "pay"


@compensated.step
def pay(ctx: StepContext) -> Complete:
    raise PermanentError("the card was declined")


# -- hostile: puts attacker-shaped strings in its state, a tool result and its error -----

hostile = Agent("console_hostile", retry=RetryPolicy(max_attempts=1))


def echo(values: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    return {"echo": values, "note": SCRIPT + IMAGE}


@hostile.step
def poison(ctx: StepContext) -> str:
    values = {
        "script": SCRIPT,
        "image": IMAGE,
        "link": JAVASCRIPT_URL,
        "site": HTTP_URL,
        "unicode": UNICODE,
        SCRIPT: IMAGE,  # a hostile key, too
    }
    ctx.state.update(values)
    ctx.state["long"] = LONG
    ctx.tool("echo", echo, values)
    return "explode"


@hostile.step
def explode(ctx: StepContext) -> Complete:
    raise PermanentError(f"refused {SCRIPT} {IMAGE} {JAVASCRIPT_URL} {UNICODE}")


# -- waiting: suspends for a signal, for cancel and signal actions --------------------

waiting = Agent("console_waiting")


@waiting.step
def hold(ctx: StepContext) -> Wait:
    ctx.state["asked"] = True
    return ctx.wait(Signal("approve"), then="approved")


@waiting.step
def approved(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete({"payload": ctx.wake.payload})


# -- a parent: spawns two waiting children and waits for them -------------------------

family = Agent("console_family")


@family.step
def fan_out(ctx: StepContext) -> Wait:
    ctx.state["children"] = [str(ctx.spawn("console_waiting", {"n": n})) for n in range(2)]
    return ctx.wait(Children(ctx.state["children"]), then="gathered")


@family.step
def gathered(ctx: StepContext) -> Complete:
    return Complete({"children": ctx.state["children"]})
