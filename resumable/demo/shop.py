"""The demo's outside world: a shop's order API and its payment provider.

Served on a loopback port by the demo process itself, so the demo can count
what really reached the outside world: every raw request, and every refund
actually issued. Like a real payment provider it issues one refund per
``Idempotency-Key`` however often the request is repeated, and a refund
settles some time after it is issued (here: on the third status check).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from resumable.dev.fake_server import NOT_FOUND, FakeServer, Reply, Request

SETTLES_ON_CHECK = 3

_ORDER = re.compile(r"^/orders/([\w-]+)$")
_REFUND = re.compile(r"^/refunds/([\w-]+)$")


@dataclass(frozen=True)
class ShopEvent:
    """Something the outside world saw, for the demo's timeline."""

    at: datetime
    source: str  # "order API" or "payment API"
    what: str
    detail: str = ""


@dataclass
class ShopLedger:
    """What reached the shop. Guarded by `lock`: handlers run on threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    lookups: int = 0
    refund_requests: Counter[str] = field(default_factory=Counter)  # raw POSTs per key
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)  # issued, by key
    status_checks: Counter[str] = field(default_factory=Counter)  # per refund id
    events: list[ShopEvent] = field(default_factory=list)

    def note(self, source: str, what: str, detail: str = "") -> None:
        self.events.append(ShopEvent(datetime.now(UTC), source, what, detail))

    def look_up(self, order_id: str) -> dict[str, Any]:
        with self.lock:
            self.lookups += 1
            self.note("order API", "order looked up", order_id)
        return {"order_id": order_id, "amount_cents": 4200, "currency": "EUR", "card": "4242"}

    def refund(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.refund_requests[key] += 1
            if key in self.refunds:
                self.note("payment API", "repeated refund request answered", f"key {key[:16]}…")
                return self.refunds[key]
            refund = {
                "refund_id": f"re_{len(self.refunds) + 1:04d}",
                "status": "pending",
                "order_id": body.get("order_id"),
                "amount_cents": body.get("amount_cents"),
            }
            self.refunds[key] = refund
            self.note(
                "payment API",
                f"refund {refund['refund_id']} issued",
                f"{body.get('amount_cents', 0) / 100:.2f} EUR, key {key[:16]}…",
            )
            return refund

    def refund_status(self, refund_id: str) -> dict[str, Any] | None:
        with self.lock:
            if not any(r["refund_id"] == refund_id for r in self.refunds.values()):
                return None
            self.status_checks[refund_id] += 1
            checks = self.status_checks[refund_id]
            status = "settled" if checks >= SETTLES_ON_CHECK else "pending"
            self.note("payment API", f"refund {refund_id} {status}", f"status check {checks}")
            return {"refund_id": refund_id, "status": status, "checks": checks}


class FakeShop(FakeServer):
    """The order and payment APIs on ``127.0.0.1`` (a random free port)."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = ShopLedger()

    def handle(self, request: Request) -> Reply:
        if request.method == "GET":
            if order := _ORDER.fullmatch(request.path):
                return Reply(200, self.ledger.look_up(order.group(1)))
            if (refund := _REFUND.fullmatch(request.path)) and (
                status := self.ledger.refund_status(refund.group(1))
            ):
                return Reply(200, status)
        elif request.method == "POST" and request.path == "/refunds":
            key = request.header("Idempotency-Key")
            if not key:
                return Reply(400, {"error": "an Idempotency-Key header is required"})
            return Reply(200, self.ledger.refund(key, request.json()))
        return NOT_FOUND
