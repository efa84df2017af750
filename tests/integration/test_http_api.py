"""The HTTP contract in-process (Starlette TestClient), against real services:
authentication, validation, signatures, error shapes, pagination, cancel."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.models.database import Database
from resumable.settings import Settings
from resumable.webhooks.app import create_app
from tests.conftest import API_TOKEN, WEBHOOK_SECRET, LocalDeployment, wait_until
from tests.signing import signed, signed_headers

AUTH = {"authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture
def api(settings: Settings, db: Database, client: Client) -> Iterator[TestClient]:
    configured = settings.model_copy(
        update={"api_tokens": [API_TOKEN], "webhook_secret": WEBHOOK_SECRET}
    )
    app = create_app(configured, settings.database_url or "", settings.redis_url or "")
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _count(db: Database, sql: str) -> int:
    with db.connection() as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    value = next(iter(row.values()))
    assert isinstance(value, int)
    return value


def _suspended_callback(client: Client, deployment: LocalDeployment) -> tuple[uuid.UUID, str]:
    deployment.worker()
    session_id = client.start("approval", {})
    wait_until(lambda: client.get(session_id).status == "suspended", what="suspension")
    return session_id, urlsplit(client.state(session_id)["callback_url"]).path


def _nothing_stored(db: Database, client: Client, session_id: uuid.UUID) -> None:
    assert _count(db, "SELECT count(*) FROM deliveries") == 0
    assert _count(db, "SELECT count(*) FROM callbacks WHERE status <> 'open'") == 0
    assert client.get(session_id).status == "suspended"


def test_signature_failures_are_401_and_store_nothing(
    api: TestClient, db: Database, client: Client, deployment: LocalDeployment
) -> None:
    session_id, path = _suspended_callback(client, deployment)
    body = json.dumps({"approved": True})
    now = datetime.now(UTC)
    good = signed_headers(body)
    other_secret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
    cases: dict[str, tuple[str, dict[str, str]]] = {
        "wrong secret": (body, signed_headers(body, secret=other_secret)),
        "altered body": (body.replace("true", "false"), good),
        "too old": (body, signed_headers(body, timestamp=now - timedelta(minutes=6))),
        "too new": (body, signed_headers(body, timestamp=now + timedelta(minutes=6))),
        "no id": (body, {k: v for k, v in good.items() if k != "webhook-id"}),
        "no timestamp": (body, {k: v for k, v in good.items() if k != "webhook-timestamp"}),
        "no signature": (body, {k: v for k, v in good.items() if k != "webhook-signature"}),
        "no comma": (body, {**good, "webhook-signature": "v1"}),
        "bad base64": (body, {**good, "webhook-signature": "v1,***not-base64***"}),
        "bad timestamp": (body, {**good, "webhook-timestamp": "yesterday"}),
        "binary body": ("\udcff", good),
    }
    for name, (content, headers) in cases.items():
        raw = content.encode("utf-8", "surrogateescape")
        answer = api.post(path, content=raw, headers=headers)
        assert answer.status_code == 401, (name, answer.text)
        assert answer.json()["error"]["code"] == "invalid_signature", name
    _nothing_stored(db, client, session_id)

    answer = api.post(path, content=body, headers=good)
    assert answer.status_code == 202
    assert answer.json()["status"] == "accepted"


def test_bad_bodies_get_clear_4xx_and_store_nothing(
    api: TestClient, db: Database, client: Client, deployment: LocalDeployment
) -> None:
    session_id, path = _suspended_callback(client, deployment)
    not_json = "{approved: yes"
    answer = api.post(path, content=not_json, headers=signed_headers(not_json))
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "malformed_json")

    huge = json.dumps({"blob": "x" * (10 * 1024 * 1024)})
    answer = api.post(path, content=huge, headers=signed_headers(huge))
    assert (answer.status_code, answer.json()["error"]["code"]) == (413, "payload_too_large")

    text = "approved"
    headers = {**signed_headers(text), "content-type": "text/plain"}
    answer = api.post(path, content=text, headers=headers)
    assert (answer.status_code, answer.json()["error"]["code"]) == (415, "unsupported_media_type")
    _nothing_stored(db, client, session_id)

    body, headers = signed({"ok": True})
    answer = api.post("/v1/callbacks/no-such-token", content=body, headers=headers)
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found")


def test_api_routes_need_a_bearer_token(api: TestClient) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic abc"}):
        answer = api.get("/v1/sessions", headers=headers)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthorized"
    assert api.get("/healthz").status_code == 200
    ready = api.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}
    assert api.get("/v1/sessions", headers=AUTH).status_code == 200


def test_create_session_validates_and_is_idempotent(
    api: TestClient, client: Client, deployment: LocalDeployment
) -> None:
    answer = api.post("/v1/sessions", json={"agent": "five"}, headers=AUTH)
    assert answer.status_code == 422
    assert "no worker has registered" in answer.json()["error"]["message"]
    deployment.worker()  # announces the agents in tests.agents

    bad = {
        "not json": ("{", 400),
        "not an object": ("[1]", 422),
        "no agent": ('{"input": 1}', 422),
        "unknown field": ('{"agent": "five", "extra": 1}', 422),
        "unknown agent": ('{"agent": "nope"}', 422),
        "bad session id": ('{"agent": "five", "session_id": "x"}', 422),
    }
    for name, (content, status) in bad.items():
        answer = api.post(
            "/v1/sessions",
            content=content,
            headers={**AUTH, "content-type": "application/json"},
        )
        assert answer.status_code == status, (name, answer.text)
        assert set(answer.json()) == {"error"}
    assert client.count_by_status() == {}

    headers = {**AUTH, "Idempotency-Key": "order-7"}
    first = api.post("/v1/sessions", json={"agent": "five", "input": {"a": 1}}, headers=headers)
    again = api.post("/v1/sessions", json={"agent": "five", "input": {"a": 1}}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json()["session_id"] == again.json()["session_id"]
    assert again.headers["idempotent-replayed"] == "true"
    conflict = api.post("/v1/sessions", json={"agent": "five", "input": {"a": 2}}, headers=headers)
    assert conflict.status_code == 409
    chosen = str(uuid.uuid4())
    made = api.post("/v1/sessions", json={"agent": "five", "session_id": chosen}, headers=AUTH)
    assert made.status_code == 201 and made.json()["session_id"] == chosen
    taken = api.post("/v1/sessions", json={"agent": "five", "session_id": chosen}, headers=AUTH)
    assert (taken.status_code, taken.json()["error"]["code"]) == (409, "session_exists")
    wait_until(lambda: client.count_by_status() == {"completed": 2}, what="both sessions")


def test_list_pagination_filters_and_events(api: TestClient, client: Client) -> None:
    ids = [str(client.start("five", {"i": i})) for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/sessions", params=params, headers=AUTH).json()
        seen += [s["session_id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    assert api.get("/v1/sessions?status=completed", headers=AUTH).json()["items"] == []
    assert api.get("/v1/sessions?status=bogus", headers=AUTH).status_code == 422
    assert api.get("/v1/sessions?limit=0", headers=AUTH).status_code == 422
    assert api.get("/v1/sessions?cursor=garbage", headers=AUTH).status_code == 400

    one = api.get(f"/v1/sessions/{ids[0]}", headers=AUTH).json()
    assert (one["agent"], one["status"], one["input"]) == ("five", "pending", {"i": 0})
    events = api.get(f"/v1/sessions/{ids[0]}/events", headers=AUTH).json()
    assert [e["type"] for e in events["items"]] == ["session_created"]
    assert api.get(f"/v1/sessions/{uuid.uuid4()}", headers=AUTH).status_code == 404
    assert api.get("/v1/sessions/not-a-uuid/events", headers=AUTH).status_code == 404


def test_cancel_fences_a_running_worker_and_closes_callbacks(
    api: TestClient, client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    worker = deployment.worker()
    (tmp_path / "hold").touch()
    session_id = client.start("approval", {"gate_dir": str(tmp_path)})
    wait_until((tmp_path / "callback_url").exists, what="the step to run")
    path = urlsplit((tmp_path / "callback_url").read_text()).path

    answer = api.post(
        f"/v1/sessions/{session_id}/cancel",
        json={"reason": "customer withdrew"},
        headers={**AUTH, "x-resumable-actor": "ops@example.com"},
    )
    assert answer.status_code == 200
    (tmp_path / "hold").unlink()
    wait_until(lambda: "not committed" in worker.output(), what="the fenced commit")

    session = client.get(session_id)
    assert session.status == "cancelled" and session.seq == 0
    cancelled = [e for e in client.events(session_id) if e.type == "session_cancelled"]
    assert cancelled[0].payload["reason"] == "customer withdrew"
    assert cancelled[0].payload["by"].startswith("ops@example.com")
    again = api.post(f"/v1/sessions/{session_id}/cancel", headers=AUTH)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "invalid_session_state")
    body, headers = signed({"late": True})
    late = api.post(path, content=body, headers=headers)
    assert late.status_code == 409
    assert "cancelled" in late.json()["error"]["message"]
    assert api.post(f"/v1/sessions/{uuid.uuid4()}/cancel", headers=AUTH).status_code == 404


def test_signals_validate_topic_session_and_state(api: TestClient, client: Client) -> None:
    session_id = client.start("five")
    assert (
        api.post(f"/v1/sessions/{uuid.uuid4()}/signals/go", json={}, headers=AUTH).status_code
        == 404
    )
    assert (
        api.post(f"/v1/sessions/{session_id}/signals/bad topic!", json={}, headers=AUTH).status_code
        == 422
    )
    assert api.post(f"/v1/sessions/{session_id}/signals/go", json={}).status_code == 401
    client.cancel(session_id, actor="test", reason=None)
    refused = api.post(f"/v1/sessions/{session_id}/signals/go", json={"x": 1}, headers=AUTH)
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "wait_closed")
    assert [e.type for e in client.events(session_id)][-1] == "signal_rejected"


def test_openapi_describes_every_route(api: TestClient) -> None:
    schema = api.get("/openapi.json", headers=AUTH).json()
    described = {(path, method.upper()) for path, ops in schema["paths"].items() for method in ops}
    expected = {
        ("/v1/sessions", "POST"),
        ("/v1/sessions", "GET"),
        ("/v1/sessions/{session_id}", "GET"),
        ("/v1/sessions/{session_id}/events", "GET"),
        ("/v1/sessions/{session_id}/cancel", "POST"),
        ("/v1/sessions/{session_id}/priority", "POST"),
        ("/v1/sessions/{session_id}/resume", "POST"),
        ("/v1/sessions/{session_id}/accept", "GET"),
        ("/v1/sessions/{session_id}/accept", "POST"),
        ("/v1/sessions/{session_id}/fail", "POST"),
        ("/v1/sessions/{session_id}/signals/{topic}", "POST"),
        ("/v1/sessions/{session_id}/checkpoints", "GET"),
        ("/v1/sessions/{session_id}/checkpoints/{seq}", "GET"),
        ("/v1/sessions/{session_id}/fork", "POST"),
        ("/v1/callbacks/{token}", "POST"),
        ("/v1/dead-letters", "GET"),
        ("/v1/dead-letters/drain", "POST"),
        ("/v1/dead-letters/{dead_letter_id}", "GET"),
        ("/v1/dead-letters/{dead_letter_id}/retry", "POST"),
        ("/v1/dead-letters/{dead_letter_id}/discard", "POST"),
        ("/v1/schedules", "GET"),
        ("/v1/schedules", "POST"),
        ("/v1/schedules/{name}", "GET"),
        ("/v1/schedules/{name}", "DELETE"),
        ("/v1/schedules/{name}/pause", "POST"),
        ("/v1/schedules/{name}/resume", "POST"),
        ("/v1/schedules/{name}/trigger", "POST"),
        ("/v1/concurrency-keys", "GET"),
        ("/v1/rate-limits", "GET"),
        ("/healthz", "GET"),
        ("/metrics", "GET"),
        ("/readyz", "GET"),
        ("/openapi.json", "GET"),
        ("/v1/shared/{name}", "GET"),
        ("/v1/shared/{name}/history", "GET"),
    }
    assert described == expected
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert op.get("summary"), (path, method)


def test_metrics_count_sessions_and_deliveries(
    api: TestClient, client: Client, deployment: LocalDeployment
) -> None:
    session_id, path = _suspended_callback(client, deployment)
    client.start("no-worker-knows-this")
    body, headers = signed({"ok": True})
    assert api.post(path, content=body, headers=headers).status_code == 202
    assert api.post(path, content=body, headers=headers).status_code == 200
    wait_until(lambda: client.get(session_id).status == "completed", what="completion")
    text = api.get("/metrics", headers=AUTH).text
    assert 'resumable_sessions{agent="approval",status="completed"} 1.0' in text
    assert 'resumable_deliveries_total{kind="callback",outcome="accepted"} 1.0' in text
    assert 'resumable_deliveries_total{kind="callback",outcome="duplicate"} 1.0' in text
    assert "resumable_dead_letters_open" in text
