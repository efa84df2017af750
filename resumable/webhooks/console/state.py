"""What every console route needs, built once with the console."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from resumable.webhooks.auth import BearerAuth
from resumable.webhooks.console.drains import DrainJobs
from resumable.webhooks.console.session_cookie import CookieSigner, Operator
from resumable.webhooks.state import WebState


@dataclass
class ConsoleState:
    # The web process's state (database, broker, client), built in its lifespan.
    web: Callable[[], WebState]
    signer: CookieSigner
    auth: BearerAuth
    drains: DrainJobs


def console_state(request: Request) -> ConsoleState:
    state: ConsoleState = request.app.state.console
    return state


def web_state(request: Request) -> WebState:
    return console_state(request).web()


def operator(request: Request) -> Operator:
    """The logged-in operator (the auth middleware let only them through)."""
    who: Operator = request.user.operator
    return who
