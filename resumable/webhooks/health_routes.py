"""Liveness, readiness and the OpenAPI document."""

from __future__ import annotations

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


async def readyz(request: Request) -> Response:
    """The database and the broker answer.
    ---
    summary: Readiness
    security: []
    responses: {200: {description: Ready}, 503: {description: A dependency is down}}
    """
    state = web_state(request)

    def check() -> dict[str, str]:
        checks: dict[str, str] = {}
        try:
            with state.db.connection() as conn:
                conn.execute("SELECT 1")
            checks["database"] = "ok"
        except Exception as exc:
            checks["database"] = f"error: {type(exc).__name__}"
        try:
            client = redis.Redis.from_url(state.redis_url, socket_timeout=2)
            try:
                client.ping()
            finally:
                client.close()
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"error: {type(exc).__name__}"
        return checks

    checks = await run_in_threadpool(check)
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks},
        status_code=200 if ready else 503,
    )


async def openapi(request: Request) -> Response:
    """This document.
    ---
    summary: OpenAPI description of every route
    security: []
    responses: {200: {description: OpenAPI 3 document}}
    """
    # Starlette's OpenAPIResponse renders YAML; the contract is /openapi.json.
    return JSONResponse(schemas.get_schema(routes=request.app.routes))


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"], include_in_schema=True),
]
