"""A small real HTTP server standing in for the outside world (a payment API).

It records every request and every distinct effect by idempotency key, so a
test can tell "called twice" (raw calls) from "charged twice" (effects).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeAPI:
    def __init__(self, *, rate_limited: int = 0, retry_after: float = 1.0) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()  # raw requests per idempotency key
        self.effects: dict[str, dict[str, Any]] = {}  # first request body per key
        self.order: list[tuple[str, dict[str, Any]]] = []  # (path, body) of each effect
        self.arrivals: list[float] = []  # monotonic time of every request
        self.rate_limited = rate_limited  # answer this many requests 429 first
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                key = self.headers.get("Idempotency-Key") or f"nokey-{id(body)}"
                with api.lock:
                    api.arrivals.append(time.monotonic())
                    if api.rate_limited > 0:
                        api.rate_limited -= 1
                        self.send_response(429)
                        self.send_header("Retry-After", f"{retry_after:g}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    api.calls[key] += 1
                    first = key not in api.effects
                    if first:
                        api.effects[key] = body
                        api.order.append((self.path, body))
                    response = {"id": key[-12:], "replayed": not first, **api.effects[key]}
                data = json.dumps(response).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def total_calls(self) -> int:
        with self.lock:
            return sum(self.calls.values())

    def effect_count(self) -> int:
        with self.lock:
            return len(self.effects)
