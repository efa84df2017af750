"""The workers page: which worker processes are alive, the agents and
versions each serves, what each runs now; what no live worker serves; the
concurrency keys with sessions running or waiting for a slot; the rate
limits in use and the sessions waiting for a turn; and charts of
the last hour and day (steps, failures, queued and waiting).

An operator asking "is anything running my agent?" read ``/metrics`` or the
database. Everything here comes from the workers' own heartbeat rows (a row
lives an hour past its last heartbeat, so a worker that died recently is
still listed, marked gone, with the problem it reported if any).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resumable.client import concurrency_keys
from resumable.models import activity_queries, agent_queries
from resumable.webhooks.console.charts import HEIGHT, WIDTH, charts
from resumable.webhooks.console.render import page
from resumable.webhooks.console.state import web_state
from resumable.webhooks.database_calls import database_call

# The most worker rows listed (a fleet larger than this is paged by its own tools).
WORKERS_SHOWN = 200
# The concurrency keys listed, the longest lines first (``resumable concurrency``
# lists up to 1,000).
KEYS_SHOWN = 50


async def list_workers(request: Request) -> Response:
    state = web_state(request)

    now = datetime.now(UTC)

    def read() -> tuple[
        list[agent_queries.WorkerSummary],
        list[agent_queries.UnservedAgent],
        list[activity_queries.ActivitySample],
    ]:
        with state.db.connection() as conn:
            return (
                agent_queries.workers(conn, limit=WORKERS_SHOWN),
                agent_queries.unserved_sessions_by_agent(conn),
                activity_queries.since(conn, now - timedelta(days=1)),
            )

    workers, unserved, samples = await database_call(read)
    counts = await database_call(state.client.count_by_status)
    keys = await database_call(concurrency_keys, state.db, limit=KEYS_SHOWN)
    rate_limits = await database_call(state.client.rate_limits, limit=KEYS_SHOWN)
    return page(
        request,
        "workers.html",
        workers=workers,
        differing=differing_code(workers),
        live=sum(1 for w in workers if w.live),
        unserved=unserved,
        keys=keys,
        rate_limits=rate_limits,
        blocked=counts.get("blocked", 0),
        hour=charts(samples, now - timedelta(hours=1), now),
        day=charts(samples, now - timedelta(days=1), now),
        chart_size=(WIDTH, HEIGHT),
    )


def differing_code(workers: list[agent_queries.WorkerSummary]) -> set[str]:
    """The unversioned agents that live workers load from different code
    (their sessions alternate between the codes from one step to the next)."""
    codes: dict[str, set[str]] = {}
    for worker in workers:
        if not worker.live:
            continue
        for agent, code in worker.fingerprints.items():
            if not worker.versions.get(agent):
                codes.setdefault(agent, set()).add(code)
    return {agent for agent, seen in codes.items() if len(seen) > 1}


routes = [Route("/ui/workers", list_workers, methods=["GET"])]
