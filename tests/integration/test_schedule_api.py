"""Schedules over HTTP and from the command line: each action, its answer
and its refusals (bad definitions, hostile names and values), nothing
changed by a refused request."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.models import agent_queries
from resumable.models.database import Database
from resumable.settings import Settings
from resumable.webhooks.app import create_app
from tests.conftest import API_TOKEN, run_cli

AUTH = {"authorization": f"Bearer {API_TOKEN}", "x-resumable-actor": "ops@example.com"}
WEEKDAYS = {
    "name": "weekday-summary",
    "agent": "five",
    "cron": "0 8 * * 1-5",
    "timezone": "Europe/Paris",
    "input": {"inbox": "support"},
}


@pytest.fixture
def api(settings: Settings, db: Database, client: Client) -> Iterator[TestClient]:
    with db.connection() as conn:  # as a worker that loads `five` would have
        agent_queries.register_agent(conn, "five", steps=["one"], checks=[])
    configured = settings.model_copy(update={"api_tokens": [API_TOKEN]})
    app = create_app(configured, settings.database_url or "", settings.redis_url or "")
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _error(answer: Any) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


def test_create_read_pause_resume_trigger_and_delete_over_http(
    api: TestClient, client: Client
) -> None:
    created = api.post("/v1/schedules", json=WEEKDAYS, headers=AUTH)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["when"] == "At 08:00 on Monday through Friday (Europe/Paris)"
    assert (body["source"], body["paused"]) == ("api", False)
    assert body["created_by"].startswith("ops@example.com (token ")
    again = api.post("/v1/schedules", json=WEEKDAYS, headers=AUTH)
    assert again.status_code == 200 and again.json() == body
    other = api.post("/v1/schedules", json={**WEEKDAYS, "cron": "0 9 * * *"}, headers=AUTH)
    assert _error(other) == (409, "schedule_exists")

    assert api.get("/v1/schedules/weekday-summary", headers=AUTH).json() == body
    listed = api.get("/v1/schedules", headers=AUTH).json()
    assert [s["name"] for s in listed["items"]] == ["weekday-summary"]
    assert listed["next_cursor"] is None

    paused = api.post(
        "/v1/schedules/weekday-summary/pause", json={"reason": "holiday"}, headers=AUTH
    ).json()
    assert paused["paused"] and paused["paused_reason"] == "holiday"
    triggered = api.post("/v1/schedules/weekday-summary/trigger", headers=AUTH)
    assert triggered.status_code == 201
    session_id = uuid.UUID(triggered.json()["session_id"])
    assert client.get(session_id).input == {"inbox": "support"}
    resumed = api.post("/v1/schedules/weekday-summary/resume", headers=AUTH).json()
    assert not resumed["paused"] and resumed["last_session_id"] == str(session_id)

    assert api.delete("/v1/schedules/weekday-summary", headers=AUTH).status_code == 204
    gone = api.get("/v1/schedules/weekday-summary", headers=AUTH)
    assert _error(gone) == (404, "schedule_not_found")
    assert _error(api.delete("/v1/schedules/weekday-summary", headers=AUTH)) == (
        404,
        "schedule_not_found",
    )


def test_pages_of_schedules_by_name(api: TestClient) -> None:
    for n in range(5):
        body = {"name": f"s{n}", "agent": "five", "every_seconds": 60 + n}
        assert api.post("/v1/schedules", json=body, headers=AUTH).status_code == 201
    first = api.get("/v1/schedules?limit=3", headers=AUTH).json()
    assert [s["name"] for s in first["items"]] == ["s0", "s1", "s2"]
    rest = api.get(f"/v1/schedules?limit=3&cursor={first['next_cursor']}", headers=AUTH).json()
    assert [s["name"] for s in rest["items"]] == ["s3", "s4"] and rest["next_cursor"] is None
    assert api.get("/v1/schedules?agent=other", headers=AUTH).json()["items"] == []


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"cron": "61 * * * *"}, 422, "invalid_schedule"),
        ({"cron": "0 0 30 2 *"}, 422, "invalid_schedule"),
        ({"cron": None}, 422, "invalid_schedule"),  # neither cron nor every
        ({"every_seconds": 60}, 422, "invalid_schedule"),  # both
        ({"cron": None, "every_seconds": 0.5}, 422, "invalid_request"),
        ({"cron": None, "every_seconds": 1e308}, 422, "invalid_request"),
        ({"timezone": "Mars/Olympus"}, 422, "invalid_schedule"),
        ({"timezone": "Europe/\u0000"}, 400, "malformed_json"),
        ({"name": "a b"}, 422, "invalid_request"),
        ({"name": "x" * 129}, 422, "invalid_request"),
        ({"agent": "nobody"}, 422, "unknown_agent"),
        ({"catch_up": "some"}, 422, "invalid_request"),
        ({"overlap": "never"}, 422, "invalid_request"),
        ({"paused": "yes"}, 422, "invalid_request"),
        ({"extra": 1}, 422, "invalid_request"),
    ],
)
def test_a_bad_schedule_is_refused_and_nothing_is_created(
    api: TestClient, change: dict[str, Any], status: int, code: str
) -> None:
    answer = api.post("/v1/schedules", json={**WEEKDAYS, **change}, headers=AUTH)
    assert _error(answer)[0] == status, answer.text
    assert _error(answer)[1] == code, answer.text
    assert api.get("/v1/schedules", headers=AUTH).json()["items"] == []


def test_hostile_names_in_paths_and_bodies_are_client_errors(api: TestClient) -> None:
    assert api.post("/v1/schedules", json=WEEKDAYS, headers=AUTH).status_code == 201
    for path in ("no-such", "%00", "a%20b", "x" * 300, "..%2F..%2Fv1%2Fsessions"):
        answer = api.get(f"/v1/schedules/{path}", headers=AUTH)
        assert 400 <= answer.status_code < 500, (path, answer.text)
    pause = api.post("/v1/schedules/weekday-summary/pause", json={"reason": 5}, headers=AUTH)
    assert _error(pause) == (422, "invalid_request")
    resume = api.post("/v1/schedules/weekday-summary/resume", json={"x": 1}, headers=AUTH)
    assert _error(resume) == (422, "invalid_request")
    deep = "[" * 50_000 + "]" * 50_000
    answer = api.post(
        "/v1/schedules", content=deep, headers={**AUTH, "content-type": "application/json"}
    )
    assert 400 <= answer.status_code < 500
    assert api.get("/v1/schedules", headers={"authorization": "Bearer wrong"}).status_code == 401
    info = api.get("/v1/schedules/weekday-summary", headers=AUTH).json()
    assert not info["paused"] and info["started_runs"] == 0  # nothing changed


def _cli(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(client.settings, *args, timeout=60)


def test_the_command_line_manages_schedules(api: TestClient, client: Client) -> None:
    made = _cli(
        client,
        "schedules",
        "create",
        "refund-check",
        "--agent",
        "five",
        "--every",
        "900",
        "--input",
        '{"scope": "open"}',
        "--overlap",
        "queue",
        "--by",
        "ops",
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("schedule refund-check created: every 15 min; next due ")
    listed = _cli(client, "schedules", "list")
    assert "refund-check" in listed.stdout and "every 15 min" in listed.stdout
    assert "paused" in _cli(client, "schedules", "pause", "refund-check", "--reason", "x").stdout
    triggered = _cli(client, "schedules", "trigger", "refund-check")
    assert triggered.returncode == 0
    assert client.get(uuid.UUID(triggered.stdout.strip())).input == {"scope": "open"}
    shown = json.loads(_cli(client, "schedules", "show", "refund-check").stdout)
    assert shown["paused"] is True and shown["started_runs"] == 1
    assert shown["input"] == {"scope": "open"} and shown["overlap"] == "queue"
    assert "resumed" in _cli(client, "schedules", "resume", "refund-check").stdout
    assert _cli(client, "schedules", "delete", "refund-check").returncode == 0

    # Each kind of refusal once (the API test tries the definitions one by one).
    for args, says, status in [
        (["show", "refund-check"], "no schedule is named 'refund-check'", 1),
        (["create", "x", "--agent", "five", "--cron", "61 * * * *"], "not valid", 2),
        (["create", "x", "--agent", "five", "--every", "60", "--input", "{"], "--input", 2),
        (["create", "x", "--agent", "nobody", "--every", "60"], "no worker has announced", 1),
    ]:
        failed = _cli(client, "schedules", *args)
        assert failed.returncode == status, (args, failed.stderr)
        assert says in failed.stderr, (args, failed.stderr)
        assert "Traceback" not in failed.stderr
        assert len(failed.stderr.strip().splitlines()) <= 3, failed.stderr
    assert api.get("/v1/schedules", headers=AUTH).json()["items"] == []
