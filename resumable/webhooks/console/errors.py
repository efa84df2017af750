"""The console's errors as pages: a message a person can act on, never a trace.

The statuses are the API's (``webhooks/errors.py``): an operator's mistake is
a 4xx with its message, a database that cannot be reached is a 503, and only
a bug is a 500 ("see the server log"). The answers Starlette and the guards
give before any route runs (a body over the limit, a NUL in the query
string, huge headers) are these pages too (``unusable_request``,
``too_large``), not the API's JSON or Starlette's plain text.
"""

from __future__ import annotations

import logging

import psycopg
import sqlalchemy.exc
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Scope

from resumable.errors import ResumableError
from resumable.webhooks.console.forms import CsrfError, FormError
from resumable.webhooks.console.render import page
from resumable.webhooks.errors import _CLIENT_ERRORS, RETRY_AFTER_SECONDS, client_disconnected

logger = logging.getLogger(__name__)


def status_of(exc: ResumableError) -> int:
    """The HTTP status the API answers for this error (500: not the caller's fault)."""
    for kind, status in _CLIENT_ERRORS.items():
        if isinstance(exc, kind):
            return status
    return 500


def error_page(request: Request, status: int, title: str, message: str) -> Response:
    response = page(request, "error.html", status, title=title, message=message)
    if status == 503:
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def unusable_request(scope: Scope, status: int, code: str, message: str) -> Response:
    """A request the guards refuse before any route sees it (``guards.py``)."""
    return error_page(Request(scope), status, "The request cannot be used", message)


def too_large(scope: Scope) -> Response:
    """A body over ``RESUMABLE_MAX_BODY_BYTES`` (Starlette refuses it itself)."""
    return error_page(
        Request(scope),
        413,
        "The form is too large",
        "Nothing was changed. The form is over the size this server takes "
        "(RESUMABLE_MAX_BODY_BYTES): shorten what you typed and try again.",
    )


async def _csrf(request: Request, exc: Exception) -> Response:
    return error_page(
        request,
        403,
        "Refused: the form's CSRF token is missing or wrong",
        "Nothing was changed. The form did not come from a page of this console session "
        "(or the session was renewed since): reload the page and try again.",
    )


async def _form(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, FormError)
    return error_page(request, exc.status, "The form cannot be used", exc.message)


async def _package(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ResumableError)
    status = status_of(exc)
    if status == 500:
        return await _unexpected(request, exc)
    return error_page(request, status, "Not possible", exc.message)


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    response = error_page(request, exc.status_code, f"HTTP {exc.status_code}", str(exc.detail))
    response.headers.update(exc.headers or {})
    return response


async def _database_down(request: Request, exc: Exception) -> Response:
    logger.warning(
        "database unavailable on %s %s: %s",
        request.method,
        request.url.path,
        exc,
        extra={"action": "database_unavailable"},
    )
    return error_page(
        request,
        503,
        "The database cannot be reached",
        "Nothing was changed. Try again shortly.",
    )


async def _unexpected(request: Request, exc: Exception) -> Response:
    logger.error(
        "unhandled error on %s %s",
        request.method,
        request.url.path,
        exc_info=exc,
        extra={"action": "console_error"},
    )
    return error_page(request, 500, "Internal error", "See the server log.")


EXCEPTION_HANDLERS = {
    CsrfError: _csrf,
    FormError: _form,
    ResumableError: _package,
    HTTPException: _http,
    ClientDisconnect: client_disconnected,
    psycopg.OperationalError: _database_down,
    sqlalchemy.exc.OperationalError: _database_down,
    Exception: _unexpected,
}
