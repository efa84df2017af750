"""A fake LLM provider with a real rate limit: a token bucket of `rate`
requests a second holding at most `capacity`, answering HTTP 429 with a
Retry-After when it is empty, as providers do. It logs every request (its
arrival, session, idempotency key and answer) for the tests and the rate
limit benchmark to count from."""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from resumable import RateLimited
from resumable.dev.fake_server import FakeServer, Reply, Request


def ask(url: str, body: dict[str, Any], *, timeout: float = 30) -> dict[str, Any]:
    """POST `body` to the fake, as an agent's tool would to a provider: its
    HTTP 429 becomes ``RateLimited`` with the Retry-After it sent."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as exc:
        if exc.code != 429:
            raise
        after = exc.headers.get("Retry-After")
        retry_after = float(after) if after else None
        raise RateLimited("the provider said 429", retry_after=retry_after) from exc


@dataclass(frozen=True)
class Arrival:
    at: float  # time.monotonic()
    session: str
    key: str
    status: int


class FakeLLM(FakeServer):
    def __init__(
        self,
        rate: float,
        capacity: float | None = None,
        *,
        refuse_first: int = 0,
        tokens: int = 7,
        retry_after: str | None = None,
    ) -> None:
        super().__init__()
        self.rate = rate
        self.capacity = capacity if capacity is not None else rate
        self._level = self.capacity
        self._stamp = time.monotonic()
        self._refuse = refuse_first  # answer these first requests 429 whatever the bucket
        self._tokens = tokens
        self._retry_after = retry_after  # the header's value; None: the bucket's own
        self.lock = threading.Lock()
        self.arrivals: list[Arrival] = []

    def handle(self, request: Request) -> Reply:
        body = request.json()
        with self.lock:
            now = time.monotonic()
            self._level = min(self.capacity, self._level + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._refuse > 0:
                self._refuse -= 1
                status = 429
            elif self._level >= 1:
                self._level -= 1
                status = 200
            else:
                status = 429
            self.arrivals.append(Arrival(now, body.get("session", ""), body.get("key", ""), status))
            level = self._level
        if status == 429:
            after = self._retry_after or str(max(1, math.ceil((1 - level) / self.rate)))
            return Reply(429, {"error": "rate limited"}, headers={"Retry-After": after})
        return Reply(200, {"text": "hello", "tokens": self._tokens})

    def answered(self) -> list[Arrival]:
        with self.lock:
            return [a for a in self.arrivals if a.status == 200]

    def refused(self) -> list[Arrival]:
        with self.lock:
            return [a for a in self.arrivals if a.status == 429]


def most_in_any_window(times: list[float], window: float) -> int:
    """The most of `times` inside any half-open window of `window` seconds."""
    ordered = sorted(times)
    most, start = 0, 0
    for end, at in enumerate(ordered):
        while at - ordered[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most
