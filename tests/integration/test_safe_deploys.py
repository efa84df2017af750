"""Deploying new code while sessions wait (DESIGN.md invariant 8), on real
workers: a session whose replay diverges from its record is parked as
`blocked` for an operator, never failed into its saga and never called again.

The `trip` agent ships in two versions loaded by different workers:
tests/deploy_agents_v1.py (book a hotel for 2 nights, wait for `go`, pay) and
tests/deploy_agents_v2.py (3 nights, no `pay` step).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.models.database import Database
from resumable.scheduler.reconcile import reconcile
from resumable.services.inbox import Inbox
from resumable.settings import Settings
from resumable.webhooks.app import create_app
from tests.conftest import API_TOKEN, LocalDeployment, ManagedProcess, run_cli, wait_until
from tests.fake_api import FakeAPI

V1, V2, V3 = "tests.deploy_agents_v1", "tests.deploy_agents_v2", "tests.deploy_agents_v3"
AUTH = {"authorization": f"Bearer {API_TOKEN}", "x-resumable-actor": "ops:cy"}
# Alerts stay in the outbox (no scheduler runs here), where the test reads them.
ALERTS = {"RESUMABLE_ALERT_WEBHOOK_URL": "http://127.0.0.1:9/alerts"}


@pytest.fixture
def http(settings: Settings, db: Database, client: Client) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"api_tokens": [API_TOKEN]})
    app = create_app(configured, settings.database_url or "", settings.redis_url or "")
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _status(db: Database, session_id: uuid.UUID) -> str:
    with db.connection() as conn:
        row = conn.execute("SELECT status FROM sessions WHERE id = %s", (session_id,)).fetchone()
    assert row is not None
    return str(row["status"])


def _session(db: Database, session_id: uuid.UUID) -> dict[str, Any]:
    with db.connection() as conn:
        row = conn.execute("SELECT * FROM sessions WHERE id = %s", (session_id,)).fetchone()
    assert row is not None
    return dict(row)


def _events(db: Database, session_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT * FROM audit_events WHERE session_id = %s AND event_type = %s ORDER BY id",
            (session_id, kind),
        ).fetchall()
    return [dict(row) for row in rows]


def _count(db: Database, sql: str, *params: Any) -> int:
    with db.connection() as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    value = next(iter(row.values()))
    assert isinstance(value, int)
    return value


def _wait_status(db: Database, session_id: uuid.UUID, status: str) -> None:
    wait_until(lambda: _status(db, session_id) == status, what=f"{session_id} {status}")


def _cli(client: Client, *args: str) -> str:
    done = run_cli(client.settings, "sessions", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _signal(client: Client, db: Database, session_id: uuid.UUID) -> None:
    Inbox(client.settings, db, client.broker).signal(session_id, "go", None, None, "test")


def test_a_removed_step_blocks_sessions_without_their_saga_until_redeployed(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    v1 = deployment.worker(V1, **ALERTS)
    assert "which this worker does not have" not in v1.output()
    with FakeAPI() as api:
        ids = [client.start("trip", {"api": api.url}) for _ in range(3)]
        for sid in ids:
            _wait_status(db, sid, "suspended")
        v1.stop()

        # Deploy v2, which has no `pay` step: it says so when it starts.
        v2 = deployment.worker(V2, **ALERTS)
        wait_until(
            lambda: (
                "3 sessions of trip wait at step 'pay', which this worker does not have"
                in v2.output()
            ),
            what="the start-up warning",
        )
        for sid in ids:
            _signal(client, db, sid)
        for sid in ids:
            _wait_status(db, sid, "blocked")
        assert api.effect_count() == 3  # one hotel each, and no undo
        assert all(path == "/book" for path, _ in api.order)
        reason = _session(db, ids[0])["blocked_reason"]
        assert reason["kind"] == "missing_step" and reason["recorded"] == {"step": "pay"}
        [blocked] = _events(db, ids[0], "session_blocked")
        assert blocked["payload"]["from"] == "running"
        assert _count(db, "SELECT count(*) FROM dead_letters") == 0
        with db.connection() as conn:
            alerts = conn.execute(
                "SELECT session_id, payload FROM alerts WHERE kind = 'session_blocked'"
            ).fetchall()
        assert sorted(str(a["session_id"]) for a in alerts) == sorted(map(str, ids))
        reasons = [cast(dict[str, Any], a["payload"])["reason"] for a in alerts]
        assert {reason["kind"] for reason in reasons} == {"missing_step"}
        listed = _cli(client, "list", "--status", "blocked")
        assert all(str(sid)[:8] in listed for sid in ids)

        # Resuming on code that still lacks the step blocks it again.
        _cli(client, "resume", str(ids[0]), "--reason", "try again", "--by", "ops:ann")
        wait_until(lambda: len(_events(db, ids[0], "session_blocked")) == 2, what="re-blocked")
        wait_until(lambda: _status(db, ids[0]) == "blocked", what="blocked again")

        # Failing one runs its saga, once: now and only now.
        _cli(client, "fail", str(ids[2]), "--reason", "customer gave up", "--by", "ops:ann")
        wait_until(lambda: _status(db, ids[2]) == "failed", what="failed")
        undone = [body for path, body in api.order if path == "/undo"]
        assert undone == [{"what": "hotel"}]
        [failed] = _events(db, ids[2], "blocked_failed")
        assert failed["payload"]["by"] == "ops:ann"

        # Redeploy the step (v1 again) and resume: they complete.
        v2.stop()
        v1 = deployment.worker(V1)
        assert "which this worker does not have" not in v1.output()
        for sid in ids[:2]:
            _cli(client, "resume", str(sid), "--reason", "pay is back", "--by", "ops:bob")
        for sid in ids[:2]:
            _wait_status(db, sid, "completed")
        assert api.effect_count() == 4  # three hotels and one undo: nothing repeated
        assert max(api.calls.values()) == 1
        [resumed, *_] = _events(db, ids[1], "blocked_resumed")
        assert resumed["payload"]["by"] == "ops:bob"
        assert resumed["payload"]["blocked"]["kind"] == "missing_step"


def test_changed_arguments_mid_retry_block_and_accept_makes_one_new_call(
    client: Client, db: Database, deployment: LocalDeployment, http: TestClient
) -> None:
    v1 = deployment.worker(V1)
    with FakeAPI() as api:
        sid = client.start("trip", {"api": api.url, "payments_down": True})
        wait_until(lambda: len(_events(db, sid, "retry_scheduled")) >= 2, what="retrying")
        v1.stop()
        assert api.effect_count() == 1
        [(_, first)] = api.order
        assert first["nights"] == 2

        deployment.worker(V2)  # books 3 nights at the same position
        wait_until(lambda: _status(db, sid) == "blocked", what="blocked")
        reason = _session(db, sid)["blocked_reason"]
        assert reason["kind"] == "tool_call_diverged"
        assert reason["recorded"]["request"]["args"][1]["nights"] == 2
        assert reason["requested"]["request"]["args"][1]["nights"] == 3
        assert reason["recorded"]["args_hash"] != reason["requested"]["args_hash"]
        assert api.total_calls() == 1  # nothing called again
        assert _count(db, "SELECT count(*) FROM checkpoints WHERE session_id = %s", sid) == 0

        shown = http.get(f"/v1/sessions/{sid}", headers=AUTH).json()
        assert (shown["status"], shown["blocked_reason"]) == ("blocked", reason)
        metrics = http.get("/metrics", headers=AUTH).text
        assert 'resumable_sessions{agent="trip",status="blocked"} 1.0' in metrics
        # The accept makes the hotel call again: it names the recorded call it
        # supersedes (tests/integration/test_accept_confirmation.py refuses it without).
        preview = http.get(f"/v1/sessions/{sid}/accept", headers=AUTH).json()
        answer = http.post(
            f"/v1/sessions/{sid}/accept",
            json={"reason": "3 nights is right", "confirm": preview["confirm"]},
            headers=AUTH,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "pending"
        assert answer.json()["blocked"]["kind"] == "tool_call_diverged"
        wait_until(lambda: _status(db, sid) == "completed", what="completed")
        assert [body["nights"] for _, body in api.order] == [2, 3]  # one new call
        assert set(api.calls.values()) == {1}
        [accepted] = _events(db, sid, "divergence_accepted")
        assert "ops:cy" in accepted["payload"]["by"]
        assert accepted["payload"]["blocked"]["recorded"]["request"]["args"][1]["nights"] == 2
        [superseded] = accepted["payload"]["superseded"]
        assert (superseded["tool"], superseded["call_index"]) == ("hotel", 0)
        assert (
            _count(
                db,
                "SELECT count(*) FROM tool_execution_cache WHERE session_id = %s"
                " AND superseded_by LIKE '%%ops:cy%%'",
                sid,
            )
            == 1
        )
        # The trail keeps both calls at that position: the recorded one,
        # superseded, and the one made after the acceptance.
        with db.connection() as conn:
            calls = conn.execute(
                "SELECT call_index, request, status, superseded_by FROM tool_execution_cache"
                " WHERE session_id = %s ORDER BY created_at",
                (sid,),
            ).fetchall()
        trail = [
            (
                c["call_index"],
                cast(dict[str, Any], c["request"])["args"][1]["nights"],
                c["status"],
                c["superseded_by"],
            )
            for c in calls
        ]
        assert [(i, n, status, bool(by)) for i, n, status, by in trail] == [
            (0, 2, "completed", True),
            (0, 3, "completed", False),
        ]


def test_changed_arguments_after_a_crash_mid_step_block_without_a_second_call(
    client: Client, db: Database, deployment: LocalDeployment, tmp_path: Path
) -> None:
    (tmp_path / "hold").touch()
    v1 = deployment.worker(V1)
    with FakeAPI() as api:
        sid = client.start("trip", {"api": api.url, "gate_dir": str(tmp_path)})
        wait_until((tmp_path / "entered-book-1").exists, what="the hotel booked, step held")
        deployment.kill(v1)  # SIGKILL mid-step: the step's outcome was never committed
        deployment.worker(V2)
        _wait_status(db, sid, "blocked")
        assert api.total_calls() == 1
        assert _session(db, sid)["blocked_reason"]["kind"] == "tool_call_diverged"
        assert _count(db, "SELECT count(*) FROM dead_letters") == 0


def test_a_saga_needing_a_removed_compensation_is_parked_until_it_is_back(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    v1 = deployment.worker(V1)
    with FakeAPI() as api:
        sid = client.start("trip", {"api": api.url, "car": True})
        _wait_status(db, sid, "suspended")
        v1.stop()
        v3 = deployment.worker(V3)  # neither `pay` nor `undo`, but `return_car`
        _signal(client, db, sid)
        _wait_status(db, sid, "blocked")
        _cli(client, "fail", str(sid), "--reason", "customer gave up", "--by", "ops:dee")
        wait_until(lambda: len(_events(db, sid, "session_blocked")) == 2, what="blocked mid-saga")
        _wait_status(db, sid, "blocked")
        reason = _session(db, sid)["blocked_reason"]
        assert (reason["kind"], reason["from"]) == ("missing_compensation", "compensating")
        # Nothing undone (not even the car, whose undo is there), nothing given up.
        assert [path for path, _ in api.order] == ["/book", "/rent"]
        assert _count(db, "SELECT count(*) FROM dead_letters") == 0

        v3.stop()
        deployment.worker(V1)  # `undo` is back
        _cli(client, "resume", str(sid), "--reason", "undo is back", "--by", "ops:dee")
        _wait_status(db, sid, "failed")
        assert [path for path, _ in api.order] == ["/book", "/rent", "/return", "/undo"]
        with db.connection() as conn:
            letter = conn.execute(
                "SELECT error_code, compensation FROM dead_letters WHERE session_id = %s", (sid,)
            ).fetchone()
        assert letter == {"error_code": "replay_diverged", "compensation": "completed"}


def test_a_removed_poll_check_is_named_at_start_and_blocks_when_due(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    v1 = deployment.worker(V1)
    deployment.scheduler()
    with FakeAPI() as api:
        sid = client.start("trip", {"api": api.url, "watch": True})
        wait_until(lambda: (_session(db, sid)["wait"] or {}).get("polls"), what="a poll check ran")
        v1.stop()
        v3 = deployment.worker(V3)
        wait_until(
            lambda: (
                "1 session of trip waits at check 'hotel_confirmed', which this worker "
                "does not have" in v3.output()
            ),
            what="the start-up warning",
        )
        _wait_status(db, sid, "blocked")
        reason = _session(db, sid)["blocked_reason"]
        assert (reason["kind"], reason["recorded"]) == (
            "missing_check",
            {"check": "hotel_confirmed"},
        )
        assert api.total_calls() == 1
        assert _count(db, "SELECT count(*) FROM dead_letters") == 0
        # The reconciler leaves it alone, however long it sits.
        report = reconcile(client.settings, db, client.broker, grace_seconds=0)
        assert sid not in report.pending + report.expired + report.orphaned
        assert _status(db, sid) == "blocked"


def test_failing_a_blocked_session_with_nothing_to_undo_leaves_it_retryable(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    v1 = deployment.worker(V1)
    with FakeAPI() as api:
        sid = client.start("trip", {"api": api.url, "no_hotel": True})
        _wait_status(db, sid, "suspended")
        v1.stop()
        deployment.worker(V2)
        _signal(client, db, sid)
        _wait_status(db, sid, "blocked")
        _cli(client, "fail", str(sid), "--reason", "not worth it", "--by", "ops:eve")
        _wait_status(db, sid, "failed")
    with db.connection() as conn:
        letter = conn.execute(
            "SELECT compensation FROM dead_letters WHERE session_id = %s", (sid,)
        ).fetchone()
    assert letter == {"compensation": "none"}  # so `dlq retry` may take it back


def test_operator_actions_refuse_a_session_that_is_not_blocked(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess], http: TestClient
) -> None:
    start_worker(V1)
    with FakeAPI() as api:
        sid = client.start("trip", {"api": api.url})
        wait_until(lambda: _status(db, sid) == "suspended", what="suspended")
    for action in ("resume", "accept", "fail"):
        done = run_cli(client.settings, "sessions", action, str(sid), "--reason", "x")
        assert done.returncode != 0
        assert "not blocked" in done.stderr and "Traceback" not in done.stderr
    for action in ("resume", "accept", "fail"):
        answer = http.post(f"/v1/sessions/{sid}/{action}", json={"reason": "x"}, headers=AUTH)
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "invalid_session_state"
        missing = http.post(f"/v1/sessions/{sid}/{action}", json={}, headers=AUTH)
        assert missing.status_code == 422, missing.text
        unknown = http.post(
            f"/v1/sessions/{uuid.uuid4()}/{action}", json={"reason": "x"}, headers=AUTH
        )
        assert unknown.status_code == 404, unknown.text
    assert _status(db, sid) == "suspended"
    assert _count(db, "SELECT count(*) FROM audit_events WHERE event_type LIKE 'blocked%%'") == 0
