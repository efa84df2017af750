"""Rotating the webhook secret: several secrets are accepted at once, and a
sender may put several ``v1,`` signatures in one header."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import pytest

from resumable.errors import ConfigurationError
from resumable.settings import Settings
from resumable.webhooks.errors import ApiError
from resumable.webhooks.signatures import CallbackVerifier

OLD = "whsec_" + base64.b64encode(b"the-old-secret-0123456789abcdef!").decode()
NEW = "whsec_" + base64.b64encode(b"the-new-secret-0123456789abcdef!").decode()
OTHER = "whsec_" + base64.b64encode(b"someone-elses-secret-0123456789!").decode()
BODY = b'{"approved": true}'


def signature(secret: str, msg_id: str, timestamp: str, body: bytes = BODY) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return f"v1,{base64.b64encode(digest).decode()}"


def headers(*secrets: str) -> dict[str, str]:
    msg_id, timestamp = "msg_1", str(int(time.time()))
    signatures = " ".join(signature(secret, msg_id, timestamp) for secret in secrets)
    return {"webhook-id": msg_id, "webhook-timestamp": timestamp, "webhook-signature": signatures}


def test_any_configured_secret_verifies_during_a_rotation() -> None:
    verifier = CallbackVerifier(f"{NEW} {OLD}")
    verifier.verify(BODY, headers(NEW))
    verifier.verify(BODY, headers(OLD))
    verifier.verify(BODY, headers(OTHER, OLD))  # several signatures, one of them ours
    for wrong in (headers(OTHER), {**headers(NEW), "webhook-signature": ""}):
        with pytest.raises(ApiError) as refused:
            verifier.verify(BODY, wrong)
        assert (refused.value.status, refused.value.code) == (401, "invalid_signature")
    with pytest.raises(ApiError):
        verifier.verify(b'{"approved": false}', headers(NEW))


def test_after_the_rotation_the_old_secret_is_refused() -> None:
    verifier = CallbackVerifier(NEW)
    verifier.verify(BODY, headers(NEW))
    with pytest.raises(ApiError):
        verifier.verify(BODY, headers(OLD))


def test_a_bad_secret_is_named_when_the_app_starts() -> None:
    with pytest.raises(ConfigurationError, match="secret 2 is not a valid"):
        CallbackVerifier(f"{NEW} whsec_a")


def test_the_setting_takes_a_space_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESUMABLE_WEBHOOK_SECRET", f"  {NEW}   {OLD} ")
    verifier = CallbackVerifier(Settings().webhook_secret)
    verifier.verify(BODY, headers(OLD))
    verifier.verify(BODY, headers(NEW))
