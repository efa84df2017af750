"""Agents used by the tests; worker subprocesses import this module."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.retries import RetryPolicy
from resumable.waits import Poll, Signal, Timer, Wait


def post_json(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """A tool: POST to the fake external API, passing our idempotency key on."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def hold_while_flagged(ctx: StepContext, name: str) -> None:
    """Announce that this step is running, then wait while the test's hold file exists."""
    gate = Path(ctx.input["gate_dir"])
    (gate / f"entered-{name}-{ctx.seq}").touch()
    deadline = time.monotonic() + 120
    while (gate / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


# -- five steps, in order ------------------------------------------------------------

five = Agent("five")


def _append(ctx: StepContext, name: str) -> None:
    ctx.state.setdefault("progress", []).append(name)


@five.step
def one(ctx: StepContext) -> str:
    _append(ctx, "one")
    return "two"


@five.step
def two(ctx: StepContext) -> str:
    _append(ctx, "two")
    return "three"


@five.step
def three(ctx: StepContext) -> str:
    _append(ctx, "three")
    return "four"


@five.step
def four(ctx: StepContext) -> str:
    _append(ctx, "four")
    return "five"


@five.step(name="five")
def five_(ctx: StepContext) -> Complete:
    _append(ctx, "five")
    return Complete({"progress": ctx.state["progress"]})


# -- counting steps, each with one charge (crash and duplicate tests) ----------------

counter = Agent("counter")


@counter.step
def count(ctx: StepContext) -> str | Complete:
    n = ctx.state.get("n", 0) + 1
    if ctx.input.get("api"):
        ctx.tool("charge", post_json, f"{ctx.input['api']}/charge", {"n": n})
    if ctx.input.get("gate_dir") and n == ctx.input.get("hold_at"):
        hold_while_flagged(ctx, "count")
    if ctx.input.get("sleep"):
        time.sleep(float(ctx.input["sleep"]))
    ctx.state["n"] = n
    if n >= int(ctx.input.get("steps", 10)):
        return Complete({"n": n})
    return "count"


# -- bad behaviour -------------------------------------------------------------------

bad = Agent("bad", retry=RetryPolicy(max_attempts=1))


@bad.step
def dispatch(ctx: StepContext) -> str:
    ctx.state["touched"] = True
    return str(ctx.input["go"])


@bad.step
def raises(ctx: StepContext) -> str:
    raise RuntimeError("the step broke")


@bad.step
def unserializable(ctx: StepContext) -> str:
    ctx.state["when"] = object()
    return "raises"


@bad.step
def unknown_next(ctx: StepContext) -> str:
    return "no_such_step"


@bad.step
def wrong_type(ctx: StepContext) -> Any:
    return 42


# -- waits ---------------------------------------------------------------------------

approval = Agent("approval")


@approval.step
def ask(ctx: StepContext) -> Wait:
    callback = ctx.callback("approval")
    ctx.state["callback_url"] = callback.url
    if ctx.input.get("gate_dir"):
        # The early-delivery race: publish the URL, then keep the step running.
        gate = Path(ctx.input["gate_dir"])
        (gate / "callback_url.tmp").write_text(callback.url)
        (gate / "callback_url.tmp").rename(gate / "callback_url")
        hold_while_flagged(ctx, "ask")
    return ctx.wait(callback, then="decide", timeout=ctx.input.get("timeout"))


@approval.step
def decide(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    ctx.state["decision"] = {"kind": ctx.wake.kind, "payload": ctx.wake.payload}
    return Complete(ctx.state["decision"])


signalled = Agent("signalled")


@signalled.step
def await_signal(ctx: StepContext) -> Wait:
    return ctx.wait(
        Signal(ctx.input.get("topic", "approve")),
        then="signalled_done",
        timeout=ctx.input.get("timeout"),
    )


@signalled.step
def signalled_done(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete({"kind": ctx.wake.kind, "topic": ctx.wake.topic, "payload": ctx.wake.payload})


sleeper = Agent("sleeper")


@sleeper.step
def nap(ctx: StepContext) -> Wait:
    ctx.state["slept_at"] = time.time()
    return ctx.sleep(float(ctx.input["seconds"]), then="woke")


@sleeper.step
def woke(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete({"kind": ctx.wake.kind, "late_by": time.time() - ctx.state["slept_at"]})


poller = Agent("poller")


@poller.check
def file_ready(args: dict[str, Any]) -> str | None:
    path = Path(args["path"])
    return path.read_text() if path.exists() else None


@poller.step
def start_polling(ctx: StepContext) -> Wait:
    return ctx.wait(
        Poll("file_ready", {"path": ctx.input["path"]}, every=float(ctx.input.get("every", 0.3))),
        then="polled",
        timeout=ctx.input.get("timeout"),
    )


@poller.step
def polled(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete({"kind": ctx.wake.kind, "payload": ctx.wake.payload})


either = Agent("either")


@either.step
def race(ctx: StepContext) -> Wait:
    """A callback or a timer, whichever comes first."""
    callback = ctx.callback("reply", timeout=ctx.input.get("callback_timeout"))
    ctx.state["callback_url"] = callback.url
    return ctx.wait(callback, Timer(seconds=float(ctx.input["timer"])), then="raced")


@either.step
def raced(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    return Complete({"kind": ctx.wake.kind, "payload": ctx.wake.payload})
