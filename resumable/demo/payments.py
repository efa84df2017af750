"""Fake outside world for the demo: an order API and a payment API that
records refunds by idempotency key, as real payment providers do."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeShop:
    """Serves GET-like lookups and idempotent refunds on a loopback port."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()  # raw refund requests per key
        self.refunds: dict[str, dict[str, Any]] = {}  # refunds actually issued, by key
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/orders/lookup":
                    answer = {"order_id": body["order_id"], "amount_cents": 4200, "card": "4242"}
                elif self.path == "/refunds":
                    key = self.headers.get("Idempotency-Key", "")
                    with shop.lock:
                        shop.requests[key] += 1
                        if key not in shop.refunds:
                            shop.refunds[key] = {"refund_id": f"re_{len(shop.refunds) + 1}", **body}
                        answer = shop.refunds[key]
                else:
                    self.send_error(404)
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeShop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
