"""Liveness, readiness and the OpenAPI document."""

from __future__ import annotations

import asyncio

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.schemas import SchemaGenerator

from resumable.webhooks.state import web_state

schemas = SchemaGenerator(
    {
        "openapi": "3.0.3",
        "info": {"title": "resumable", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
)


async def healthz(request: Request) -> Response:
    """The process is up.
    ---
    summary: Liveness
    security: []
    responses: {200: {description: Alive}}
    """
    return JSONResponse({"status": "ok"})


# A probe must answer before the orchestrator's own timeout (often 1 s).
READY_TIMEOUT_SECONDS = 1.0


async def readyz(request: Request) -> Response:
    """The database and the broker answer.
    ---
    summary: Readiness
    security: []
    responses: {200: {description: Ready}, 503: {description: A dependency is down}}
    """
    state = web_state(request)

    def database() -> str:
        try:
            with state.db.connection(timeout=READY_TIMEOUT_SECONDS) as conn:
                conn.execute("SELECT 1")
            return "ok"
        except Exception as exc:
            return f"error: {type(exc).__name__}"

    def broker() -> str:
        try:
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

    db_check, broker_check = await asyncio.gather(
        run_in_threadpool(database), run_in_threadpool(broker)
    )
    checks = {"database": db_check, "broker": broker_check}
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks},
        status_code=200 if ready else 503,
    )


async def openapi(request: Request) -> Response:
    """This document.
    ---
    summary: OpenAPI description of every route
    responses: {200: {description: OpenAPI 3 document}}
    """
    # Starlette's OpenAPIResponse renders YAML; the contract is /openapi.json.
    return JSONResponse(schemas.get_schema(routes=request.app.routes))


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"], include_in_schema=True),
]
