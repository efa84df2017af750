"""Signing test callbacks the way a Standard Webhooks sender does."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from standardwebhooks.webhooks import Webhook

from tests.conftest import WEBHOOK_SECRET


def signed_headers(
    body: str,
    *,
    msg_id: str | None = None,
    secret: str = WEBHOOK_SECRET,
    timestamp: datetime | None = None,
) -> dict[str, str]:
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    when = timestamp or datetime.now(UTC)
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, when, body),
    }


def signed_bytes(
    body: bytes, *, msg_id: str | None = None, secret: str = WEBHOOK_SECRET
) -> dict[str, str]:
    """Standard Webhooks headers for any body bytes (non-UTF-8 too), computed
    here: the library only signs text."""
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    timestamp = str(int(time.time()))
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": f"v1,{base64.b64encode(digest).decode()}",
    }


def signed(payload: Any, **kwargs: Any) -> tuple[str, dict[str, str]]:
    body = json.dumps(payload)
    return body, signed_headers(body, **kwargs)
