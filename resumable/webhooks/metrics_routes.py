"""``GET /metrics`` (see ``resumable/metrics.py``)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from resumable.webhooks.state import web_state


async def metrics(request: Request) -> Response:
    """Prometheus metrics.
    ---
    summary: Prometheus metrics (text exposition format)
    responses: {200: {description: Metrics}}
    """
    state = web_state(request)
    body = await run_in_threadpool(generate_latest, state.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


routes = [Route("/metrics", metrics, methods=["GET"])]
