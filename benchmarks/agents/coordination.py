"""Agents of ``benchmarks/coordination.py``; the worker subprocesses import it."""

from __future__ import annotations

import time
from typing import Any

from resumable import Agent, Children, StepContext

# Each step adds one to a shared counter (`keys` counters, chosen by session).
counter = Agent("bench_shared_counter")


@counter.step
def add(ctx: StepContext) -> Any:
    key = f"bench:{ctx.input['key']}"
    ctx.update_shared(key, lambda n: (n or 0) + 1)
    done = ctx.state.get("done", 0) + 1
    ctx.state["done"] = done
    return ctx.complete(done) if done >= ctx.input["updates"] else "add"


# The same sessions without the shared update: what the steps cost alone.
plain = Agent("bench_plain_counter")


@plain.step
def count(ctx: StepContext) -> Any:
    done = ctx.state.get("done", 0) + 1
    ctx.state["done"] = done
    return ctx.complete(done) if done >= ctx.input["updates"] else "count"


# Lock hand-off: take the lock, note when the holding step started, release.
holder = Agent("bench_lock_holder")


@holder.step
def take(ctx: StepContext) -> Any:
    return ctx.lock("bench-lock", then="hold")


@holder.step
def hold(ctx: StepContext) -> Any:
    assert ctx.wake is not None
    started = time.time()
    ctx.release("bench-lock")
    return ctx.complete({"token": ctx.wake.payload["token"], "started": started})


# Fan-out / fan-in.
parent = Agent("bench_parent")


@parent.step
def fan_out(ctx: StepContext) -> Any:
    ids = [ctx.spawn("bench_child", {"i": i}) for i in range(ctx.input["children"])]
    return ctx.wait(Children(ids), then="fan_in")


@parent.step
def fan_in(ctx: StepContext) -> Any:
    assert ctx.wake is not None
    return ctx.complete({"results": len(ctx.wake.payload["results"])})


child = Agent("bench_child")


@child.step
def work(ctx: StepContext) -> Any:
    return ctx.complete({"i": ctx.input["i"]})
