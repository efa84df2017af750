"""Every HTTP error is ``{"error": {"code", "message"}}``; no stack trace leaves.

A database that cannot be reached is not a bug: it answers 503 with
``Retry-After``, so load balancers and clients back off instead of seeing 500s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import psycopg
import sqlalchemy.exc
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match

from resumable.errors import (
    CheckpointNotFoundError,
    DeadLetterNotFoundError,
    DeadLetterStateError,
    IdempotencyConflictError,
    InvalidCursorError,
    InvalidDrainError,
    InvalidPatchError,
    NotSerializableError,
    ReducerNotLoadedError,
    ResumableError,
    ScheduleDefinitionError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStateError,
    UnknownAgentError,
)

logger = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    431: "headers_too_large",
}

# Seconds a client should wait before trying again while the database is down.
RETRY_AFTER_SECONDS = 5

# Package errors that are the caller's fault, and the status each maps to.
_CLIENT_ERRORS: dict[type[ResumableError], int] = {
    SessionNotFoundError: 404,
    UnknownAgentError: 422,
    NotSerializableError: 422,
    IdempotencyConflictError: 409,  # answered as idempotency_key_reused, like callbacks
    SessionExistsError: 409,
    SessionStateError: 409,
    InvalidCursorError: 400,
    DeadLetterNotFoundError: 404,
    DeadLetterStateError: 409,
    InvalidPatchError: 422,
    InvalidDrainError: 422,
    CheckpointNotFoundError: 404,
    # The checkpoint exists; this deployment lacks the code to rebuild it.
    ReducerNotLoadedError: 409,
    ScheduleDefinitionError: 422,
    ScheduleNotFoundError: 404,
    ScheduleExistsError: 409,
}


# The HTTP code of a package error, where the API's vocabulary differs from
# the Python exception's: one code for "this key was used for another body".
_HTTP_CODE_OF: dict[type[ResumableError], str] = {
    IdempotencyConflictError: "idempotency_key_reused",
    InvalidPatchError: "invalid_state_patch",
}


class ApiError(Exception):
    """Raised by handlers to answer with an error body."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers)


def allowed_methods(request: Request) -> str:
    """Every method some route serves at this path (routes are one per method,
    so the one Starlette picked for its 405 names only its own)."""
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches({**request.scope, "method": "<probe>"})
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = allowed_methods(request)
    return error_response(exc.status_code, code, str(exc.detail), headers)


def resumable_error_response(exc: ResumableError) -> JSONResponse | None:
    """The HTTP API's answer to a package error that is the caller's fault (a
    reused idempotency key: 409 ``idempotency_key_reused``; an unknown agent:
    422; ...), or None for one that is not. An application that calls the
    ``Client`` from its own routes maps their errors with it, so its callers
    get the API's 4xx instead of a 500 (``examples/fastapi_app.py``)."""
    for kind, status in _CLIENT_ERRORS.items():
        if isinstance(exc, kind):
            return error_response(status, _HTTP_CODE_OF.get(kind, exc.code), exc.message)
    return None


async def _package_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ResumableError)
    answer = resumable_error_response(exc)
    if answer is not None:
        return answer
    return await _unexpected(request, exc)


async def _database_down(request: Request, exc: Exception) -> Response:
    """No connection in time, or the server went away mid-request."""
    logger.warning(
        "database unavailable on %s %s: %s",
        request.method,
        request.url.path,
        exc,
        extra={"action": "database_unavailable"},
    )
    return error_response(
        503,
        "database_unavailable",
        "the database cannot be reached; try again shortly",
        {"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


async def client_disconnected(request: Request, exc: Exception) -> Response:
    """The client went away before its body arrived: nothing was read or
    written, and nobody reads the answer. Not an error of ours, so not a
    traceback at ERROR in the log operators alert on (any client could fill
    it by hanging up mid-body); one INFO line, with the action named."""
    logger.info(
        "client disconnected before sending its whole body on %s %s",
        request.method,
        request.url.path,
        extra={"action": "client_disconnected"},
    )
    return error_response(400, "client_disconnected", "the request body ended early")


async def _unexpected(request: Request, exc: Exception) -> Response:
    logger.error(
        "unhandled error on %s %s",
        request.method,
        request.url.path,
        exc_info=exc,
        extra={"action": "http_error"},
    )
    return error_response(500, "internal_error", "internal server error; see the server log")


EXCEPTION_HANDLERS = {
    ApiError: _api_error,
    HTTPException: _http_error,
    ResumableError: _package_error,
    # psycopg_pool.PoolTimeout is an OperationalError.
    ClientDisconnect: client_disconnected,
    psycopg.OperationalError: _database_down,
    sqlalchemy.exc.OperationalError: _database_down,
    Exception: _unexpected,
}
