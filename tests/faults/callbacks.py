"""The outside world's callbacks: a system that POSTs a signed callback to every
open callback token, as an external service would, whatever the fault."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import UTC, datetime

import psycopg
from standardwebhooks.webhooks import Webhook

from tests.faults.matrix import OBSERVER


class CallbackSender:
    """Posts a signed callback to every open callback token, as an external
    system would, retrying until the web answers (it may be down: a fault)."""

    def __init__(self, pg_url: str, web_url: str, secret: str) -> None:
        self.pg_url = pg_url
        self.web_url = web_url
        self.webhook = Webhook(secret)
        self.sent: set[str] = set()
        self.failures = 0
        self.errors: Counter[str] = Counter()  # each failure, by what it was
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="callbacks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                with psycopg.connect(self.pg_url, application_name=OBSERVER, autocommit=True) as c:
                    rows = c.execute("SELECT token FROM callbacks WHERE status = 'open'").fetchall()
            except psycopg.Error:
                continue  # PostgreSQL is the fault now
            for (token,) in rows:
                if token not in self.sent and self._send(str(token)):
                    self.sent.add(token)

    def _send(self, token: str) -> bool:
        body = json.dumps({"approved": True})
        msg_id = f"msg_{token[:24]}"
        when = time.time()
        headers = {
            "Content-Type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(when)),
            "webhook-signature": self.webhook.sign(msg_id, datetime.fromtimestamp(when, UTC), body),
        }
        request = urllib.request.Request(
            f"{self.web_url}/v1/callbacks/{token}", data=body.encode(), headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status in (200, 202)
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 409):
                return True  # closed or superseded: nothing more to deliver
            self.failures += 1
            self.errors[f"HTTP {exc.code}"] += 1
            return False
        except OSError as exc:
            self.failures += 1
            self.errors[str(getattr(exc, "reason", None) or exc)] += 1
            return False  # the web is down (a fault): sent again next round
