"""Agents of the coordination tests; worker subprocesses import this module."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from resumable import Agent, StepContext
from resumable.retries import RetryPolicy
from resumable.waits import Children, Signal

# -- shared state --------------------------------------------------------------------

incrementer = Agent("shared_incrementer")


@incrementer.step
def increment(ctx: StepContext) -> Any:
    """One atomic increment of the shared counter per step, `times` steps."""
    name = ctx.input.get("counter", "counter")
    ctx.update_shared(name, lambda n: (n or 0) + 1)
    done = ctx.state.get("done", 0) + 1
    ctx.state["done"] = done
    if done >= ctx.input["times"]:
        return ctx.complete({"done": done})
    return "increment"


shared_failing = Agent("shared_failing", retry=RetryPolicy(max_attempts=1))


@shared_failing.step
def update_then_fail(ctx: StepContext) -> Any:
    """Updates a document, then fails: the update must not commit."""
    ctx.update_shared("never", lambda _: "written")
    raise RuntimeError("the step fails after its update")


shared_reader = Agent("shared_reader")


@shared_reader.step
def read_own_write(ctx: StepContext) -> Any:
    before = ctx.shared("doc", default={})
    preview = ctx.update_shared("doc", lambda d: {**(d or {}), ctx.input["key"]: True})
    return ctx.complete({"before": before, "preview": preview, "after": ctx.shared("doc")})


# -- locks and semaphores ------------------------------------------------------------


def _post(url: str, body: dict[str, Any], fencing_token: int | None = None) -> dict[str, Any]:
    if fencing_token is not None:
        body = {**body, "token": fencing_token}
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def _hold(ctx: StepContext) -> None:
    """Announce this run (with its process group, for the test to signal),
    then wait while the test's hold file exists."""
    gate = Path(ctx.input["gate_dir"])
    (gate / f"entered-{ctx.session_id}").write_text(str(os.getpgrp()))
    deadline = time.monotonic() + 60
    while (gate / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _held_post(url: str, body: dict[str, Any], gate_dir: str, fencing_token: int) -> Any:
    """A write that announces itself and waits at the test's gate first. The
    announcement names the token: a run that took over (the first one lost its
    lease early on a loaded machine) announces itself apart, and the test
    pauses exactly the run whose token it means to see rejected."""
    gate = Path(gate_dir)
    (gate / f"entered-{body['session']}-{fencing_token}").write_text(str(os.getpgrp()))
    deadline = time.monotonic() + 60
    while (gate / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return _post(url, body, fencing_token)


ledger_writer = Agent("ledger_writer", retry=RetryPolicy(max_attempts=1))


@ledger_writer.step
def acquire(ctx: StepContext) -> Any:
    return ctx.lock(ctx.input["lock"], then="write")


@ledger_writer.step
def write(ctx: StepContext) -> Any:
    """Two writes under the lock, each carrying the fencing token (not part of
    the calls' identity: a new run sends its own, larger one)."""
    name, url = ctx.input["lock"], ctx.input["ledger"]
    body = {"session": str(ctx.session_id)}
    ctx.tool("begin", _post, f"{url}/begin", body, fence=name)
    time.sleep(0.02)  # long enough for a second holder, if there were one, to interleave
    if ctx.input.get("hold"):  # paused by the test inside the call, its token in hand
        ctx.tool("end", _held_post, f"{url}/end", body, ctx.input["gate_dir"], fence=name)
    else:
        ctx.tool("end", _post, f"{url}/end", body, fence=name)
    ctx.release(name)
    return ctx.complete({"token": ctx.fence(name)})


semaphore_user = Agent("semaphore_user", retry=RetryPolicy(max_attempts=1))


@semaphore_user.step
def ask(ctx: StepContext) -> Any:
    return ctx.semaphore("api", ctx.input["permits"], then="use")


@semaphore_user.step
def use(ctx: StepContext) -> Any:
    assert ctx.wake is not None and ctx.wake.kind == "lock"
    token = ctx.wake.payload["token"]
    ctx.tool("enter", _post, f"{ctx.input['gauge']}/enter", {"session": str(ctx.session_id)})
    _hold(ctx)
    time.sleep(0.05)
    ctx.tool("exit", _post, f"{ctx.input['gauge']}/exit", {"session": str(ctx.session_id)})
    # No release: completing the session releases what it holds.
    return ctx.complete({"token": token})


lock_holder = Agent("lock_holder", retry=RetryPolicy(max_attempts=1))


@lock_holder.step
def take(ctx: StepContext) -> Any:
    return ctx.lock(ctx.input["lock"], then="hold", timeout=ctx.input.get("timeout"))


@lock_holder.step
def hold(ctx: StepContext) -> Any:
    assert ctx.wake is not None
    if ctx.wake.timed_out:
        return ctx.complete({"timed_out": True})
    if ctx.input.get("fail"):
        raise RuntimeError("fails while holding the lock")
    flag = ctx.input.get("fail_once")
    if flag and not Path(flag).exists():  # dead-lettered once; a retry goes on
        Path(flag).touch()
        raise RuntimeError("fails once while holding the lock")
    ctx.state["token"] = ctx.fence(ctx.input["lock"])
    return ctx.wait(Signal("go"), then="finish")


@lock_holder.step
def finish(ctx: StepContext) -> Any:
    return ctx.complete({"token": ctx.state["token"]})


out_of_order = Agent("out_of_order", retry=RetryPolicy(max_attempts=1))


@out_of_order.step
def take_b(ctx: StepContext) -> Any:
    return ctx.lock("b", then="take_a")


@out_of_order.step
def take_a(ctx: StepContext) -> Any:
    return ctx.lock("a", then="never")


@out_of_order.step
def never(ctx: StepContext) -> Any:
    return ctx.complete()


# -- child sessions ------------------------------------------------------------------

planner = Agent("planner")


@planner.step
def fan_out(ctx: StepContext) -> Any:
    ids = [
        ctx.spawn("researcher", {**ctx.input.get("child", {}), "i": i})
        for i in range(ctx.input["children"])
    ]
    return ctx.wait(
        Children(ids, on_failure=ctx.input.get("on_failure", "inform")),
        then="fan_in",
        timeout=ctx.input.get("timeout"),
    )


@planner.step
def fan_in(ctx: StepContext) -> Any:
    assert ctx.wake is not None
    if ctx.wake.timed_out:  # nothing of its children's fates reached it
        return ctx.complete({"timed_out": True})
    assert ctx.wake.kind == "children"
    results, failures = ctx.wake.payload["results"], ctx.wake.payload["failures"]
    return ctx.complete(
        {
            "results": len(results),
            "failures": sorted(f["status"] for f in failures.values()),
            "sum": sum(r["i"] for r in results.values()),
        }
    )


researcher = Agent("researcher", retry=RetryPolicy(max_attempts=1))


@researcher.step
def research(ctx: StepContext) -> Any:
    if "api" in ctx.input:
        ctx.tool("work", post_json_keyed, ctx.input["api"], {"i": ctx.input["i"]})
    gate = ctx.input.get("fail_while")
    if gate and Path(gate).exists() and ctx.input["i"] == 0:
        raise RuntimeError("child 0 fails while the flag file exists")
    if ctx.input.get("wait_signal"):
        return ctx.wait(Signal("go"), then="finish_research")
    return ctx.complete({"i": ctx.input["i"]})


@researcher.step
def finish_research(ctx: StepContext) -> Any:
    return ctx.complete({"i": ctx.input["i"]})


def post_json_keyed(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result
