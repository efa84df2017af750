"""The dead-letter queue over HTTP: operator actions, validation, audit."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.models.database import Database
from resumable.settings import Settings
from resumable.webhooks.app import create_app
from tests.conftest import API_TOKEN, LocalDeployment, wait_until
from tests.fake_api import FakeAPI

AUTH = {"authorization": f"Bearer {API_TOKEN}", "x-resumable-actor": "ops@example.com"}


@pytest.fixture
def api(settings: Settings, db: Database, client: Client) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"api_tokens": [API_TOKEN]})
    app = create_app(configured, settings.database_url or "", settings.redis_url or "")
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _dead_letter(
    api: TestClient, client: Client, flag: Path, n: int = 1
) -> tuple[list[uuid.UUID], list[int]]:
    ids = [client.start("fragile", {"flag": str(flag)}) for _ in range(n)]
    wait_until(lambda: client.count_by_status() == {"failed": n}, what="dead letters")
    listed = api.get("/v1/dead-letters", headers=AUTH).json()["items"]
    return ids, [d["dead_letter_id"] for d in listed]


def test_show_retry_with_a_state_patch_and_refuse_a_second_retry(
    api: TestClient, client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.worker()
    [session_id], [dead_letter_id] = _dead_letter(api, client, tmp_path / "flag")

    shown = api.get(f"/v1/dead-letters/{dead_letter_id}", headers=AUTH).json()
    assert shown["dead_letter"]["error_type"] == "PermanentError"
    assert "Traceback" in shown["dead_letter"]["traceback"]
    assert shown["session"]["status"] == "failed"
    assert shown["events"][-1]["type"] == "session_failed"

    bad_patches = [
        [{"op": "replace", "path": "/missing/deep", "value": 1}],
        [{"op": "explode"}],
        [{"op": "replace", "path": "", "value": [1]}],
        "not a list",
    ]
    for patch in bad_patches:
        answer = api.post(
            f"/v1/dead-letters/{dead_letter_id}/retry", json={"state_patch": patch}, headers=AUTH
        )
        assert answer.status_code == 422, (patch, answer.text)
    assert client.get(session_id).status == "failed"

    (tmp_path / "flag").touch()
    patch = [{"op": "add", "path": "/patched", "value": "by ops"}]
    answer = api.post(
        f"/v1/dead-letters/{dead_letter_id}/retry",
        json={"state_patch": patch, "reason": "flag fixed"},
        headers=AUTH,
    )
    assert answer.status_code == 200
    wait_until(lambda: client.get(session_id).status == "completed", what="the retried session")
    assert client.get(session_id).result == {"fixed": True, "patched": "by ops"}
    [retried] = [e for e in client.events(session_id) if e.type == "dead_letter_retried"]
    assert retried.payload["by"].startswith("ops@example.com")
    assert retried.payload["state_patch"] == patch

    again = api.post(f"/v1/dead-letters/{dead_letter_id}/retry", headers=AUTH)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "invalid_dead_letter_state")
    assert api.get("/v1/dead-letters/999999", headers=AUTH).status_code == 404


def test_discard_needs_a_reason_and_drain_dry_run_changes_nothing(
    api: TestClient, client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.worker()
    _, letters = _dead_letter(api, client, tmp_path / "flag", n=3)
    no_reason = api.post(f"/v1/dead-letters/{letters[0]}/discard", json={}, headers=AUTH)
    assert no_reason.status_code == 422
    ok = api.post(
        f"/v1/dead-letters/{letters[0]}/discard", json={"reason": "test order"}, headers=AUTH
    )
    assert ok.status_code == 200
    twice = api.post(
        f"/v1/dead-letters/{letters[0]}/discard", json={"reason": "again"}, headers=AUTH
    )
    assert twice.status_code == 409

    dry = api.post(
        "/v1/dead-letters/drain", json={"action": "retry", "dry_run": True}, headers=AUTH
    ).json()
    assert sorted(dry["matched"]) == sorted(letters[1:]) and dry["done"] == []
    assert client.count_by_status() == {"failed": 3}
    assert (
        api.post("/v1/dead-letters/drain", json={"action": "nuke"}, headers=AUTH).status_code == 422
    )
    discarded = api.get("/v1/dead-letters?status=discarded", headers=AUTH).json()["items"]
    assert [(d["dead_letter_id"], d["resolution"]) for d in discarded] == [
        (letters[0], "test order")
    ]
    assert api.get("/v1/dead-letters?status=bogus", headers=AUTH).status_code == 422
    assert api.get("/v1/dead-letters?since=yesterday", headers=AUTH).status_code == 422
    assert api.get("/v1/dead-letters").status_code == 401

    drained = api.post(
        "/v1/dead-letters/drain",
        json={"action": "discard", "reason": "cleanup", "agent": "fragile"},
        headers=AUTH,
    ).json()
    assert sorted(drained["done"]) == sorted(letters[1:])
    assert api.get("/v1/dead-letters", headers=AUTH).json()["items"] == []


def test_the_saga_outcome_filters_a_list_and_a_drain(
    api: TestClient, client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    """`compensation` narrows HTTP as `--compensation` narrows the CLI."""
    deployment.worker()
    with FakeAPI() as fake:
        client.start("saga", {"api": fake.url})
        for _ in range(3):
            client.start("fragile", {"flag": str(tmp_path / "flag")})
        wait_until(lambda: client.count_by_status() == {"failed": 4}, what="dead letters")
    letters = [
        d["dead_letter_id"] for d in api.get("/v1/dead-letters", headers=AUTH).json()["items"]
    ]
    by_outcome: dict[str, list[int]] = {}
    for outcome in ("none", "completed", "failed"):
        page = api.get(f"/v1/dead-letters?compensation={outcome}", headers=AUTH)
        assert page.status_code == 200, page.text
        by_outcome[outcome] = [d["dead_letter_id"] for d in page.json()["items"]]
        assert {d["compensation"] for d in page.json()["items"]} <= {outcome}
    assert len(by_outcome["none"]) == 3 and len(by_outcome["completed"]) == 1
    assert by_outcome["failed"] == []
    assert sorted(by_outcome["none"] + by_outcome["completed"]) == sorted(letters)
    bogus = api.get("/v1/dead-letters?compensation=undone", headers=AUTH)
    assert (bogus.status_code, bogus.json()["error"]["code"]) == (422, "invalid_request")

    dry = api.post(
        "/v1/dead-letters/drain",
        json={"action": "retry", "dry_run": True, "compensation": "none"},
        headers=AUTH,
    ).json()
    assert sorted(dry["matched"]) == sorted(by_outcome["none"]) and not dry["refused"]
    discarded = api.post(
        "/v1/dead-letters/drain",
        json={"action": "discard", "reason": "cleanup", "compensation": "completed"},
        headers=AUTH,
    ).json()
    assert discarded["done"] == by_outcome["completed"]
    refused = api.post(
        "/v1/dead-letters/drain", json={"action": "retry", "compensation": "all"}, headers=AUTH
    )
    assert refused.status_code == 422
    assert client.count_by_status() == {"failed": 4}
