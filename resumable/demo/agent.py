"""The demo's refund agent (run by the demo's worker processes)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from resumable import Agent, Complete, StepContext

refund = Agent("demo-refund", description="Looks up an order and refunds it exactly once.")


def call_api(url: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


@refund.step
def lookup_order(ctx: StepContext) -> str:
    order = ctx.tool("lookup_order", call_api, f"{ctx.input['api']}/orders/lookup", ctx.input)
    ctx.state["order"] = order
    ctx.state["plan"] = ["lookup_order", "issue_refund", "confirm"]
    return "issue_refund"


@refund.step
def issue_refund(ctx: StepContext) -> str:
    order = ctx.state["order"]
    receipt = ctx.tool(
        "refund",
        call_api,
        f"{ctx.input['api']}/refunds",
        {"order_id": order["order_id"], "amount_cents": order["amount_cents"]},
    )
    ctx.state["refund"] = receipt
    # The demo kills the worker here, after the refund call has been recorded
    # and before this step's checkpoint commits.
    gate = Path(ctx.input["gate_dir"])
    (gate / "refund-issued").touch()
    deadline = time.monotonic() + 60
    while (gate / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "confirm"


@refund.step
def confirm(ctx: StepContext) -> Complete:
    return Complete({"refund_id": ctx.state["refund"]["refund_id"], "status": "refunded"})
