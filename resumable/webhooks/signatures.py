"""Verifying callbacks signed the Standard Webhooks way.

The library checks the HMAC over ``"{id}.{timestamp}.{raw body}"`` and the
five-minute timestamp tolerance; it raises its own error for most failures but
``ValueError`` (or worse) on some malformed headers, and it keeps no replay
store. So every failure becomes a 401 here, and replays are handled by the
delivery dedupe on ``webhook-id``.
"""

from __future__ import annotations

from collections.abc import Mapping

from standardwebhooks.webhooks import Webhook

from resumable.errors import ConfigurationError
from resumable.webhooks.errors import ApiError


class CallbackVerifier:
    """Checks signatures when a secret is configured; otherwise lets callbacks
    through on the strength of their unguessable token."""

    def __init__(self, secret: str | None) -> None:
        self._webhook: Webhook | None = None
        if secret:
            try:
                self._webhook = Webhook(secret)
            except Exception as exc:
                raise ConfigurationError(
                    "RESUMABLE_WEBHOOK_SECRET is not a valid Standard Webhooks secret "
                    "(expected whsec_ followed by base64)"
                ) from exc

    def verify(self, body: bytes, headers: Mapping[str, str]) -> None:
        if self._webhook is None:
            return
        wanted = ("webhook-id", "webhook-timestamp", "webhook-signature")
        subset = {name: headers.get(name, "") for name in wanted}
        try:
            self._webhook.verify(body, subset, json_parse=False)
        except Exception as exc:
            raise ApiError(401, "invalid_signature", f"webhook signature rejected: {exc}") from None
