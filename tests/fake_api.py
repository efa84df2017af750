"""A small real HTTP server standing in for the outside world (a payment API).

It records every request and every distinct effect by idempotency key, so a
test can tell "called twice" (raw calls) from "charged twice" (effects).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from resumable.dev.fake_server import FakeServer, Reply, Request


class FakeAPI(FakeServer):
    def __init__(self, *, rate_limited: int = 0, retry_after: float = 1.0) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()  # raw requests per idempotency key
        self.effects: dict[str, dict[str, Any]] = {}  # first request body per key
        self.order: list[tuple[str, dict[str, Any]]] = []  # (path, body) of each effect
        self.arrivals: list[float] = []  # monotonic time of every request
        self.rate_limited = rate_limited  # answer this many requests 429 first
        self.retry_after = retry_after

    def handle(self, request: Request) -> Reply:
        if request.method != "POST":
            return Reply(405, {"error": "only POST"}, headers={"Allow": "POST"})
        body = request.json()
        key = request.header("Idempotency-Key") or f"nokey-{id(body)}"
        with self.lock:
            self.arrivals.append(time.monotonic())
            if self.rate_limited > 0:
                self.rate_limited -= 1
                return Reply(429, headers={"Retry-After": f"{self.retry_after:g}"})
            self.calls[key] += 1
            first = key not in self.effects
            if first:
                self.effects[key] = body
                self.order.append((request.path, body))
            return Reply(200, {"id": key[-12:], "replayed": not first, **self.effects[key]})

    def total_calls(self) -> int:
        with self.lock:
            return sum(self.calls.values())

    def effect_count(self) -> int:
        with self.lock:
            return len(self.effects)
