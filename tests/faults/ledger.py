"""The external ledger the agents of the chaos run and the fault matrix write
their side effects to: a real HTTP server in the run's process, playing a payment
API that dedupes on the idempotency key.

Each request names its logical call (a session and a call name) beside the
key, so a report can tell a repeated request (harmless: the key dedupes it)
from a repeated effect (one logical call arriving under two keys). A request
that carries a fencing token (a write under a lock) is refused with 409 when
a later token has been seen, as a fenced API refuses a stale lock holder.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

from resumable.dev.fake_server import FakeServer, Reply, Request

Call = tuple[str, str]  # (session, call name)


class Ledger(FakeServer):
    """Effects by idempotency key and by logical call, as an external API would see them.

    ``POST .../attempts`` is only a step saying that it started (not an
    effect: a recovery measurement watches for a step's second start); any
    other path is the side effect."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()  # raw requests per key
        self.keys_per_call: dict[Call, set[str]] = defaultdict(set)
        self.requests_per_call: Counter[Call] = Counter()
        self.attempts: Counter[Call] = Counter()
        self.latest_token = 0
        self.stale_refused = 0

    def handle(self, request: Request) -> Reply:
        body = request.json()
        call = (str(body["session"]), str(body["n"]))
        key = request.header("Idempotency-Key") or ""
        with self.lock:
            if request.path.endswith("/attempts"):
                self.attempts[call] += 1
                return Reply(200, {})
            token = body.get("token")
            if isinstance(token, int):
                if token < self.latest_token:
                    self.stale_refused += 1
                    return Reply(409, {"error": f"stale fencing token {token}"})
                self.latest_token = token
            self.requests[key] += 1
            self.keys_per_call[call].add(key)
            self.requests_per_call[call] += 1
        return Reply(200, {"id": key[-12:]})

    def attempted(self, call: Call, times: int) -> bool:
        """Whether step `call` has started at least `times` times."""
        with self.lock:
            return self.attempts.get(call, 0) >= times

    def calls_of(self, session: str) -> dict[str, int]:
        """The logical calls of `session` and under how many keys each arrived."""
        with self.lock:
            calls = self.keys_per_call.items()
            return {name: len(keys) for (sid, name), keys in calls if sid == session}

    def calls_under_two_keys(self) -> int:
        with self.lock:
            return sum(1 for keys in self.keys_per_call.values() if len(keys) > 1)
