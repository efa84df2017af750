"""A one-step agent the demo runs while the refund waits for its approval.

The demo's first worker has a single thread. If a suspended session held it,
nothing else could run; a ping session that completes on that worker while
the refund waits shows that waiting costs no worker at all.
"""

from __future__ import annotations

import os

from resumable import Agent, Complete, StepContext

ping = Agent("demo-ping", description="Completes at once, saying which worker ran it.")


@ping.step
def pong(ctx: StepContext) -> Complete:
    return Complete({"pong": True, "worker_pid": os.getpid()})
