"""``GET /metrics`` (see ``resumable/webhooks/metrics.py``)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from resumable.webhooks.database_calls import database_call
from resumable.webhooks.operations import Answer, ApiRoute, Operation
from resumable.webhooks.state import web_state

METRICS = Operation(
    "GET",
    "/metrics",
    "getMetrics",
    "Prometheus metrics",
    "operations",
    description="Sessions by agent and status, queue depth, open dead letters, pending "
    "alerts, lingering sessions (hung, unserved, overdue, with an open alert) and the "
    "oldest pending session's age, counted in PostgreSQL (and Redis) at scrape time at a "
    "cost that does not grow with finished sessions; deliveries by outcome. Step and "
    "tool-call durations and resume latency are served by each worker "
    "(`RESUMABLE_WORKER_METRICS_PORT`). Needs the token, like every route but the public "
    "ones.",
    answers=(
        Answer(
            200,
            "The text exposition format.",
            media_type="text/plain",
            schema={"type": "string"},
        ),
    ),
)


async def metrics(request: Request) -> Response:
    state = web_state(request)
    body = await database_call(generate_latest, state.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


routes = [ApiRoute(METRICS, metrics)]
