"""Priorities (resumable/priorities.py) on real workers and a real Redis: a
high session goes before a normal backlog and a low one after it, a low
session that waited long enough goes before later high ones (no
starvation), each priority has its own lane and a retry, a child and an
operator's change keep to it; from Python, HTTP and the CLI."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.errors import InvalidArgumentError, SessionStateError
from resumable.models.database import Database
from resumable.settings import Settings
from resumable.webhooks.app import create_app
from tests.conftest import API_TOKEN, LocalDeployment, run_cli, wait_until

AGENTS = "tests.priority_agents"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def _run_order(db: Database) -> list[uuid.UUID]:
    """Sessions in the order a worker claimed them (first claims only)."""
    with db.connection() as conn:
        found = conn.execute(
            "SELECT session_id FROM audit_events WHERE event_type = 'run_started' ORDER BY id"
        ).fetchall()
    return [uuid.UUID(str(row["session_id"])) for row in found]


def _all_completed(client: Client, ids: list[uuid.UUID]) -> bool:
    return all(client.get(session_id).status == "completed" for session_id in ids)


def _running(client: Client, session_id: uuid.UUID) -> bool:
    return client.get(session_id).status == "running"


def _queued(redis_client: redis.Redis, settings: Settings) -> dict[str, int]:
    """Messages waiting on each lane of the session queue."""
    base = f"resumable:{settings.queue_name}"
    lanes = {"normal": base, "high": f"{base}.high", "low": f"{base}.low"}
    return {level: int(redis_client.llen(key)) for level, key in lanes.items()}


def test_a_high_session_goes_before_a_normal_backlog_and_a_low_one_after_it(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="1")
    blocker = client.start("ordered", {"seconds": 1.5})
    wait_until(lambda: _running(client, blocker), 30, what="the blocker to run")
    backlog = [client.start("ordered", {"seconds": 0.02}) for _ in range(6)]
    low = client.start("ordered", {"seconds": 0.02}, priority="low")
    high = client.start("ordered", {"seconds": 0.02}, priority="high")
    everyone = [blocker, *backlog, low, high]
    wait_until(lambda: _all_completed(client, everyone), 60, what="every session to complete")
    assert _run_order(db) == [blocker, high, *backlog, low]
    assert client.get(high).result == {"lane": "resumable.high"}
    assert client.get(low).result == {"lane": "resumable.low"}
    assert client.get(backlog[0]).result == {"lane": "resumable"}


def test_a_low_session_that_waited_twice_the_head_start_goes_before_later_high_ones(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    """No starvation: with a head start of 0.5 s, a low session sent 1.3 s
    before three high ones is taken first (it counts as sent 0.5 s later, they
    0.5 s earlier); a low one sent with them goes after them."""
    deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="1", RESUMABLE_PRIORITY_AGING_SECONDS="0.5")
    blocker = client.start("ordered", {"seconds": 3.0})
    wait_until(lambda: _running(client, blocker), 30, what="the blocker to run")
    waited = client.start("ordered", {}, priority="low")
    time.sleep(1.3)  # the gap the test is about (not a wait for something)
    highs = [client.start("ordered", {}, priority="high") for _ in range(3)]
    fresh = client.start("ordered", {}, priority="low")
    everyone = [blocker, waited, *highs, fresh]
    wait_until(lambda: _all_completed(client, everyone), 60, what="every session to complete")
    assert _run_order(db) == [blocker, waited, *highs, fresh]


def test_a_retry_and_a_child_keep_the_lane_of_their_session(
    client: Client, deployment: LocalDeployment, tmp_path: Path
) -> None:
    deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="2")
    retried = client.start("retried", {"marker": str(tmp_path / "first")}, priority="high")
    parent = client.start("parent", {}, priority="low")
    wait_until(lambda: _all_completed(client, [retried, parent]), 60, what="both to complete")
    # The retry's delayed message waited on the base queue's delay queue and
    # came back to the high lane.
    assert client.get(retried).result == {"first": "resumable.high", "lane": "resumable.high"}
    assert client.get(parent).result == {"lane": "resumable.low"}  # woken by its child
    [child] = client.page_sessions(parent=parent).items
    assert child.priority == "low"
    assert client.get(child.session_id).result == {"lane": "resumable.low"}


@pytest.mark.redis_broker
def test_an_operator_moves_a_waiting_session_to_another_lane(
    client: Client, redis_client: redis.Redis, settings: Settings, db: Database
) -> None:
    session_id = client.start("ordered", {}, priority="low")
    assert client.get(session_id).priority == "low"
    assert _queued(redis_client, settings) == {"normal": 0, "high": 0, "low": 1}

    moved = client.set_priority(session_id, "high", actor="ops", reason="customer waiting")
    assert moved.priority == "high"
    # Sent again on its new lane; the old message is a harmless duplicate
    # (a claim of a session already run finds nothing to do).
    assert _queued(redis_client, settings) == {"normal": 0, "high": 1, "low": 1}
    [event] = [e for e in client.events(session_id) if e.type == "priority_changed"]
    assert event.payload == {"from": "low", "to": "high", "by": "ops", "reason": "customer waiting"}

    client.set_priority(session_id, "high", actor="ops")  # already: nothing written
    assert [e.type for e in client.events(session_id)].count("priority_changed") == 1
    assert _queued(redis_client, settings)["high"] == 1

    with pytest.raises(InvalidArgumentError, match="high, normal, low"):
        client.set_priority(session_id, "urgent", actor="ops")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="high, normal, low"):
        client.start("ordered", {}, priority="HIGH")  # type: ignore[arg-type]

    client.cancel(session_id, actor="ops")
    with pytest.raises(SessionStateError, match="already cancelled"):
        client.set_priority(session_id, "low", actor="ops")


def test_priorities_over_http(
    settings: Settings, db: Database, client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)  # announces the agents
    configured = settings.model_copy(update={"api_tokens": [API_TOKEN]})
    app = create_app(configured, settings.database_url or "", settings.redis_url or "")
    with TestClient(app, raise_server_exceptions=False) as api:
        made = api.post("/v1/sessions", json={"agent": "ordered", "priority": "high"}, headers=AUTH)
        assert made.status_code == 201 and made.json()["priority"] == "high"
        bad = api.post(
            "/v1/sessions", json={"agent": "ordered", "priority": "urgent"}, headers=AUTH
        )
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
        assert "priority" in bad.json()["error"]["message"]

        waiting = client.start("ordered", {"seconds": 5})  # runs while we change it
        changed = api.post(
            f"/v1/sessions/{waiting}/priority",
            json={"priority": "low", "reason": "batch"},
            headers={**AUTH, "X-Resumable-Actor": "alice"},
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["priority"] == "low"
        [event] = [e for e in client.events(waiting) if e.type == "priority_changed"]
        assert event.payload["by"].startswith("alice (token ")
        assert event.payload["reason"] == "batch"

        for body in ({}, {"priority": 3}, {"priority": "low", "extra": 1}):
            refused = api.post(f"/v1/sessions/{waiting}/priority", json=body, headers=AUTH)
            assert refused.status_code == 422, body
        missing = api.post(
            f"/v1/sessions/{uuid.uuid4()}/priority", json={"priority": "low"}, headers=AUTH
        )
        assert missing.status_code == 404
        session_id = made.json()["session_id"]
        wait_until(lambda: client.get(session_id).status == "completed", 30)
        finished = api.post(
            f"/v1/sessions/{session_id}/priority", json={"priority": "low"}, headers=AUTH
        )
        assert finished.status_code == 409
        assert finished.json()["error"]["code"] == "invalid_session_state"


def test_priorities_from_the_cli(
    settings: Settings, client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="1")
    blocker = client.start("ordered", {"seconds": 3})
    wait_until(lambda: _running(client, blocker), 30, what="the blocker to run")
    started = run_cli(settings, "enqueue", "ordered", "--priority", "low")
    assert started.returncode == 0, started.stderr
    session_id = uuid.UUID(started.stdout.strip())
    assert client.get(session_id).priority == "low"

    changed = run_cli(settings, "sessions", "priority", str(session_id), "high", "--by", "bob")
    assert changed.returncode == 0, changed.stderr
    assert f"session {session_id} has priority high" in changed.stdout
    assert client.get(session_id).priority == "high"

    refused = run_cli(settings, "sessions", "priority", str(session_id), "urgent")
    assert refused.returncode == 2
    assert "'urgent' is not one of 'high', 'normal', 'low'" in refused.stderr
    assert "Traceback" not in refused.stderr
    wait_until(lambda: _all_completed(client, [blocker, session_id]), 60)
    assert client.get(session_id).result == {"lane": "resumable.high"}
    done = run_cli(settings, "sessions", "priority", str(session_id), "low")
    assert done.returncode != 0 and "already completed" in done.stderr
    assert "Traceback" not in done.stderr
