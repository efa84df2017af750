"""The refund agent: the one ``resumable demo`` runs, and a model for your own.

It looks up an order, asks a human for approval through a callback URL and
suspends (no worker is held while the human decides), issues the refund
through a payment API with the idempotency key resumable derives for the
call, then waits for the refund to settle by polling the payment API, and
finishes. Its input::

    {"order_id": "ord_1001", "api": "https://shop.example",
     "approval_timeout": 259200, "settle_poll_seconds": 60}

Every side effect goes through ``ctx.tool``, so a worker that dies at any
instant costs nothing but time: the next worker replays the interrupted step
from its checkpoint and gets recorded results back instead of calling again.
"""

from __future__ import annotations

from typing import Any

import httpx

from resumable import Agent, Complete, Poll, StepContext, Wait
from resumable.demo.gate import pause_point

refund = Agent("demo-refund", description="Refunds an order once a human approves it.")

_THREE_DAYS = 3 * 24 * 3600


def get_json(url: str) -> dict[str, Any]:
    """A read: safe to repeat, still recorded so a replay sees the same answer."""
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


def post_json(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """A write: passes resumable's key on, so the API itself dedupes a retry
    that crosses a crash (the call made, the worker dead before recording it)."""
    response = httpx.post(url, json=body, headers={"Idempotency-Key": idempotency_key}, timeout=10)
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


@refund.step
def look_up_order(ctx: StepContext) -> str:
    api, order_id = ctx.input["api"], ctx.input["order_id"]
    ctx.state["order"] = ctx.tool("look_up_order", get_json, f"{api}/orders/{order_id}")
    ctx.state["plan"] = ["look_up_order", "ask_approval", "issue_refund", "await_settlement"]
    return "ask_approval"


@refund.step
def ask_approval(ctx: StepContext) -> Wait:
    approval = ctx.callback("approval")
    # Hand this URL to whoever approves (a ticket, a chat message, an email);
    # they POST {"approved": true, "by": "..."} to it. Here it stays in the state.
    ctx.state["approval_url"] = approval.url
    timeout = float(ctx.input.get("approval_timeout", _THREE_DAYS))
    return ctx.wait(approval, then="issue_refund", timeout=timeout)


@refund.step
def issue_refund(ctx: StepContext) -> Wait | Complete:
    wake = ctx.wake
    decision = wake.payload if wake is not None and isinstance(wake.payload, dict) else {}
    if wake is None or wake.timed_out or decision.get("approved") is not True:
        ctx.state["decision"] = {"approved": False, "timed_out": wake is None or wake.timed_out}
        return Complete({"refunded": False})
    ctx.state["decision"] = {"approved": True, "by": decision.get("by")}
    order = ctx.state["order"]
    ctx.state["refund"] = ctx.tool(
        "refund",
        post_json,
        f"{ctx.input['api']}/refunds",
        {"order_id": order["order_id"], "amount_cents": order["amount_cents"]},
    )
    # The demo kills the worker here: the refund is recorded, this step is not.
    pause_point(ctx, "refund_issued")
    check = Poll(
        "refund_settled",
        {"api": ctx.input["api"], "refund_id": ctx.state["refund"]["refund_id"]},
        every=float(ctx.input.get("settle_poll_seconds", 60)),
    )
    return ctx.wait(check, then="finish", timeout=_THREE_DAYS)


@refund.check
def refund_settled(args: dict[str, Any]) -> dict[str, Any] | None:
    """Run on a worker every poll interval; a value ends the wait."""
    status = get_json(f"{args['api']}/refunds/{args['refund_id']}")
    return status if status.get("status") == "settled" else None


@refund.step
def finish(ctx: StepContext) -> Complete:
    settled = ctx.wake is not None and ctx.wake.kind == "poll"
    return Complete(
        {"refunded": True, "refund_id": ctx.state["refund"]["refund_id"], "settled": settled}
    )
