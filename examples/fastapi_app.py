"""resumable inside an existing FastAPI application.

The shop starts a ``checkout`` session from its own endpoint (``POST
/orders``) and mounts resumable's receiver under ``/resumable``, so the
payment provider's callback, the sessions API, ``/openapi.json`` and the
health probes are served by the same process and port as the shop::

    export RESUMABLE_API_TOKENS=dev-token
    export RESUMABLE_PUBLIC_URL=http://127.0.0.1:8000/resumable  # where callbacks land
    .venv/bin/uvicorn --factory examples.fastapi_app:create_shop &
    .venv/bin/python -m resumable.cli worker --agents examples.fastapi_app &
    curl -X POST -H 'Content-Type: application/json' \\
        -d '{"order_id": "o-1", "amount": 500}' http://127.0.0.1:8000/orders
    curl -H "Authorization: Bearer dev-token" http://127.0.0.1:8000/resumable/v1/sessions/ID

Two things make mounting work. Starlette does not run the lifespan of an app
it mounts, so the shop's own lifespan enters the receiver's with
``running(receiver)`` (which also hands over the receiver's ``Client``, which
the shop wraps in an ``AsyncClient`` so its handlers await it).
And ``RESUMABLE_PUBLIC_URL`` includes the mount's prefix, since workers
build callback URLs from it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from resumable import (
    Agent,
    AgentRegistry,
    AsyncClient,
    Complete,
    ResumableError,
    Settings,
    StepContext,
    Wait,
)
from resumable.settings import load_settings
from resumable.webhooks.app import create_app, running
from resumable.webhooks.errors import resumable_error_response

checkout = Agent("checkout")


@checkout.step
def await_payment(ctx: StepContext) -> Wait:
    # The URL to hand the payment provider; no worker is held while it pays.
    payment = ctx.callback("payment")
    ctx.state["payment_url"] = payment.url
    return ctx.wait(payment, then="confirm", timeout=3600)


@checkout.step
def confirm(ctx: StepContext) -> Complete:
    assert ctx.wake is not None
    paid = not ctx.wake.timed_out and bool((ctx.wake.payload or {}).get("paid"))
    return Complete({"order_id": ctx.input["order_id"], "paid": paid})


class Order(BaseModel):
    order_id: str = Field(pattern=r"^[A-Za-z0-9_\-]{1,64}$")
    amount: int = Field(gt=0)


class OrderPlaced(BaseModel):
    order_id: str
    session_id: uuid.UUID
    status_url: str


def create_shop(settings: Settings | None = None) -> FastAPI:
    """The shop (``uvicorn --factory examples.fastapi_app:create_shop``)."""
    settings = settings or load_settings()
    receiver = create_app(settings, registry=AgentRegistry([checkout]))

    @contextlib.asynccontextmanager
    async def lifespan(shop: FastAPI) -> AsyncIterator[None]:
        async with running(receiver) as resumable, AsyncClient(resumable.client) as client:
            shop.state.client = client  # handlers: await client.start(...)
            yield

    shop = FastAPI(title="shop", lifespan=lifespan)
    shop.mount("/resumable", receiver, name="resumable")

    @shop.exception_handler(ResumableError)
    async def resumable_error(request: Request, exc: ResumableError) -> JSONResponse:
        # The receiver's own answers for the shop's routes: an order id sent
        # again with another amount is a 409 idempotency_key_reused, not a 500.
        answer = resumable_error_response(exc)
        if answer is None:  # not the caller's fault
            raise exc
        return answer

    @shop.post("/orders", status_code=201)
    async def place_order(order: Order, request: Request) -> OrderPlaced:
        client: AsyncClient = request.app.state.client
        # The order id as idempotency key: a retried POST starts no second checkout.
        session_id = await client.start(
            "checkout", order.model_dump(), idempotency_key=f"order-{order.order_id}"
        )
        status_url = request.url_for("resumable", path=f"/v1/sessions/{session_id}")
        return OrderPlaced(
            order_id=order.order_id, session_id=session_id, status_url=str(status_url)
        )

    return shop
