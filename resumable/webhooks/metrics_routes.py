"""``GET /metrics`` (see ``resumable/metrics.py``)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from resumable.webhooks.operations import Answer, ApiRoute, Operation
from resumable.webhooks.state import web_state

METRICS = Operation(
    "GET",
    "/metrics",
    "getMetrics",
    "Prometheus metrics",
    "operations",
    description="Sessions by agent and status, open dead letters, pending alerts and the "
    "oldest pending session's age (counted in PostgreSQL at scrape time), deliveries by "
    "outcome. Needs the token, like every route but the public ones.",
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
    body = await run_in_threadpool(generate_latest, state.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


routes = [ApiRoute(METRICS, metrics)]
