"""Logging in to the console with an API token, and out again.

The login form takes the operator's name (their actions are audited as
``console:<name>``) and one of the API tokens; the token is checked in
constant time and is not kept: the session cookie proves it was given.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from resumable.webhooks.console.forms import FormError, action_form, check_csrf, read_form
from resumable.webhooks.console.render import page
from resumable.webhooks.console.session_cookie import log_out, new_csrf_token
from resumable.webhooks.console.state import console_state

# Letters (any script), digits and a little punctuation; spaces inside.
NAME = re.compile(r"[\w.@+\-]([\w.@+\- ]{0,62}[\w.@+\-])?")
_MAX_TOKEN_LENGTH = 1000
_HOME = "/ui/sessions"


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a console page of this site, never elsewhere."""
    if (
        not target
        or len(target) > 2000
        or not (target == "/ui" or target.startswith("/ui/") or target.startswith("/ui?"))
        or "\\" in target
        or any(ord(c) < 0x21 for c in target)
    ):
        return _HOME
    return target


def _login_page(
    request: Request,
    status: int = 200,
    error: str | None = None,
    name: str = "",
    target: str | None = None,
) -> Response:
    token = new_csrf_token()
    response = page(
        request,
        "login.html",
        status,
        login_csrf=token,
        next=safe_next(target or request.query_params.get("next")),
        name=name,
        error=error,
    )
    console_state(request).signer.remember_login_csrf(response, request, token)
    return response


async def login_form(request: Request) -> Response:
    return _login_page(request)


async def log_in(request: Request) -> Response:
    console = console_state(request)
    form = await read_form(request)
    check_csrf(form, console.signer.login_csrf(request))
    name = form.raw("name").strip()[:200]
    try:
        name = (
            form.text(
                "name",
                "Your name",
                required=True,
                max_length=64,
                pattern=NAME,
                hint="1-64 letters, digits, spaces and . @ + - _",
            )
            or ""
        )
        token = form.text("token", "The API token", required=True, max_length=_MAX_TOKEN_LENGTH)
    except FormError as exc:
        return _login_page(request, exc.status, exc.message, name, form.raw("next"))
    if token is None or not console.auth.accepts(token.encode("utf-8", "surrogateescape")):
        return _login_page(
            request, 401, "That API token is not accepted here.", name, form.raw("next")
        )
    response = RedirectResponse(safe_next(form.raw("next")), 303)
    console.signer.log_in(response, request, name)
    return response


async def log_out_(request: Request) -> Response:
    await action_form(request)
    response = RedirectResponse("/ui/login", 303)
    log_out(response)
    return response


async def home(request: Request) -> Response:
    return RedirectResponse(_HOME, 303)


async def root(request: Request) -> Response:
    return RedirectResponse("/ui", 303)


routes = [
    Route("/", root, methods=["GET"]),
    Route("/ui", home, methods=["GET"]),
    Route("/ui/login", login_form, methods=["GET"]),
    Route("/ui/login", log_in, methods=["POST"]),
    Route("/ui/logout", log_out_, methods=["POST"]),
]
