"""The agent of ``benchmarks/resume.py``; the worker subprocesses import it.

Step one creates a callback, keeps its URL in the state and suspends on it.
Step two, run once the callback has been POSTed, reads the clock before doing
anything else and completes with that time as its result, so the benchmark
can tell how long after its POST the resumed step started, and with it the
queue message's own timings (sent by the web process, handed to a worker
thread by the consumer).
"""

from __future__ import annotations

import time

from dramatiq.middleware import CurrentMessage

from resumable import Agent, Complete, StepContext
from resumable.broker.consumer import ENQUEUED_AT, FETCHED_AT
from resumable.waits import Wait

AGENT_NAME = "bench_resume"

resume = Agent(AGENT_NAME, description="Benchmark agent: suspend on a callback, then resume.")


@resume.step
def await_callback(ctx: StepContext) -> Wait:
    callback = ctx.callback("done")
    ctx.state["callback_url"] = callback.url
    return ctx.wait(callback, then="resumed")


@resume.step
def resumed(ctx: StepContext) -> Complete:
    started_at = time.time()  # first: the moment the resumed step began
    kind = ctx.wake.kind if ctx.wake is not None else None
    message = CurrentMessage.get_current_message()
    options = message.options if message is not None else {}
    return Complete(
        {
            "resumed_at": started_at,
            "woken_by": kind,
            # When the web process sent the queue message (after its commit),
            # and when this worker's consumer handed it to a worker thread.
            "enqueued_at": options.get(ENQUEUED_AT),
            "fetched_at": options.get(FETCHED_AT),
        }
    )
