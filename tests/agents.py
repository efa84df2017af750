"""Agents used by the tests; worker subprocesses import this module."""

from __future__ import annotations

import contextlib
import gc
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from resumable import Agent, Complete, StepContext
from resumable.checkpoints import EventSourced, Incremental
from resumable.errors import PermanentError, TransientError
from resumable.retries import RetryPolicy
from resumable.waits import Children, Lock, Poll, Signal, Timer, Wait


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


# -- failures --------------------------------------------------------------------------


def bump(path: str) -> int:
    """A counter outside the session (failed attempts commit no state)."""
    counter = Path(path)
    value = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(value + 1))
    return value + 1


def rate_limited_call(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """A tool that turns HTTP 429/503 into a TransientError carrying Retry-After."""
    try:
        return post_json(url, body, idempotency_key)
    except urllib.error.HTTPError as exc:
        if exc.code in (429, 503):
            retry_after = float(exc.headers.get("Retry-After") or 0) or None
            raise TransientError(f"HTTP {exc.code}", retry_after=retry_after) from exc
        raise


flaky = Agent("flaky", retry=RetryPolicy(max_attempts=5, min_delay=0.3, max_delay=0.6))


@flaky.step
def attempt(ctx: StepContext) -> Complete:
    charge = ctx.tool("charge", post_json, f"{ctx.input['api']}/charge", {"amount": 5})
    tries = bump(ctx.input["counter"])
    if tries <= int(ctx.input.get("fail_times", 0)):
        raise TransientError(f"upstream hiccup #{tries}")
    if ctx.input.get("always"):
        raise TransientError("upstream down")
    if ctx.input.get("permanent"):
        raise PermanentError("card declined")
    return Complete({"tries": tries, "charge": charge["id"]})


rate_limits = Agent("rate_limits", retry=RetryPolicy(max_attempts=5, min_delay=0.1, max_delay=0.2))


@rate_limits.step
def call_limited(ctx: StepContext) -> Complete:
    answer = ctx.tool("limited", rate_limited_call, f"{ctx.input['api']}/limited", {"q": 1})
    return Complete(answer["id"])


slow = Agent("slow", retry=RetryPolicy(max_attempts=3, min_delay=0.1, max_delay=0.2, time_limit=1))


@slow.step
def dawdle(ctx: StepContext) -> Complete:
    tries = bump(ctx.input["counter"])
    if tries == 1:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # busy in Python: the time limit interrupts it
            time.sleep(0.01)
    return Complete({"tries": tries})


saga = Agent(
    "saga",
    retry=RetryPolicy(max_attempts=1, min_delay=0.1, max_delay=0.2, compensation_attempts=3),
)


def undo(request: dict[str, Any], response: dict[str, Any], idempotency_key: str) -> None:
    url, body = request["args"]
    gate = body.get("gate_dir")
    undo_url = url.rsplit("/", 1)[0] + "/undo"
    if body.get("undo_fails"):
        raise RuntimeError(f"cannot undo {body['what']}")
    post_json(undo_url, {"what": body["what"]}, idempotency_key)
    if gate and body["what"] == "hotel" and Path(gate, "hold").exists():
        Path(gate, "entered-undo-hotel").touch()
        deadline = time.monotonic() + 60
        while Path(gate, "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.02)


saga.compensation(undo)


def _book(ctx: StepContext, what: str) -> None:
    body = {
        "what": what,
        "gate_dir": ctx.input.get("gate_dir"),
        "undo_fails": what == "flight" and bool(ctx.input.get("undo_fails")),
    }
    ctx.tool(what, post_json, f"{ctx.input['api']}/book", body, compensate="undo")


@saga.step
def flight(ctx: StepContext) -> str:
    _book(ctx, "flight")
    return "hotel"


@saga.step
def hotel(ctx: StepContext) -> str:
    _book(ctx, "hotel")
    return "card"


@saga.step
def card(ctx: StepContext) -> str:
    _book(ctx, "card")
    return "confirm"


@saga.step
def confirm(ctx: StepContext) -> Complete:
    raise PermanentError("the airline cancelled the route")


fragile = Agent("fragile", retry=RetryPolicy(max_attempts=1))


@fragile.step
def needs_flag(ctx: StepContext) -> Complete:
    if not Path(ctx.input["flag"]).exists():
        raise PermanentError("the flag is not set")
    return Complete({"fixed": True, "patched": ctx.state.get("patched")})


unruly = Agent("unruly", retry=RetryPolicy(max_attempts=2, min_delay=0.1, max_delay=0.2))


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise ValueError("no text for this one")


class _Custom(BaseException):
    """Neither an Exception nor one of Python's own interrupts."""


def _fail_oddly(how: str) -> None:
    if how == "nul":
        raise RuntimeError("broke at \x00 with \ud800 in its text")
    if how == "unprintable":
        raise _UnprintableError()
    if how == "exit":
        raise SystemExit(3)
    if how == "interrupt":
        raise KeyboardInterrupt
    raise _Custom("not an Exception")


@unruly.step
def fail_oddly(ctx: StepContext) -> str:
    """Charge once, then fail in a way a careless step can: see `_fail_oddly`."""
    if ctx.input.get("async"):
        return "fail_oddly_async"
    ctx.tool("charge", post_json, f"{ctx.input['api']}/charge", {"how": ctx.input["how"]})
    _fail_oddly(ctx.input["how"])
    return "fail_oddly"


@unruly.step
async def fail_oddly_async(ctx: StepContext) -> str:
    ctx.tool("charge", post_json, f"{ctx.input['api']}/charge", {"how": ctx.input["how"]})
    _fail_oddly(ctx.input["how"])
    return "fail_oddly_async"


# -- history -----------------------------------------------------------------------------


def transition(state: dict[str, Any], n: int) -> dict[str, Any]:
    """Step n's small change to the state (shared by the agents and the tests'
    recording): a counter, one of ten memory items, a growing and trimmed log,
    a key that comes and goes."""
    memory = state.setdefault("memory", [{"id": i, "text": ""} for i in range(10)])
    memory[n % 10]["text"] = f"seen at step {n}"
    state["progress"] = {"n": n}
    log = state.setdefault("log", [])
    log.append(n)
    if len(log) > 6:
        del log[0]
    if n % 4 == 0:
        state["flag"] = n
    else:
        state.pop("flag", None)
    return state


def _advance(ctx: StepContext) -> str | Complete:
    n = ctx.seq
    if ctx.input.get("api"):
        ctx.tool("charge", post_json, f"{ctx.input['api']}/charge", {"n": n})
    if ctx.input.get("gate_dir") and n == ctx.input.get("hold_at"):
        hold_while_flagged(ctx, "advance")
    if ctx.input.get("secret"):
        ctx.state["credentials"] = {"api_key": ctx.input["secret"]}
    if isinstance(ctx.agent, str) and ctx.agent == "hist_events":
        ctx.emit({"n": n})
    else:
        transition(ctx.state, n)
    if n >= int(ctx.input["steps"]):
        return Complete({"n": n})
    return "advance"


def _reduce(state: dict[str, Any], event: Any) -> dict[str, Any]:
    return transition(json.loads(json.dumps(state)), int(event["n"]))


hist_snapshot = Agent("hist_snapshot")
hist_incremental = Agent("hist_incremental", checkpoints=Incremental(snapshot_every=5))
hist_events = Agent("hist_events", checkpoints=EventSourced(_reduce, snapshot_every=7))
for _history_agent in (hist_snapshot, hist_incremental, hist_events):
    _history_agent.step(name="advance")(_advance)


leaky = Agent("leaky", retry=RetryPolicy(max_attempts=1))


@leaky.step
def hold_secret(ctx: StepContext) -> str:
    secret = ctx.input["secret"]
    ctx.state["auth"] = {"api_key": secret, "user": "alice"}
    ctx.tool("login", post_json, f"{ctx.input['api']}/login", {"user": "alice", "password": secret})
    # A failed call is recorded too; its error must not hold the secret.
    with contextlib.suppress(ValueError):
        ctx.tool("refuse", _refuse, {"password": secret})
    return "leak"


def _refuse(body: dict[str, Any]) -> None:
    raise ValueError(f"wrong password {body['password']}")


@leaky.step
def leak(ctx: StepContext) -> str:
    raise PermanentError(f"login rejected for key {ctx.state['auth']['api_key']}")


# -- leases, time limits and shutdown (tests/integration/test_leases.py and friends) ----


def post_then_hold(url: str, body: dict[str, Any], gate_dir: str, idempotency_key: str) -> Any:
    """A tool that makes its effect, then waits while the test's hold file exists
    (so a test can pause the worker inside the call, after the effect)."""
    result = post_json(url, body, idempotency_key)
    gate = Path(gate_dir)
    if (gate / "hold").exists():
        (gate / "entered-tool").touch()
        deadline = time.monotonic() + 120
        while (gate / "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return result


ledger = Agent("ledger")


@ledger.step
def pay(ctx: StepContext) -> Complete:
    paid = ctx.tool(
        "pay", post_then_hold, f"{ctx.input['api']}/pay", {"amount": 7}, ctx.input["gate_dir"]
    )
    return Complete({"paid": paid})


stubborn = Agent(
    "stubborn", retry=RetryPolicy(max_attempts=2, min_delay=0.1, max_delay=0.2, time_limit=1)
)
stubborn.compensation(undo)


@stubborn.step
def reserve(ctx: StepContext) -> str:
    _book(ctx, "seat")
    return "stall"


@stubborn.step
def stall(ctx: StepContext) -> Complete:
    """Busy in Python past its time limit, inside a catch-all for Exception."""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.01)
    except Exception:
        Path(ctx.input["swallowed"]).touch()  # a time-out must never land here
    return Complete({"stalled": True})


hung = Agent("hung", retry=RetryPolicy(max_attempts=1, time_limit=1))


@hung.step
def block(ctx: StepContext) -> Complete:
    """Blocked in C (time.sleep) past its time limit: nothing can interrupt it."""
    time.sleep(float(ctx.input["seconds"]))
    return Complete({"blocked": True})


def refuse_refund(request: dict[str, Any], response: dict[str, Any]) -> None:
    bump(request["args"][1]["counter"])
    raise PermanentError("the airline refuses refunds")


stuck_saga = Agent(
    "stuck_saga",
    retry=RetryPolicy(max_attempts=1, min_delay=0.1, max_delay=0.2, compensation_attempts=5),
)
stuck_saga.compensation(refuse_refund)


@stuck_saga.step
def book_flight(ctx: StepContext) -> str:
    body = {"what": "flight", "counter": ctx.input["counter"]}
    ctx.tool("flight", post_json, f"{ctx.input['api']}/book", body, compensate="refuse_refund")
    return "cancelled_route"


@stuck_saga.step
def cancelled_route(ctx: StepContext) -> Complete:
    raise PermanentError("the airline cancelled the route")


heap_report = Agent("heap_report")


@heap_report.step
def report_heap(ctx: StepContext) -> Complete:
    """What the worker process running this step has frozen (startup_heap.py)."""
    return Complete({"frozen": gc.get_freeze_count()})


# -- hostile step outcomes ----------------------------------------------------------------

# Each of these once failed outside the step's error handling, or as an error
# the retry policy took for transient: retried (repeating a tool call) or left
# running for the reconciler to re-enqueue forever.
hostile = Agent("hostile", retry=RetryPolicy(max_attempts=3, min_delay=0.05, max_delay=0.1))


def huge_result(counter: str, idempotency_key: str) -> dict[str, int]:
    bump(counter)  # the side effect, counted outside the session
    return {"n": 10**5000}  # more digits than json writes


@hostile.step
def misbehave(ctx: StepContext) -> Any:
    how = ctx.input["how"]
    if how == "huge_tool_result":
        ctx.tool("huge", huge_result, ctx.input["counter"])
        return Complete(None)
    if how == "huge_result":
        return Complete(10**5000)
    if how == "nul_tool_name":
        ctx.tool("pay\x00", huge_result, ctx.input["counter"])
        return Complete(None)
    if how in ("nul_child", "long_child"):
        ctx.tool("bump", bump, ctx.input["counter"])  # before the spawn: made once
        ctx.spawn("kid\x00" if how == "nul_child" else "k" * 201)
        return Complete(None)
    if how == "deep_state":
        nested: list[Any] = []
        for _ in range(50_000):
            nested = [nested]
        ctx.state["deep"] = nested
        return Complete(None)
    waits: dict[str, Any] = {
        "nul_signal": lambda: ctx.wait(Signal("a\x00b"), then="misbehave"),
        "surrogate_signal": lambda: ctx.wait(Signal("\ud800"), then="misbehave"),
        "int_signal": lambda: ctx.wait(Signal(5), then="misbehave"),  # type: ignore[arg-type]
        "nul_poll_args": lambda: ctx.wait(Poll("x", {"a": "\x00"}, every=1), then="misbehave"),
        "nul_lock": lambda: ctx.wait(Lock("L\x00"), then="misbehave"),
        "bad_child": lambda: ctx.wait(Children(["not-a-uuid"]), then="misbehave"),
        "nan_sleep": lambda: ctx.sleep(float("nan"), then="misbehave"),
        "huge_sleep": lambda: ctx.sleep(1e300, then="misbehave"),
        "inf_timeout": lambda: ctx.wait(Signal("go"), then="misbehave", timeout=float("inf")),
        "nul_callback": lambda: ctx.wait(ctx.callback("a\x00"), then="misbehave"),
    }
    return waits[how]()


late_failer = Agent("late_failer", retry=RetryPolicy(max_attempts=1))


@late_failer.step
def fails_after_hold(ctx: StepContext) -> Complete:
    """Fails for good, but only once the test lets it go (after a cancel)."""
    hold_while_flagged(ctx, "fails_after_hold")
    raise PermanentError("too late to matter")
