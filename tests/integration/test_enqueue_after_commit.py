"""Enqueue after commit, one policy: with Redis out of reach, an action that
commits and then sends "run session X" still answers 2xx, logs ONE
``enqueue_failed`` line naming the session, and the scheduler's reconciler
sends the message, so the session runs all the same.

The web process is real and reaches Redis through a relay the test cuts
(tests/relay.py); the worker and the scheduler reach Redis directly, as
processes on the other side of the partition would.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from resumable.broker.choice import build_broker
from resumable.broker.messages import enqueue_after_commit
from resumable.client import Client
from resumable.dev.disposable_redis import DisposableRedis
from resumable.models.database import Database
from resumable.settings import Settings
from tests.conftest import API_TOKEN, LocalDeployment, ManagedProcess, wait_until
from tests.relay import Relay, redis_target, redis_url_via

AUTH = {"authorization": f"Bearer {API_TOKEN}", "x-resumable-actor": "ops@example.com"}


@pytest.fixture
def relay(settings: Settings) -> Iterator[Relay]:
    relay = Relay(redis_target(settings.redis_url or "")).open()
    yield relay
    relay.cut()


def _cut_off_web(deployment: LocalDeployment, settings: Settings, relay: Relay) -> ManagedProcess:
    """A web process whose Redis is behind `relay`, now cut; JSON logs."""
    web = deployment.web(
        REDIS_URL=redis_url_via(settings.redis_url or "", relay), RESUMABLE_LOG_FORMAT="json"
    )
    relay.cut()
    return web


def _enqueue_failures(process: ManagedProcess) -> list[dict[str, Any]]:
    lines = [line for line in process.output().splitlines() if line.startswith("{")]
    return [entry for entry in map(json.loads, lines) if entry.get("action") == "enqueue_failed"]


def _reconciled(scheduler: ManagedProcess) -> bool:
    return "reconciler re-enqueued" in scheduler.output()


def _failed_session(client: Client, flag: Path) -> tuple[uuid.UUID, int]:
    session_id = client.start("fragile", {"flag": str(flag)})
    wait_until(lambda: client.get(session_id).status == "failed", what="the dead letter")
    [letter] = client.dead_letters().items
    return session_id, letter.dead_letter_id


@pytest.mark.redis_broker
def test_a_dead_letter_retry_with_redis_cut_answers_200_and_the_reconciler_runs_it(
    client: Client,
    settings: Settings,
    tmp_path: Path,
    relay: Relay,
    deployment: LocalDeployment,
) -> None:
    deployment.worker()
    session_id, dead_letter_id = _failed_session(client, tmp_path / "flag")
    web = _cut_off_web(deployment, settings, relay)
    (tmp_path / "flag").touch()

    answer = httpx.post(
        f"{deployment.url}/v1/dead-letters/{dead_letter_id}/retry",
        json={"reason": "flag set"},
        headers=AUTH,
        timeout=30,
    )

    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "retried"
    assert client.dead_letter(dead_letter_id).status == "retried"
    assert client.get(session_id).status == "pending"  # committed; no message went out
    [line] = _enqueue_failures(web)
    assert line["session_id"] == str(session_id)
    assert "reconciler" in line["message"] and str(session_id) in line["message"]
    assert not [entry for entry in web.output().splitlines() if "Traceback" in entry]

    scheduler = deployment.scheduler()
    wait_until(lambda: client.get(session_id).status == "completed", what="the retried run")
    assert _reconciled(scheduler)
    assert client.get(session_id).result == {"fixed": True, "patched": None}


@pytest.mark.redis_broker
def test_fork_blocked_resume_and_signal_with_redis_cut_answer_2xx_and_run(
    client: Client,
    db: Database,
    settings: Settings,
    relay: Relay,
    deployment: LocalDeployment,
) -> None:
    blocked = client.start("five")
    with db.connection() as conn:  # parked before any worker saw it, as a divergence parks
        conn.execute(
            "UPDATE sessions SET status = 'blocked', blocked_reason = %s WHERE id = %s",
            [json.dumps({"kind": "missing_step", "message": "staged"}), blocked],
        )
    deployment.worker()
    origin = client.start("five")
    waiting = client.start("signalled", {})
    wait_until(lambda: client.get(origin).status == "completed", what="the origin")
    wait_until(lambda: client.get(waiting).status == "suspended", what="the signal wait")
    assert client.get(blocked).status == "blocked"
    web = _cut_off_web(deployment, settings, relay)
    scheduler = deployment.scheduler()

    def post(path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{deployment.url}{path}", json=body, headers=AUTH, timeout=30)

    forked = post(f"/v1/sessions/{origin}/fork", {"at": 2})
    assert forked.status_code == 201, forked.text
    fork_id = uuid.UUID(forked.json()["session_id"])
    resumed = post(f"/v1/sessions/{blocked}/resume", {"reason": "redeployed"})
    assert resumed.status_code == 200, resumed.text
    signalled = post(f"/v1/sessions/{waiting}/signals/approve", {"ok": True})
    assert signalled.status_code == 202, signalled.text

    failures = _enqueue_failures(web)
    assert sorted(line["session_id"] for line in failures) == sorted(
        str(s) for s in (fork_id, blocked, waiting)
    ), failures

    def all_completed() -> bool:
        return all(client.get(s).status == "completed" for s in (fork_id, blocked, waiting))

    wait_until(all_completed, what="the three sessions to run")
    assert _reconciled(scheduler)


@pytest.mark.redis_broker
def test_the_one_policy_logs_one_line_while_redis_is_down_and_sends_once_it_is_back(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch that cannot be sent is one line naming every session, not one
    per session or per chunk; the same call sends once Redis answers."""
    server = DisposableRedis(tmp_path / "redis").start()
    broker = build_broker(settings, server.url)
    ids = [uuid.uuid4() for _ in range(1200)]  # three chunks
    try:
        server.kill()
        with caplog.at_level(logging.WARNING, logger="resumable.broker.messages"):
            sent = enqueue_after_commit(broker, settings, ids, why="test batch")
        assert sent is False
        [record] = [r for r in caplog.records if getattr(r, "action", "") == "enqueue_failed"]
        assert record.sessions == 1200  # type: ignore[attr-defined]
        assert record.session_ids == [str(i) for i in ids[:500]]  # type: ignore[attr-defined]
        assert "1200 session(s)" in record.getMessage()
        assert record.exc_info is None  # an outage is no bug: no traceback

        # Not tried while Redis is known to be down: one timeout per outage,
        # not one per send (broker/send_gate.py).
        began = time.monotonic()
        assert enqueue_after_commit(broker, settings, ids, why="test batch") is False
        assert time.monotonic() - began < 0.5
        assert "not tried while it does not answer" in caplog.records[-1].getMessage()

        server.start()
        wait_until(
            lambda: enqueue_after_commit(broker, settings, ids, why="test batch"),
            timeout=15,
            what="the sends to go once a ping reaches Redis again",
        )
        assert server.answers()
    finally:
        broker.close()
        server.kill()
