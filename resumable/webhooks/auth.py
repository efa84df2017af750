"""Bearer-token authentication for the API (callbacks and health are exempt)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from starlette.requests import Request

from resumable.settings import Settings
from resumable.webhooks.errors import ApiError


def local_token(home: Path) -> str:
    """The token used when none is configured: made once, kept under the home
    directory, so local processes (`resumable dev`, the CLI) agree on it."""
    path = home / "api-token"
    if path.exists():
        return path.read_text().strip()
    home.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(token)
    return token


def accepted_tokens(settings: Settings) -> list[str]:
    return list(settings.api_tokens) or [local_token(settings.home_dir)]


class BearerAuth:
    """Checks ``Authorization: Bearer <token>`` in constant time."""

    def __init__(self, tokens: list[str]) -> None:
        self._tokens = [t.encode() for t in tokens if t]

    def actor(self, request: Request) -> str:
        """The caller's identity for the audit log, or a 401."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value:
            raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer ...)")
        given = value.strip().encode()
        if not any(hmac.compare_digest(given, token) for token in self._tokens):
            raise ApiError(401, "unauthorized", "invalid bearer token")
        fingerprint = hashlib.sha256(given).hexdigest()[:8]
        who = request.headers.get("x-resumable-actor", "").strip()[:200]
        return f"{who} (token {fingerprint})" if who else f"token {fingerprint}"
