"""Verifying callbacks signed the Standard Webhooks way.

The library checks the HMAC over ``"{id}.{timestamp}.{raw body}"`` and the
five-minute timestamp tolerance; it raises its own error for most failures but
``ValueError`` (or worse) on some malformed headers, and it keeps no replay
store. So every failure becomes a 401 here, and replays are handled by the
delivery dedupe on ``webhook-id``.

The library decodes the body as UTF-8 before it computes the HMAC, so a
validly signed body that is not UTF-8 would fail as a bad signature; the
HMAC is computed here over the raw bytes instead, and such a body is then
refused for what it is (400, not UTF-8) when it is parsed.

Secrets rotate without downtime: the setting takes several, space-separated
(``whsec_new whsec_old``), and a callback signed with any of them is
accepted, as is a ``webhook-signature`` header carrying several
space-separated ``v1,`` signatures (a sender signing with old and new).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime
from math import floor

from standardwebhooks.webhooks import Webhook

from resumable.errors import ConfigurationError
from resumable.webhooks.errors import ApiError


class _RawBodyWebhook(Webhook):
    """`sign` over the raw body bytes (carried through as a ``surrogateescape``
    string), so a signature over any bytes can be checked."""

    def sign(self, msg_id: str, timestamp: datetime, data: str) -> str:
        timestamp_str = str(floor(timestamp.replace(tzinfo=UTC).timestamp()))
        to_sign = f"{msg_id}.{timestamp_str}.{data}".encode("utf-8", "surrogateescape")
        signature = hmac.new(self._whsecret, to_sign, hashlib.sha256).digest()
        return f"v1,{base64.b64encode(signature).decode('ascii')}"


def _webhook(secret: str, position: int) -> Webhook:
    """The verifier for one secret; ConfigurationError naming it if unusable
    (signing a probe, since a malformed secret otherwise fails only when a
    callback arrives)."""
    try:
        webhook = _RawBodyWebhook(secret)
        webhook.sign("probe", datetime.now(UTC), "")
    except Exception as exc:
        raise ConfigurationError(
            f"RESUMABLE_WEBHOOK_SECRET: secret {position} is not a valid Standard Webhooks "
            "secret (expected whsec_ followed by base64; several are separated by spaces)"
        ) from exc
    return webhook


SIGNATURE_CHALLENGE = 'Webhook-Signature realm="resumable"'


class CallbackVerifier:
    """Checks signatures when secrets are configured (any one may have signed);
    otherwise lets callbacks through on the strength of their unguessable token."""

    def __init__(self, secrets: str | None) -> None:
        self._webhooks = [
            _webhook(secret, position)
            for position, secret in enumerate((secrets or "").split(), start=1)
        ]

    def verify(self, body: bytes, headers: Mapping[str, str]) -> None:
        if not self._webhooks:
            return
        wanted = ("webhook-id", "webhook-timestamp", "webhook-signature")
        subset = {name: headers.get(name, "") for name in wanted}
        raw = body.decode("utf-8", "surrogateescape")
        problem = ""
        for webhook in self._webhooks:
            try:
                webhook.verify(raw, subset, json_parse=False)
                return
            except Exception as exc:
                problem = problem or str(exc)[:200]
        raise ApiError(
            401,
            "invalid_signature",
            f"webhook signature rejected: {problem}",
            {"WWW-Authenticate": SIGNATURE_CHALLENGE},
        )
