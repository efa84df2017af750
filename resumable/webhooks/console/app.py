"""The console's Starlette app, and how the web process routes to it.

The console is its own app, not routes on the API's router: its pages answer
browsers (HTML, a login redirect, a cookie and a CSRF token) where the API
answers programs (JSON errors, a bearer challenge), and the API's checks
that walk ``app.routes`` stay about the API. ``with_console`` sends ``/`` and
``/ui/...`` here and everything else to the API, in front of both.

Every answer of the console carries its security headers and, when it is an
error, is its HTML error page: also the two Starlette sends from outside the
middleware it lists (a 413 for a body over the limit, a 500 for an
unexpected exception), which is why the headers are put on outside all of
Starlette's own layers (``_Console``), not as one more middleware.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from resumable.settings import Settings
from resumable.webhooks.auth import BearerAuth, accepted_tokens, console_auth_middleware
from resumable.webhooks.console import (
    dead_letter_pages,
    login_routes,
    schedule_pages,
    session_actions,
    session_pages,
    worker_pages,
)
from resumable.webhooks.console.drains import DrainJobs
from resumable.webhooks.console.errors import EXCEPTION_HANDLERS, too_large, unusable_request
from resumable.webhooks.console.session_cookie import CookieSigner
from resumable.webhooks.console.state import ConsoleState
from resumable.webhooks.guards import RejectUnusableRequests
from resumable.webhooks.state import WebState
from resumable.webhooks.too_large import ReplaceTooLarge

# Sent with every console response: no inline script or style runs even if
# a value ever escaped its escaping, no other site frames the console, and a
# link clicked in it (a URL an agent stored) learns nothing of the page.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
_NO_STORE = (b"cache-control", b"no-store")
# The last resort, when even the error page could not be rendered.
_PLAIN_500 = (
    b'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Internal error'
    b"</title></head><body><h1>Internal error</h1><p>See the server log.</p></body></html>"
)


def is_console_path(path: str) -> bool:
    return path in ("/", "/ui") or path.startswith("/ui/")


class _SecurityHeaders:
    """ASGI: the security headers on every answer; an exception no layer
    answered (the error page itself failed) is a plain HTML 500 with them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        static = scope.get("path", "").startswith("/ui/static/")
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", [])) + SECURITY_HEADERS
                if not static:
                    headers.append(_NO_STORE)
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            if started or scope["type"] != "http":
                raise  # answered (Starlette re-raises after its 500 page), for the server's log
            start = {
                "type": "http.response.start",
                "status": 500,
                "headers": [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"content-length", str(len(_PLAIN_500)).encode()),
                ],
            }
            await send_with_headers(start)
            await send_with_headers({"type": "http.response.body", "body": _PLAIN_500})
            raise


class _Console(Starlette):
    """Starlette, inside the security headers and the console's own 413 page."""

    def build_middleware_stack(self) -> ASGIApp:
        return _SecurityHeaders(ReplaceTooLarge(super().build_middleware_stack(), too_large))


def build_console(settings: Settings, auth: BearerAuth, web: Callable[[], WebState]) -> Starlette:
    """The console app; `web` returns the web process's state once its lifespan built it."""
    signer = CookieSigner(accepted_tokens(settings))
    console = _Console(
        routes=[
            *login_routes.routes,
            *session_pages.routes,
            *session_actions.routes,
            *dead_letter_pages.routes,
            *worker_pages.routes,
            *schedule_pages.routes,
            Mount(
                "/ui/static",
                StaticFiles(packages=[("resumable.webhooks.console", "static")]),
                name="static",
            ),
        ],
        middleware=[
            Middleware(RejectUnusableRequests, answer=unusable_request),
            console_auth_middleware(signer),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        max_body_size=settings.max_body_bytes,
    )
    console.state.console = ConsoleState(web, signer, auth, DrainJobs())
    return console


class WithConsole:
    """ASGI: console paths to the console, everything else (and the lifespan) to the API."""

    def __init__(self, api: ASGIApp, console: ASGIApp) -> None:
        self.api = api
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_console_path(scope["path"]):
            await self.console(scope, receive, send)
        else:
            await self.api(scope, receive, send)
