"""Invariant 3 at its edges: leases renewed in every status a live worker
holds, dropped by epoch, tool results fenced by the epoch, and a lease-loss
warning that means what it says. Real workers, real PostgreSQL and Redis."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from resumable._internal.database_urls import libpq_url
from resumable.client import Client
from resumable.models import session_queries
from resumable.models.database import Database
from resumable.queue.lease import LeaseKeeper
from resumable.settings import Settings
from tests.conftest import ManagedProcess, wait_until
from tests.fake_api import FakeAPI


def _row(db: Database, sql: str, *params: Any) -> dict[str, Any]:
    with db.connection() as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row


def _running_at_epoch_2(client: Client, db: Database, lease_seconds: float) -> uuid.UUID:
    """A session that looks held by a worker "test" at epoch 2."""
    session_id = client.start("five")
    with db.connection() as conn:
        conn.execute(
            "UPDATE sessions SET status = 'running', lease_epoch = 2, lease_owner = 'test', "
            "lease_expires_at = now() + make_interval(secs => %s) WHERE id = %s",
            (lease_seconds, session_id),
        )
    return session_id


def _status(client: Client, session_id: uuid.UUID) -> str:
    return client.get(session_id).status


def test_a_compensation_longer_than_the_lease_keeps_it_and_runs_once(
    client: Client,
    db: Database,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
    reconciler: None,
) -> None:
    """Point 1: a saga held in `compensating` is renewed like a running step, so
    neither the reconciler nor a second worker takes it over mid-compensation."""
    (tmp_path / "hold").touch()
    workers = [start_worker(), start_worker()]
    with FakeAPI() as api:
        session_id = client.start("saga", {"api": api.url, "gate_dir": str(tmp_path)})
        wait_until((tmp_path / "entered-undo-hotel").exists, what="the hotel compensation")
        first = _row(
            db,
            "SELECT status, lease_epoch, lease_expires_at FROM sessions WHERE id = %s",
            session_id,
        )
        assert first["status"] == "compensating"

        def renewed_by_its_holder() -> bool:
            now = _row(
                db, "SELECT lease_epoch, lease_expires_at FROM sessions WHERE id = %s", session_id
            )
            assert now["lease_epoch"] == first["lease_epoch"], "the saga was taken over"
            # The lease is 2 s: expiring 3 s after the first deadline means renewed, more than once.
            return bool(now["lease_expires_at"] >= first["lease_expires_at"] + timedelta(seconds=3))

        wait_until(renewed_by_its_holder, timeout=15, what="renewals of the compensating lease")
        (tmp_path / "hold").unlink()
        assert wait_until(lambda: _status(client, session_id) == "failed", timeout=30)
        undo_calls = {key: n for key, n in api.calls.items() if key.endswith(":compensate")}

    # Each compensation ran exactly once: no second worker repeated one.
    assert sorted(undo_calls.values()) == [1, 1, 1]
    events = [e.type for e in client.events(session_id)]
    assert "compensation_resumed" not in events
    assert "lease_recovered" not in events
    assert events.count("compensation_completed") == 3
    for worker in workers:
        assert "taken over" not in worker.output()


def test_dropping_a_lease_leaves_a_later_epoch_of_the_same_session_alone(
    client: Client, db: Database, settings: Settings
) -> None:
    """Point 2: a stuck thread's late drop (epoch 1) must not un-register the
    lease another thread of the same process took over (epoch 2)."""
    session_id = _running_at_epoch_2(client, db, lease_seconds=1)
    keeper = LeaseKeeper(db, lease_seconds=60)
    keeper.hold(session_id, 1)
    keeper.hold(session_id, 2)  # taken over in this process
    keeper.drop(session_id, 1)  # the stuck thread finally lets go of its epoch
    assert keeper.holds(session_id, 2)
    keeper.renew_all()
    row = _row(
        db, "SELECT lease_expires_at - now() AS left FROM sessions WHERE id = %s", session_id
    )
    assert row["left"] > timedelta(seconds=50)  # renewed for epoch 2
    keeper.drop(session_id, 2)
    assert not keeper.holds(session_id, 2)


def test_a_renewal_that_waited_on_a_cancel_says_the_session_was_cancelled(
    client: Client, db: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal queued behind a cancel's row lock read the row from before the
    cancel (its statement's snapshot): it must still report the cancel, not a
    takeover "now running at epoch 2" by the very worker it was renewing for."""
    session_id = _running_at_epoch_2(client, db, lease_seconds=60)
    keeper = LeaseKeeper(db, lease_seconds=60)
    keeper.hold(session_id, 2)
    caplog.set_level(logging.WARNING, logger="resumable.queue.lease")
    with psycopg.connect(libpq_url(settings.database_url or "")) as canceller:
        row = canceller.execute(
            session_queries.CANCEL_SESSION, {"id": session_id, "actor": "test", "reason": None}
        ).fetchone()
        assert row is not None
        renewal = threading.Thread(target=keeper.renew_all)
        renewal.start()
        wait_until(
            lambda: any("lease_expires_at = now() +" in q for q in _lock_waits(settings)),
            what="the renewal to queue behind the cancel",
        )
        canceller.commit()
    renewal.join(timeout=10)
    assert not renewal.is_alive()
    messages = [record.getMessage() for record in caplog.records]
    assert any("was cancelled while this worker ran it (epoch 2)" in m for m in messages), messages
    assert not any("taken over" in m for m in messages), messages
    assert not keeper.holds(session_id, 2)


