"""Bearer-token authentication, on every route but an explicit public list.

Auth is Starlette's ``AuthenticationMiddleware`` in front of the router, so a
route added later is protected without anyone remembering a line in its
handler. Public: liveness and readiness (probes carry no credentials) and
callbacks (external systems prove themselves with the signature and the
unguessable token). ``/metrics`` and ``/openapi.json`` need the token like
the rest: Prometheus sends one with ``authorization: {credentials_file: ...}``.
A path no route serves (``/v1/nope``, ``/healthz/``, ``/v1/callbacks/``) is
the router's 404 ``not_found``, token or not: there is nothing there to
protect, and a 401 would send its caller looking for a credential instead of
a typo. A path some route serves with another method still needs the token.

The operator console (``/`` and ``/ui/...``, served by its own Starlette app in
front of the API's router) is for browsers, which send no bearer header: the
same middleware checks its signed session cookie instead, on every console
route but the login form, the static files and ``/`` (a redirect). A console
request without a valid cookie is sent to the login form; a bearer header
does not replace it.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlencode

from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    SimpleUser,
)
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Match

from resumable._internal.home import local_token
from resumable.settings import Settings
from resumable.webhooks.console.session_cookie import CookieSigner, Operator
from resumable.webhooks.errors import error_response

# Route paths (as declared) that answer without a token; every other route needs one.
PUBLIC_ROUTES = frozenset({"/healthz", "/readyz", "/v1/callbacks/{token}"})
# Console routes (as declared) a browser reaches without the console's session
# cookie: the login form, the static files, and `/`, which only redirects to
# `/ui` (the cookie is scoped to `/ui`, so `/` never receives it). Every other
# console route, including one added later or none at all (a 404), needs it.
CONSOLE_PUBLIC_ROUTES = frozenset({"/", "/ui/login", "/ui/static"})
CONSOLE_LOGIN_PATH = "/ui/login"

_CHALLENGE = 'Bearer realm="resumable"'


def accepted_tokens(settings: Settings) -> list[str]:
    return list(settings.api_tokens) or [local_token(settings.home_dir)]


class UnauthorizedError(AuthenticationError):
    def __init__(self, message: str, challenge: str) -> None:
        super().__init__(message)
        self.message = message
        self.challenge = challenge


class BearerAuth:
    """Checks ``Authorization: Bearer <token>`` in constant time."""

    def __init__(self, tokens: list[str]) -> None:
        self._tokens = [t.encode() for t in tokens if t]

    def accepts(self, given: bytes) -> bool:
        return any(hmac.compare_digest(given, token) for token in self._tokens)

    def actor(self, conn: HTTPConnection) -> str:
        """The caller's identity for the audit log; UnauthorizedError otherwise."""
        header = conn.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise UnauthorizedError("missing bearer token (Authorization: Bearer ...)", _CHALLENGE)
        given = value.strip().encode("utf-8", "surrogateescape")
        if not self.accepts(given):
            raise UnauthorizedError("invalid bearer token", f'{_CHALLENGE}, error="invalid_token"')
        fingerprint = hashlib.sha256(given).hexdigest()[:8]
        who = header_text(conn.headers.get("x-resumable-actor", "")).strip()[:200]
        return f"{who} (token {fingerprint})" if who else f"token {fingerprint}"


def header_text(value: str) -> str:
    """A header's text as the client wrote it: Starlette decodes header bytes
    as Latin-1, so UTF-8 "José" would reach the audit log as "JosÃ©". Bytes
    that are not UTF-8 are kept visible as escapes (``\\xed``), not guessed."""
    raw = value.encode("latin-1")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace")


def route_for(conn: HTTPConnection) -> BaseRoute | None:
    """The route the router will hand this request to (a full match, else the
    first partial one, as Starlette's router picks), or None for a 404."""
    partial = None
    for route in conn.scope["app"].routes:
        match, _ = route.matches(conn.scope)
        if match is Match.FULL:
            return route  # type: ignore[no-any-return]
        if match is Match.PARTIAL and partial is None:
            partial = route
    return partial


class _TokenBackend(AuthenticationBackend):
    def __init__(self, auth: BearerAuth) -> None:
        self.auth = auth

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        route = route_for(conn)
        if route is None or getattr(route, "path", None) in PUBLIC_ROUTES:
            return None  # no route serves the path (a 404), or a public one
        return AuthCredentials(["api"]), SimpleUser(self.auth.actor(conn))


def _unauthorized(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    assert isinstance(exc, UnauthorizedError)
    return error_response(401, "unauthorized", exc.message, {"WWW-Authenticate": exc.challenge})


def auth_middleware(auth: BearerAuth) -> Middleware:
    return Middleware(AuthenticationMiddleware, backend=_TokenBackend(auth), on_error=_unauthorized)


class ConsoleUser(SimpleUser):
    """A browser logged in to the console."""

    def __init__(self, operator: Operator) -> None:
        super().__init__(operator.actor)
        self.operator = operator


class NoConsoleSessionError(AuthenticationError):
    """No valid console session cookie."""


class _CookieBackend(AuthenticationBackend):
    def __init__(self, signer: CookieSigner) -> None:
        self.signer = signer

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        route = route_for(conn)
        if route is not None and getattr(route, "path", None) in CONSOLE_PUBLIC_ROUTES:
            return None
        operator = self.signer.operator(conn)
        if operator is None:
            raise NoConsoleSessionError()
        return AuthCredentials(["console"]), ConsoleUser(operator)


def _to_login(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    """Browsers go to the login form, which sends them back here after (a page
    they were reading; a form they were posting is not replayed)."""
    method = conn.scope.get("method", "GET")
    target = conn.url.path if method in ("GET", "HEAD") else "/ui"
    if method in ("GET", "HEAD") and conn.url.query:
        target += "?" + conn.url.query
    return RedirectResponse(f"{CONSOLE_LOGIN_PATH}?{urlencode({'next': target})}", 303)


def console_auth_middleware(signer: CookieSigner) -> Middleware:
    return Middleware(AuthenticationMiddleware, backend=_CookieBackend(signer), on_error=_to_login)


def request_actor(request: Request) -> str:
    """Who made this (authenticated) request, for the audit log."""
    name: str = request.user.display_name
    return name
