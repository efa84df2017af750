"""The Starlette application served by ``resumable web``, or mounted inside
another application.

Everything it needs (database pool, broker, settings) is built in its
lifespan, from explicit settings, and closed on shutdown. A host application
that mounts it (``host.mount("/resumable", app)``) must run that lifespan in
its own, since Starlette does not run a mounted app's: ``async with
running(app) as web: ...`` (see ``examples/fastapi_app.py``). In front of the
routes, in order: unusable requests are refused (``guards.py``), then every
route but the public ones needs the token (``auth.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from resumable._internal.embedded import service_urls
from resumable.agent import AgentRegistry
from resumable.broker.background_sends import sender_for
from resumable.broker.choice import build_broker
from resumable.broker.messages import log_not_enqueued
from resumable.broker.redis import REDIS_TIMEOUT_SECONDS
from resumable.client import Client
from resumable.models.async_database import AsyncDatabase
from resumable.models.database import Database
from resumable.priorities import Routed
from resumable.services.async_callbacks import AsyncCallbacks
from resumable.services.inbox import Inbox
from resumable.settings import Settings
from resumable.webhooks import (
    callback_routes,
    checkpoint_routes,
    concurrency_routes,
    dead_letter_routes,
    health_routes,
    metrics_routes,
    rate_limit_routes,
    schedule_routes,
    session_routes,
    shared_routes,
)
from resumable.webhooks.auth import BearerAuth, accepted_tokens, auth_middleware
from resumable.webhooks.console.app import WithConsole, build_console
from resumable.webhooks.errors import EXCEPTION_HANDLERS
from resumable.webhooks.guards import RejectUnusableRequests
from resumable.webhooks.metrics import Metrics
from resumable.webhooks.signatures import CallbackVerifier
from resumable.webhooks.state import WebState
from resumable.webhooks.too_large import JsonTooLarge

# How long a request waits for a database connection before answering 503:
# with the database down, callers learn it at once instead of after 30 s.
POOL_TIMEOUT_SECONDS = 2.0

# Every route the app serves, in matching order.
ROUTES: tuple[BaseRoute, ...] = (
    *callback_routes.routes,
    *session_routes.routes,
    *checkpoint_routes.routes,
    *dead_letter_routes.routes,
    *schedule_routes.routes,
    *concurrency_routes.routes,
    *rate_limit_routes.routes,
    *health_routes.routes,
    *metrics_routes.routes,
    *shared_routes.routes,
)


class _App(Starlette):
    """Starlette, with its plain-text 413 turned into the API's JSON error,
    behind the operator console's paths."""

    console: ASGIApp | None = None

    def build_middleware_stack(self) -> ASGIApp:
        api = JsonTooLarge(super().build_middleware_stack())
        return api if self.console is None else WithConsole(api, self.console)


def create_app(
    settings: Settings,
    database_url: str | None = None,
    redis_url: str | None = None,
    registry: AgentRegistry | None = None,
) -> Starlette:
    """The web app. Without URLs, those of `settings` are used, and embedded
    servers are started (in the lifespan) for any that is unset."""
    verifier = CallbackVerifier(settings.webhook_secret)  # fail fast on a bad secret
    auth = BearerAuth(accepted_tokens(settings))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as closing:
            # Each part is closed (in reverse) from the moment it exists, so a
            # start-up that fails half-way leaves nothing open behind it.
            urls = closing.enter_context(
                service_urls(
                    database_url or settings.database_url,
                    redis_url or settings.redis_url,
                    settings.home_dir,
                )
            )
            db = Database(
                urls.database_url,
                pool_size=settings.db_pool_size,
                pool_timeout=POOL_TIMEOUT_SECONDS,
                prepared_statements=settings.db_prepared_statements,
            )
            closing.callback(db.close)
            broker = build_broker(settings, urls.redis_url)
            closing.callback(broker.close)
            # The callback route's own pool, on this loop (models/async_database.py):
            # the web process holds up to twice RESUMABLE_DB_POOL_SIZE connections.
            adb = AsyncDatabase(
                urls.database_url,
                pool_size=settings.db_pool_size,
                pool_timeout=POOL_TIMEOUT_SECONDS,
                prepare_threshold=db.prepare_threshold,
            )
            await adb.open()
            closing.push_async_callback(adb.close)
            sender = sender_for(broker, settings, urls.redis_url, why="session woken")
            await sender.start()
            # What the sender holds goes out before the broker closes; past a
            # stalled broker's timeout it is named for the reconciler.
            closing.push_async_callback(sender.close, REDIS_TIMEOUT_SECONDS)
            app.state.resumable = WebState(
                settings=settings,
                db=db,
                broker=broker,
                client=Client(settings, db, broker, registry),
                # A signal's message, from its database thread, to the loop's sender.
                inbox=Inbox(settings, db, broker, send=on_this_loop(sender.send)),
                callbacks=AsyncCallbacks(adb, sender.send),
                verifier=verifier,
                redis_url=urls.redis_url,
                metrics=Metrics(db, broker, settings.queue_name),
            )
            try:
                yield
            finally:
                del app.state.resumable

    app = _App(
        routes=list(ROUTES),
        middleware=[Middleware(RejectUnusableRequests), auth_middleware(auth)],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
        max_body_size=settings.max_body_bytes,
    )
    # A route is one path: `/v1/sessions/` is a 404 like any other unknown
    # path, not a 307 to `/v1/sessions` that a client following redirects
    # would replay with its token and body.
    app.router.redirect_slashes = False
    app.console = build_console(settings, auth, lambda: app.state.resumable)
    return app


def on_this_loop(send: Callable[[Routed], None]) -> Callable[[Routed], None]:
    """`send`, callable from any thread: it runs on the calling loop. A
    database thread left running past the web's shutdown (its request
    abandoned at the deadline) finds the loop closed: its message is named
    for the reconciler, as any message not sent."""
    loop = asyncio.get_running_loop()

    def send_on_loop(ref: Routed) -> None:
        try:
            loop.call_soon_threadsafe(send, ref)
        except RuntimeError:  # the loop is closed
            log_not_enqueued([ref], "session woken", "the web process had stopped")

    return send_on_loop


@contextlib.asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[WebState]:
    """Run `app`'s lifespan inside a host application's own lifespan (a host
    does not run the lifespan of an app it mounts); yields what the app built,
    whose ``client`` the host may use to start sessions."""
    async with app.router.lifespan_context(app):
        state: WebState = app.state.resumable
        yield state