def test_a_zombie_resumed_inside_a_tool_call_cannot_overwrite_the_recorded_result(
    client: Client,
    db: Database,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
    reconciler: None,
) -> None:
    """Point 6: a worker SIGSTOPped inside a tool call, resumed after another
    worker re-ran the call and finished the session, is fenced out."""
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        zombie = start_worker()
        session_id = client.start("ledger", {"api": api.url, "gate_dir": str(tmp_path)})
        # The zombie has made the payment and is still inside the tool call.
        wait_until((tmp_path / "entered-tool").exists, what="the tool call")
        zombie.pause()
        (tmp_path / "hold").unlink()

        start_worker()
        wait_until(lambda: _status(client, session_id) == "completed", timeout=30, what="takeover")
        zombie.resume()
        wait_until(
            lambda: "lease lost" in zombie.output() or "not committed" in zombie.output(),
            timeout=15,
            what="the zombie to reach its next write",
        )

    result = client.get(session_id).result
    recorded = _row(
        db,
        "SELECT status, response, lease_epoch FROM tool_execution_cache WHERE session_id = %s",
        session_id,
    )
    # The cache holds what the session committed (the second worker's call, which
    # the API answered as a replay of the same key), not the zombie's late answer.
    assert recorded["status"] == "completed"
    assert recorded["response"] == result["paid"]
    assert recorded["response"]["replayed"] is True
    assert api.effect_count() == 1
    assert "lease lost during tool call 'pay'" in zombie.output()


def test_no_takeover_warning_when_a_renewal_races_the_final_commit(
    client: Client,
    settings: Settings,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """Point 8: the final commit releases the lease while a renewal is on its
    way; that is the worker's own release, not a takeover."""
    worker = start_worker(RESUMABLE_LEASE_SECONDS="0.6")
    (tmp_path / "hold").touch()
    session_id = client.start("counter", {"steps": 1, "hold_at": 1, "gate_dir": str(tmp_path)})
    wait_until((tmp_path / "entered-count-1").exists, what="the step")

    def waiting(fragment: str) -> bool:
        return any(fragment in q for q in _lock_waits(settings))

    # Hold the session's row so the final commit queues behind us, and any
    # renewal after it; then let both go in that order.
    with psycopg.connect(libpq_url(settings.database_url or "")) as blocker:
        blocker.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
        (tmp_path / "hold").unlink()
        wait_until(lambda: waiting("INSERT INTO checkpoints"), what="the final commit to queue")
        started = time.monotonic()
        # A renewal (every 0.2 s) queues behind it unless the lease was dropped first.
        while time.monotonic() - started < 1.0 and not waiting("lease_expires_at = now() +"):
            time.sleep(0.02)
        blocker.rollback()

    wait_until(lambda: _status(client, session_id) == "completed", what="completion")
    wait_until(lambda: not _lock_waits(settings), what="the queued statements to finish")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert "taken over" not in worker.output()
        time.sleep(0.05)


def _lock_waits(settings: Settings) -> list[str]:
    with psycopg.connect(libpq_url(settings.database_url or ""), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        ).fetchall()
    return [str(row[0]) for row in rows]
