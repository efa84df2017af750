"""The agents of ``benchmarks/bursts.py``; the worker subprocesses import them.

``bench_burst_timer`` suspends on a timer an hour away (the benchmark then
makes every timer due at the same instant) and completes in the step after.
``bench_burst_poll`` suspends on a poll whose check finds its value at the
first check (the benchmark makes every check due at once). ``bench_burst_retry``
fails its first attempt with a transient error whose retry is an hour away (the
benchmark then makes every retry due at once) and completes on the next: while
``input["fail"]`` is true it fails, and the benchmark sets it to false once every
session is retrying (a step cannot tell its attempt, and the first attempt's state
is not kept). ``bench_burst_steps`` only counts, ``input["steps"]`` steps per
session: the workers' step rate that a burst's wake rate is compared with.
"""

from __future__ import annotations

from typing import Any

from resumable import Agent, Complete, RetryPolicy, StepContext, TransientError
from resumable.waits import Poll, Timer, Wait

TIMER_AGENT = "bench_burst_timer"
POLL_AGENT = "bench_burst_poll"
RETRY_AGENT = "bench_burst_retry"
STEPS_AGENT = "bench_burst_steps"
FAR = 3600.0  # seconds: far enough that no timer or check falls due by itself

timer = Agent(TIMER_AGENT, description="Benchmark agent: sleep on a timer, then complete.")
poll = Agent(POLL_AGENT, description="Benchmark agent: poll a check, then complete.")
retry = Agent(
    RETRY_AGENT,
    description="Benchmark agent: fail once, retry an hour later, then complete.",
    retry=RetryPolicy(max_attempts=2, min_delay=FAR, max_delay=FAR, jitter=False),
)
steps = Agent(STEPS_AGENT, description="Benchmark agent: every step only counts.")


@timer.step
def nap(ctx: StepContext) -> Wait:
    return ctx.wait(Timer(seconds=FAR), then="woke")


@timer.step
def woke(ctx: StepContext) -> Complete:
    return Complete({"woken_by": ctx.wake.kind if ctx.wake is not None else None})


@poll.check
def ready(args: dict[str, Any]) -> Any:
    return {"ready": True}


@poll.step
def watch(ctx: StepContext) -> Wait:
    return ctx.wait(Poll("ready", every=FAR), then="seen")


@poll.step
def seen(ctx: StepContext) -> Complete:
    return Complete({"woken_by": ctx.wake.kind if ctx.wake is not None else None})


@retry.step
def flaky(ctx: StepContext) -> Complete:
    if ctx.input["fail"]:
        raise TransientError("the benchmark's first attempt fails", retry_after=FAR)
    return Complete({"attempted": True})


@steps.step
def count(ctx: StepContext) -> str | Complete:
    counter = int(ctx.state.get("counter", 0)) + 1
    ctx.state["counter"] = counter
    if counter >= int(ctx.input["steps"]):
        return Complete({"steps": counter})
    return "count"
