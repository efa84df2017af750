"""Liveness, readiness and the OpenAPI document."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from resumable._internal.reachability import probe_rabbitmq
from resumable.models import agent_queries
from resumable.webhooks.database_calls import DatabaseDidNotAnswer, database_call
from resumable.webhooks.openapi import openapi_document
from resumable.webhooks.operations import Answer, ApiRoute, Operation, json_answer
from resumable.webhooks.response_models import Health, Readiness, WorkerHealth
from resumable.webhooks.state import web_state

TAG = "operations"

HEALTHZ = Operation(
    "GET",
    "/healthz",
    "getLiveness",
    "Liveness: the process is up",
    TAG,
    description="Public (probes carry no credentials); touches nothing else.",
    answers=(Answer(200, "Alive.", Health),),
    database=False,
)


async def healthz(request: Request) -> Response:
    return json_answer(Health(status="ok"))


# A probe must answer before the orchestrator's own timeout (often 1 s).
READY_TIMEOUT_SECONDS = 1.0

# How long a worker that said it could not do its job counts as unhealthy.
UNHEALTHY_WORKERS_SECONDS = 600


READYZ = Operation(
    "GET",
    "/readyz",
    "getReadiness",
    "Readiness: the database and the broker answer",
    TAG,
    description=f"Public; answers within about {READY_TIMEOUT_SECONDS:g} s either way. "
    "`workers` reports what the workers say of themselves (their heartbeat rows) without "
    "deciding this process's readiness: a worker answers its own `/readyz` on its metrics port.",
    answers=(
        Answer(200, "Ready.", Readiness),
        Answer(503, "The database or the broker does not answer.", Readiness),
    ),
    database=False,
)


async def readyz(request: Request) -> Response:
    state = web_state(request)

    workers: list[WorkerHealth] = []

    def database() -> str:
        try:
            with state.db.connection(timeout=READY_TIMEOUT_SECONDS) as conn:
                counts = agent_queries.worker_health(conn, seconds=UNHEALTHY_WORKERS_SECONDS)
            workers.append(
                WorkerHealth(live=counts.live, unhealthy=counts.unhealthy, problem=counts.problem)
            )
            return "ok"
        except Exception as exc:
            return f"error: {type(exc).__name__}"

    def broker() -> str:
        try:
            if state.settings.broker_url is not None:  # RabbitMQ
                probe_rabbitmq(state.settings.broker_url, timeout=READY_TIMEOUT_SECONDS)
                return "ok"
            client = redis.Redis.from_url(
                state.redis_url,
                socket_timeout=READY_TIMEOUT_SECONDS,
                socket_connect_timeout=READY_TIMEOUT_SECONDS,
            )
            try:
                client.ping()
            finally:
                client.close()
            return "ok"
        except Exception as exc:
            return f"error: {type(exc).__name__}"

    db_check, broker_check = await asyncio.gather(_within(database), _within(broker))
    checks = {"database": db_check, "broker": broker_check}
    ready = all(v == "ok" for v in checks.values())
    body = Readiness(
        status="ready" if ready else "unavailable",
        checks=checks,
        workers=workers[0] if workers else None,
    )
    return json_answer(body, 200 if ready else 503)


async def _within(check: Callable[[], str]) -> str:
    """The check's answer, or a time-out once the probe's own timeouts should
    have answered: a server that accepts connections but never replies (hung,
    or behind a stalled proxy) holds a statement forever, and the probe must
    still answer in about a second. The abandoned thread ends when the server
    answers or the connection drops."""
    try:
        return await database_call(check, deadline=READY_TIMEOUT_SECONDS + 0.5)
    except DatabaseDidNotAnswer:  # the broker's check too: the same abandoned thread
        return "error: timed out"


OPENAPI = Operation(
    "GET",
    "/openapi.json",
    "getOpenApi",
    "This API's OpenAPI 3.1 document",
    TAG,
    description="Generated from the routes and their models. When the app is mounted "
    "under a prefix, `servers` names it.",
    answers=(Answer(200, "The document.", schema={"type": "object"}),),
    database=False,
)


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document(request.app.routes, request.scope.get("root_path", "")))


routes = [
    ApiRoute(HEALTHZ, healthz),
    ApiRoute(READYZ, readyz),
    ApiRoute(OPENAPI, openapi),
]
