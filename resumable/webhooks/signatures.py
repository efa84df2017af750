"""Verifying callbacks signed the Standard Webhooks way.

The library checks the HMAC over ``"{id}.{timestamp}.{raw body}"`` and the
five-minute timestamp tolerance; it raises its own error for most failures but
``ValueError`` (or worse) on some malformed headers, and it keeps no replay
store. So every failure becomes a 401 here, and replays are handled by the
delivery dedupe on ``webhook-id``.

The library (1.3 and later) computes the HMAC over the body bytes as
received, so a validly signed body that is not UTF-8 passes here and is then
refused for what it is (400, not UTF-8) when it is parsed. (1.1 decoded the
body first; a subclass here signed its bytes instead, and broke when 1.3
began to hand ``sign`` bytes.)

Secrets rotate without downtime: the setting takes several, space-separated
(``whsec_new whsec_old``), and a callback signed with any of them is
accepted, as is a ``webhook-signature`` header carrying several
space-separated ``v1,`` signatures (a sender signing with old and new).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from resumable.errors import ConfigurationError
from resumable.webhooks.errors import ApiError


def _webhook(secret: str, position: int) -> Webhook:
    """The verifier for one secret; ConfigurationError naming it if unusable
    (signing a probe, since a malformed secret otherwise fails only when a
    callback arrives)."""
    try:
        webhook = Webhook(secret)
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
        problem = ""
        for webhook in self._webhooks:
            try:
                webhook.verify(body, subset, json_parse=False)
                return
            except Exception as exc:
                problem = problem or str(exc)[:200]
        raise ApiError(
            401,
            "invalid_signature",
            f"webhook signature rejected: {problem}",
            {"WWW-Authenticate": SIGNATURE_CHALLENGE},
        )
