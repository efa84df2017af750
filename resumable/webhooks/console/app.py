"""The console's Starlette app, and how the web process routes to it.

The console is its own app, not routes on the API's router: its pages answer
browsers (HTML, a login redirect, a cookie and a CSRF token) where the API
answers programs (JSON errors, a bearer challenge), and the API's checks
that walk ``app.routes`` stay about the API. ``with_console`` sends ``/`` and
``/ui/...`` here and everything else to the API, in front of both.
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
    session_actions,
    session_pages,
)
from resumable.webhooks.console.drains import DrainJobs
from resumable.webhooks.console.errors import EXCEPTION_HANDLERS
from resumable.webhooks.console.session_cookie import CookieSigner
from resumable.webhooks.console.state import ConsoleState
from resumable.webhooks.guards import RejectUnusableRequests
from resumable.webhooks.state import WebState

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


def is_console_path(path: str) -> bool:
    return path in ("/", "/ui") or path.startswith("/ui/")


class _SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        static = scope.get("path", "").startswith("/ui/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", [])) + SECURITY_HEADERS
                if not static:
                    headers.append(_NO_STORE)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def build_console(settings: Settings, auth: BearerAuth, web: Callable[[], WebState]) -> Starlette:
    """The console app; `web` returns the web process's state once its lifespan built it."""
    signer = CookieSigner(accepted_tokens(settings))
    console = Starlette(
        routes=[
            *login_routes.routes,
            *session_pages.routes,
            *session_actions.routes,
            *dead_letter_pages.routes,
            Mount(
                "/ui/static",
                StaticFiles(packages=[("resumable.webhooks.console", "static")]),
                name="static",
            ),
        ],
        middleware=[
            Middleware(_SecurityHeaders),
            Middleware(RejectUnusableRequests),
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
