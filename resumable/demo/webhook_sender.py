"""Sending a callback the way a real webhook sender does.

Senders following Standard Webhooks sign ``"{id}.{timestamp}.{body}"`` with
the shared secret, and deliver at least once: a sender that timed out waiting
for the answer sends the same message again, with the same ``webhook-id``.
The demo does exactly that, twice, to show the receiver storing it once.
"""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from standardwebhooks.webhooks import Webhook


def new_secret() -> str:
    """A fresh ``whsec_...`` secret for one demo run."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass(frozen=True)
class Delivery:
    """One POST of a webhook and what the receiver answered."""

    at: datetime
    webhook_id: str
    status_code: int
    answer: dict[str, Any]


@dataclass(frozen=True)
class Signed:
    """A JSON body and the Standard Webhooks headers that sign it."""

    body: str
    headers: dict[str, str]
    at: datetime


class WebhookSender:
    """Signs and POSTs JSON payloads with one secret."""

    def __init__(self, secret: str) -> None:
        self._webhook = Webhook(secret)

    def sign(self, payload: Any, webhook_id: str | None = None) -> Signed:
        """`payload` as JSON, signed under `webhook_id` (a fresh one if None)."""
        webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
        body = json.dumps(payload)
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._webhook.sign(webhook_id, now, body),
        }
        return Signed(body, headers, now)

    def send(self, url: str, payload: Any, webhook_id: str) -> Delivery:
        signed = self.sign(payload, webhook_id)
        response = httpx.post(url, content=signed.body, headers=signed.headers, timeout=10)
        try:
            answer = response.json()
        except ValueError:
            answer = {"body": response.text[:200]}
        return Delivery(signed.at, webhook_id, response.status_code, answer)
