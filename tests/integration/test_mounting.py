"""The receiver mounted inside a FastAPI application (examples/fastapi_app.py),
over the real PostgreSQL and Redis with a real worker: the shop starts a
session from its own endpoint, the payment callback arrives under the mount
(signed with the secret being rotated out), and the mounted API, its
document and its auth work under the prefix."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from examples.fastapi_app import create_shop
from resumable.settings import Settings
from resumable.webhooks.app import create_app
from resumable.webhooks.state import LifespanNotRunError
from tests.conftest import API_TOKEN, ManagedProcess, wait_until
from tests.signing import signed_bytes

AUTH = {"authorization": f"Bearer {API_TOKEN}"}
OLD_SECRET = "whsec_" + base64.b64encode(b"secret-being-rotated-out-0123456").decode()
NEW_SECRET = "whsec_" + base64.b64encode(b"secret-being-rotated-in-01234567").decode()
PUBLIC_URL = "http://testserver/resumable"


@pytest.fixture
def shop_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "api_tokens": [API_TOKEN],
            "webhook_secret": f"{NEW_SECRET} {OLD_SECRET}",
            "public_url": PUBLIC_URL,
        }
    )


@pytest.fixture
def checkout_worker(start_process: Callable[..., ManagedProcess]) -> ManagedProcess:
    return start_process(
        ["worker", "--agents", "examples.fastapi_app"],
        "worker started",
        RESUMABLE_PUBLIC_URL=PUBLIC_URL,
    )


def _session(http: TestClient, session_id: str) -> dict[str, Any]:
    answer = http.get(f"/resumable/v1/sessions/{session_id}", headers=AUTH)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_fastapi_app_starts_sessions_and_serves_the_mounted_receiver(
    shop_settings: Settings, checkout_worker: ManagedProcess
) -> None:
    with TestClient(create_shop(shop_settings)) as http:
        placed = http.post("/orders", json={"order_id": "o-1", "amount": 500})
        assert placed.status_code == 201, placed.text
        session_id = placed.json()["session_id"]
        assert placed.json()["status_url"] == f"{PUBLIC_URL}/v1/sessions/{session_id}"
        again = http.post("/orders", json={"order_id": "o-1", "amount": 500})
        assert again.json()["session_id"] == session_id  # idempotent on the order id
        # The same order id for another amount: the receiver's 409, not a 500.
        reused = http.post("/orders", json={"order_id": "o-1", "amount": 900})
        assert (reused.status_code, reused.json()["error"]["code"]) == (
            409,
            "idempotency_key_reused",
        ), reused.text
        assert http.post("/orders", json={"order_id": "o 1", "amount": 0}).status_code == 422

        wait_until(lambda: _session(http, session_id)["status"] == "suspended", what="payment")
        payment_url = _session(http, session_id)["state"]["payment_url"]
        assert payment_url.startswith(f"{PUBLIC_URL}/v1/callbacks/")
        path = urlsplit(payment_url).path
        body = json.dumps({"paid": True}).encode()
        forged = http.post(
            path, content=body, headers=signed_bytes(body, secret="whsec_" + "QUJD" * 8)
        )
        assert (forged.status_code, forged.json()["error"]["code"]) == (401, "invalid_signature")
        # Signed with the secret being rotated out: still accepted.
        delivered = http.post(path, content=body, headers=signed_bytes(body, secret=OLD_SECRET))
        assert delivered.status_code == 202, delivered.text
        assert delivered.json()["session_id"] == session_id

        wait_until(lambda: _session(http, session_id)["status"] == "completed", what="completion")
        assert _session(http, session_id)["result"] == {"order_id": "o-1", "paid": True}
        events = http.get(f"/resumable/v1/sessions/{session_id}/events", headers=AUTH).json()
        assert events["items"][0]["type"] == "session_created"


def test_the_mounted_receiver_keeps_its_auth_errors_and_document(
    shop_settings: Settings, checkout_worker: ManagedProcess
) -> None:
    with TestClient(create_shop(shop_settings)) as http:
        assert http.get("/resumable/healthz").json() == {"status": "ok"}
        assert http.get("/resumable/readyz").status_code == 200
        refused = http.get("/resumable/v1/sessions")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert http.get("/resumable/v1/sessions", headers=AUTH).json()["items"] == []
        not_allowed = http.delete("/resumable/v1/sessions", headers=AUTH)
        assert (not_allowed.status_code, not_allowed.headers["allow"]) == (405, "GET, HEAD, POST")
        unknown = http.post("/resumable/v1/sessions", json={"agent": "nope"}, headers=AUTH)
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (422, "unknown_agent")

        document = http.get("/resumable/openapi.json", headers=AUTH).json()
        validate(document)
        assert document["servers"] == [
            {"url": "/resumable", "description": "Where this app is mounted."}
        ]
        # The host's own routes and document are its own.
        assert "/orders" in http.get("/openapi.json").json()["paths"]
        assert "/orders" not in document["paths"]


def test_a_host_that_forgets_the_lifespan_gets_a_clear_error(shop_settings: Settings) -> None:
    host = Starlette(routes=[Mount("/resumable", create_app(shop_settings))])
    with TestClient(host) as http, pytest.raises(LifespanNotRunError, match="running"):
        http.get("/resumable/v1/sessions", headers=AUTH)
