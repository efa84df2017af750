"""Every HTTP error is ``{"error": {"code", "message"}}``; no stack trace leaves."""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from resumable.errors import (
    CheckpointNotFoundError,
    DeadLetterNotFoundError,
    DeadLetterStateError,
    IdempotencyConflictError,
    InvalidCursorError,
    InvalidPatchError,
    NotSerializableError,
    ResumableError,
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
}

# Package errors that are the caller's fault, and the status each maps to.
_CLIENT_ERRORS: dict[type[ResumableError], int] = {
    SessionNotFoundError: 404,
    UnknownAgentError: 422,
    NotSerializableError: 422,
    IdempotencyConflictError: 409,
    SessionExistsError: 409,
    SessionStateError: 409,
    InvalidCursorError: 400,
    DeadLetterNotFoundError: 404,
    DeadLetterStateError: 409,
    InvalidPatchError: 422,
    CheckpointNotFoundError: 404,
}


class ApiError(Exception):
    """Raised by handlers to answer with an error body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


async def _package_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ResumableError)
    for kind, status in _CLIENT_ERRORS.items():
        if isinstance(exc, kind):
            return error_response(status, exc.code, exc.message)
    return await _unexpected(request, exc)


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
    Exception: _unexpected,
}
