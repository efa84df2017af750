"""What the web process builds once (in its lifespan) and hands to every route."""

from __future__ import annotations

from dataclasses import dataclass

import dramatiq
from starlette.requests import Request

from resumable.client import Client
from resumable.models.database import Database
from resumable.services.async_callbacks import AsyncCallbacks
from resumable.services.inbox import Inbox
from resumable.settings import Settings
from resumable.webhooks.metrics import Metrics
from resumable.webhooks.signatures import CallbackVerifier


@dataclass
class WebState:
    settings: Settings
    db: Database
    broker: dramatiq.Broker
    client: Client
    inbox: Inbox
    callbacks: AsyncCallbacks
    verifier: CallbackVerifier
    redis_url: str
    metrics: Metrics


class LifespanNotRunError(RuntimeError):
    """The app's lifespan has not run: a host application that mounts it must
    enter ``resumable.webhooks.app.running(app)`` in its own lifespan."""


def web_state(request: Request) -> WebState:
    state: WebState | None = getattr(request.app.state, "resumable", None)
    if state is None:
        raise LifespanNotRunError(LifespanNotRunError.__doc__)
    return state
