"""Invariants 3, 4 and 6 under real failures: SIGKILL mid-step, a worker
paused past its lease, duplicate messages, Redis losing every key."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis

from resumable.client import Client
from resumable.models import agent_queries
from resumable.models.database import Database
from resumable.scheduler.reconcile import reconcile
from resumable.settings import Settings
from tests.conftest import LocalDeployment, wait_until
from tests.fake_api import FakeAPI


def _completed(client: Client, session_id: uuid.UUID) -> bool:
    return client.get(session_id).status == "completed"


def _assert_each_step_once(client: Client, session_id: uuid.UUID, steps: int) -> None:
    checkpoints = client.checkpoints(session_id)
    assert [c.seq for c in checkpoints] == list(range(1, steps + 1))
    assert [client.checkpoint_state(session_id, c.seq).state.get("n") for c in checkpoints] == list(
        range(1, steps + 1)
    )
    committed = Counter(e.seq for e in client.events(session_id) if e.type == "step_completed")
    assert committed == Counter(range(1, steps + 1))


def test_sigkill_mid_step_after_tool_call_recovers_without_repeating_it(
    client: Client, reconciler: None, tmp_path: Path, deployment: LocalDeployment
) -> None:
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        victim = deployment.worker()
        session_id = client.start(
            "counter",
            {"api": api.url, "steps": 5, "hold_at": 3, "gate_dir": str(tmp_path)},
        )
        # Step 3 has made its charge and is now blocked: kill the worker there.
        wait_until((tmp_path / "entered-count-3").exists, what="step 3 to start")
        assert api.total_calls() == 3
        victim.kill()
        (tmp_path / "hold").unlink()
        assert client.get(session_id).seq == 2

        deployment.worker()
        wait_until(lambda: _completed(client, session_id), timeout=30, what="recovery")

    assert client.get(session_id).result == {"n": 5}
    _assert_each_step_once(client, session_id, 5)
    # Five charges, each made exactly once: step 3's was replayed from the cache.
    assert api.effect_count() == 5
    assert api.total_calls() == 5
    events = [e.type for e in client.events(session_id)]
    assert "lease_recovered" in events


def test_paused_worker_is_fenced_out_after_its_lease_expires(
    client: Client, db: Database, reconciler: None, tmp_path: Path, deployment: LocalDeployment
) -> None:
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        paused = deployment.worker()
        session_id = client.start(
            "counter",
            {"api": api.url, "steps": 6, "hold_at": 2, "gate_dir": str(tmp_path)},
        )
        wait_until((tmp_path / "entered-count-2").exists, what="step 2 to start")
        paused.pause()
        (tmp_path / "hold").unlink()
        first_epoch = client.session_row(session_id).lease_epoch

        deployment.worker()
        wait_until(lambda: _completed(client, session_id), timeout=30, what="takeover")
        assert client.session_row(session_id).lease_epoch > first_epoch

        # Wake the stale worker: it finishes its step and tries to commit it.
        paused.resume()
        wait_until(lambda: "not committed" in paused.output(), timeout=15, what="rejection")

    final = client.get(session_id)
    assert final.status == "completed"
    assert final.result == {"n": 6}
    _assert_each_step_once(client, session_id, 6)
    assert api.effect_count() == 6
    assert api.total_calls() == 6
    with db.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM checkpoints WHERE session_id = %s", (session_id,)
        ).fetchone()
    assert row is not None and row["n"] == 6


def test_same_session_enqueued_five_times_runs_each_step_once(
    client: Client, settings: Settings, deployment: LocalDeployment
) -> None:
    from resumable.broker.messages import enqueue_session

    deployment.worker()
    deployment.worker()
    with FakeAPI() as api:
        session_id = client.start("counter", {"api": api.url, "steps": 8, "sleep": 0.02})
        for _ in range(4):
            enqueue_session(client.broker, settings, session_id)
        wait_until(lambda: _completed(client, session_id), what="completion")
    _assert_each_step_once(client, session_id, 8)
    assert api.total_calls() == 8


def test_many_sessions_on_two_workers(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    deployment.worker()
    deployment.worker()
    ids = [client.start("counter", {"steps": 10}) for _ in range(200)]

    def all_done() -> bool:
        return client.count_by_status() == {"completed": 200}

    wait_until(all_done, timeout=120, interval=0.2, what="200 sessions")
    with db.connection() as conn:
        gaps = conn.execute(
            """
            SELECT session_id, count(*) AS n, min(seq) AS lo, max(seq) AS hi,
                   count(DISTINCT seq) AS distinct_seq
            FROM checkpoints GROUP BY session_id
            HAVING count(*) <> 10 OR min(seq) <> 1 OR max(seq) <> 10
                OR count(DISTINCT seq) <> 10
            """
        ).fetchall()
        doubled = conn.execute(
            """
            SELECT session_id, seq, count(*) FROM audit_events
            WHERE event_type = 'step_completed' GROUP BY session_id, seq HAVING count(*) > 1
            """
        ).fetchall()
    assert gaps == []
    assert doubled == []
    assert {client.get(i).result["n"] for i in ids[:5]} == {10}


@pytest.mark.redis_broker
def test_redis_flushed_with_pending_sessions_reconcile_brings_all_back(
    client: Client,
    settings: Settings,
    db: Database,
    redis_client: redis.Redis,
    deployment: LocalDeployment,
) -> None:
    # Another live worker loads `counter`, so the one started here does not
    # enqueue its waiting sessions itself (a starting worker does that for
    # agents no live worker serves): only the reconciler brings these back.
    with db.connection() as conn:
        conn.execute(
            agent_queries.ANNOUNCE_WORKER,
            {"id": "elsewhere:1", "agents": '["counter"]', "ttl": 600},
        )
    ids = [client.start("counter", {"steps": 3}) for _ in range(50)]
    redis_client.flushdb()
    deployment.worker()
    assert client.count_by_status() == {"pending": 50}

    report = reconcile(settings, db, client.broker, grace_seconds=0)
    assert sorted(report.pending) == sorted(ids)

    wait_until(lambda: client.count_by_status() == {"completed": 50}, what="50 sessions")
    for session_id in ids[:3]:
        _assert_each_step_once(client, session_id, 3)


def test_long_step_keeps_its_lease(
    client: Client, reconciler: None, deployment: LocalDeployment
) -> None:
    """A step three times longer than the lease is not taken over."""
    deployment.worker()
    deployment.worker()
    session_id = client.start("counter", {"steps": 1, "sleep": 6})
    wait_until(lambda: _completed(client, session_id), timeout=40, what="completion")
    events = [e.type for e in client.events(session_id)]
    assert "lease_recovered" not in events
    assert events.count("run_started") == 1
    _assert_each_step_once(client, session_id, 1)


def test_long_session_yields_to_others(client: Client, deployment: LocalDeployment) -> None:
    deployment.worker(RESUMABLE_MAX_STEPS_PER_RUN="4")
    session_id = client.start("counter", {"steps": 10})
    wait_until(lambda: _completed(client, session_id), what="completion")
    events = [e.type for e in client.events(session_id)]
    assert events.count("run_yielded") == 2
    assert events.count("run_started") == 3
    _assert_each_step_once(client, session_id, 10)
