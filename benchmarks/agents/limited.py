"""Agents for ``benchmarks/concurrency.py``: the same counting steps with no
concurrency limit, with a limit that never binds, and with one that does."""

from __future__ import annotations

from resumable import Agent, Complete, Concurrency, StepContext

FREE = "bench_free"
LOOSE = "bench_limit_loose"
TIGHT = "bench_limit_tight"
# A limit no run of the benchmark reaches (a key per session's tenant).
LOOSE_LIMIT = 100_000
# Per tenant, with a handful of tenants: sessions wait for slots.
TIGHT_LIMIT = 2


def _count(ctx: StepContext) -> str | Complete:
    counter = int(ctx.state.get("counter", 0)) + 1
    ctx.state["counter"] = counter
    if counter >= int(ctx.input["steps"]):
        return Complete({"steps": counter})
    return "count"


free = Agent(FREE)
loose = Agent(LOOSE, concurrency=Concurrency(limit=LOOSE_LIMIT, key="tenant"))
tight = Agent(TIGHT, concurrency=Concurrency(limit=TIGHT_LIMIT, key="tenant"))
for _agent in (free, loose, tight):
    _agent.step(_count, name="count")
