"""Refusing requests no route can handle, before any route sees them.

uvicorn's default HTTP parser (httptools) takes headers of any size (20 MB
were accepted in a test), so the app bounds them itself: over
``MAX_HEADER_BYTES`` in total answers 431. A NUL byte in the path, the query
string or a header value would reach PostgreSQL, which refuses NUL in text
(a 500 otherwise): it answers 400 here. Starlette's routes end in ``$``, which
also matches before a final newline, so ``/v1/dead-letters/7%0A`` would be
dead letter 7 and ``/v1/sessions%0A`` the list: a path ending in a newline
names nothing, 404. A percent-escape that is not UTF-8 (``%FF``, or
``%ED%A0%80``, a lone surrogate) would be decoded to U+FFFD by the server and
Starlette, aliasing another name (``/v1/shared/%FF`` read the document named
"\ufffd"): in the path or the query string it answers 400, as such a body
does. The API answers each in its JSON error shape; the console as its HTML
error page (it passes its own ``answer``).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from resumable.webhooks.errors import error_response

# Names and values of all headers together (h11, uvicorn's other parser, stops at 16 KiB).
MAX_HEADER_BYTES = 16 * 1024


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")  # strict: surrogates are not UTF-8 either
    except UnicodeDecodeError:
        return False
    return True


def _problem(scope: Scope) -> tuple[int, str, str] | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    if sum(len(name) + len(value) for name, value in headers) > MAX_HEADER_BYTES:
        return 431, "headers_too_large", f"request headers exceed {MAX_HEADER_BYTES} bytes"
    path = scope.get("path", "")
    if "\x00" in path:
        return 400, "invalid_request", "the path may not contain NUL (%00)"
    if path.endswith("\n"):
        return 404, "not_found", "no resource has a path ending in a newline (%0A)"
    raw_path = scope.get("raw_path")
    if raw_path is not None and not _is_utf8(unquote_to_bytes(raw_path)):
        return 400, "invalid_request", "the path must be UTF-8 (its %-escapes too)"
    query = unquote_to_bytes(scope.get("query_string", b""))
    if b"\x00" in query:
        return 400, "invalid_request", "the query string may not contain NUL (%00)"
    if not _is_utf8(query):
        return 400, "invalid_request", "the query string must be UTF-8 (its %-escapes too)"
    if any(b"\x00" in value for _, value in headers):
        return 400, "invalid_request", "header values may not contain NUL"
    return None


# How a refusal is answered: (scope, status, code, message) -> the response.
Answer = Callable[[Scope, int, str, str], Response]


def json_answer(scope: Scope, status: int, code: str, message: str) -> Response:
    return error_response(status, code, message)


class RejectUnusableRequests:
    """ASGI middleware: 431 for huge headers, 400 for NUL anywhere but the body
    (the body's JSON is checked when it is parsed, see ``bodies.py``)."""

    def __init__(self, app: ASGIApp, answer: Answer = json_answer) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        problem = _problem(scope) if scope["type"] == "http" else None
        if problem is None:
            await self.app(scope, receive, send)
            return
        status, code, message = problem
        response = self.answer(scope, status, code, message)
        response.headers["Connection"] = "close"
        await response(scope, receive, send)
