"""An agent that breaks its own worker from inside: it ends one of the
worker's threads (a consumer, the lease keeper, the heartbeat) the way an
uncaught exception would, to test that a worker which lost a thread it
cannot work without says so and exits rather than looking alive."""

from __future__ import annotations

import ctypes
import threading

from resumable import Agent, Complete, StepContext

sabotage = Agent("sabotage")


def _find(kind: str) -> threading.Thread:
    for thread in threading.enumerate():
        main_consumer = type(thread).__name__ == "ConsumerThread" and not getattr(
            thread, "queue_name", ""
        ).endswith(".DQ")
        if kind == "consumer" and main_consumer:
            return thread
        if thread.name == f"resumable-{kind}":
            return thread
    raise LookupError(f"no {kind} thread in this worker")


@sabotage.step
def end_thread(ctx: StepContext) -> Complete:
    """Raise SystemExit in the named thread: it leaves its loop and ends, as
    after any exception its code does not catch."""
    thread = _find(str(ctx.input["thread"]))
    assert thread.ident is not None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(SystemExit)
    )
    return Complete({"ended": thread.name})
