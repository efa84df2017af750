"""Recovery as fast as the facts allow: a worker heartbeat in PostgreSQL shows
a dead owner before its leases expire, a marker key shows that Redis lost its
keys, and a session whose agent no live worker loads waits without churn."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg_pool
import pytest
import redis

from resumable.broker.redis import MARKER_KEY
from resumable.client import Client
from resumable.models.database import Database
from resumable.scheduler.reconcile import reconcile
from resumable.settings import Settings
from resumable.webhooks.metrics import DatabaseCollector
from tests.conftest import ManagedProcess, free_port, run_cli, wait_until

# The documented defaults (conftest shortens them for other tests).
DEFAULTS = {
    "RESUMABLE_LEASE_SECONDS": "30",
    "RESUMABLE_HEARTBEAT_TIMEOUT_MS": "10000",
    "RESUMABLE_MAINTENANCE_CHANCE": "100000",
    "RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "1",
    "RESUMABLE_RECONCILE_GRACE_SECONDS": "30",
}


def _events(client: Client, session_id: uuid.UUID) -> list[str]:
    return [e.type for e in client.events(session_id)]


def test_a_killed_workers_session_runs_again_within_five_seconds_by_default(
    client: Client,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
) -> None:
    start_scheduler(**DEFAULTS)
    victim = start_worker(**DEFAULTS)
    (tmp_path / "hold").touch()
    session_id = client.start("counter", {"steps": 3, "hold_at": 2, "gate_dir": str(tmp_path)})
    wait_until((tmp_path / "entered-count-2").exists, what="step 2 on the victim")
    survivor = start_worker(**DEFAULTS)
    (tmp_path / "hold").unlink()

    victim.kill()
    killed = time.monotonic()
    wait_until(
        lambda: client.get(session_id).seq >= 2,
        timeout=60,
        interval=0.05,
        what="step 2 to run again on the survivor",
    )
    recovered_after = time.monotonic() - killed
    print(f"killed worker's session ran again after {recovered_after:.2f} s")
    wait_until(lambda: client.get(session_id).status == "completed", what="completion")

    assert recovered_after < 5.0, recovered_after  # the lease alone would take 30 s
    owner = client.session_row(session_id).lease_owner
    assert owner is None  # released at completion
    assert "lease_recovered" in _events(client, session_id)
    committed = Counter(e.seq for e in client.events(session_id) if e.type == "step_completed")
    assert committed == Counter([1, 2, 3])
    assert f":{survivor.pid}:" in str(
        next(e.payload["worker"] for e in client.events(session_id) if e.type == "lease_recovered")
    )


@pytest.mark.redis_broker
def test_pending_sessions_move_within_seconds_after_redis_loses_its_keys(
    client: Client,
    redis_client: redis.Redis,
    start_worker: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
) -> None:
    start_worker(RESUMABLE_WORKER_THREADS="2")
    start_scheduler(**DEFAULTS)
    wait_until(lambda: redis_client.exists(MARKER_KEY), what="the reconciler's marker")
    ids = [client.start("counter", {"steps": 2, "sleep": 0.05}) for _ in range(40)]
    redis_client.flushdb()  # the queued messages go, and the marker with them
    flushed = time.monotonic()
    wait_until(
        lambda: client.count_by_status() == {"completed": 40},
        timeout=60,
        interval=0.1,
        what="all 40 sessions",
    )
    elapsed = time.monotonic() - flushed
    print(f"40 sessions completed {elapsed:.2f} s after FLUSHALL")
    assert elapsed < 10.0, elapsed  # the 30 s grace would have held the lost ones back
    assert all(client.get(s).seq == 2 for s in ids[:5])


@pytest.mark.redis_broker
def test_reconcile_waits_out_the_grace_unless_redis_lost_its_keys(
    client: Client, settings: Settings, db: Database, redis_client: redis.Redis
) -> None:
    fresh = settings.model_copy(update={"reconcile_grace_seconds": 3600.0})
    ids = [
        client.start("unknown-to-all") for _ in range(3)
    ]  # never announced: any worker may run it
    first = reconcile(fresh, db, client.broker)
    assert first.broker_reset and sorted(first.pending) == sorted(ids)
    again = reconcile(fresh, db, client.broker)
    assert not again.broker_reset and again.pending == []  # within the grace period
    redis_client.flushdb()
    after = reconcile(fresh, db, client.broker)
    assert after.broker_reset and sorted(after.pending) == sorted(ids)


@pytest.mark.redis_broker
def test_a_lost_broker_seen_while_the_database_is_down_is_not_forgotten(
    client: Client, settings: Settings, db: Database, redis_client: redis.Redis
) -> None:
    """The marker says Redis lost its keys; if the pass that noticed cannot reach
    the database, the next pass must still skip the grace period."""
    fresh = settings.model_copy(update={"reconcile_grace_seconds": 3600.0})
    ids = [client.start("unknown-to-all") for _ in range(2)]
    reconcile(fresh, db, client.broker)  # sets the marker
    redis_client.flushdb()
    unreachable = Database(f"postgresql://postgres@127.0.0.1:{free_port()}/x", pool_timeout=1)
    try:
        with pytest.raises(psycopg_pool.PoolTimeout):
            reconcile(fresh, unreachable, client.broker)
    finally:
        unreachable.close()
    after = reconcile(fresh, db, client.broker)
    assert after.broker_reset and sorted(after.pending) == sorted(ids)


def test_an_agent_no_live_worker_loads_waits_without_churn_until_one_starts(
    client: Client,
    db: Database,
    redis_client: redis.Redis,
    start_process: Callable[..., ManagedProcess],
    start_worker: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
) -> None:
    def lonely_worker() -> ManagedProcess:
        return start_process(["worker", "--agents", "tests.other_agents"], "worker started")

    # A worker that loads `lonely` announces it, then goes away.
    first = lonely_worker()
    assert first.stop() == 0
    other = start_worker()  # loads every agent but `lonely`
    start_scheduler()  # reconciles every 0.25 s with a 2 s grace
    created = time.monotonic()
    lonely = client.start("lonely")
    updated_at = client.get(lonely).updated_at
    wait_until(lambda: "no live worker loads agent 'lonely'" in other.output(), what="the skip")

    # It waits: visible as such, never claimed, never touched, while the
    # reconciler runs every 0.25 s and another session runs beside it.
    served = client.start("five")
    wait_until(lambda: client.get(served).status == "completed", what="a served session")
    assert [s.session_id for s in client.list_sessions(unserved=True)] == [lonely]
    assert [(a.agent, a.sessions) for a in client.unserved_agents()] == [("lonely", 1)]
    listed = run_cli(client.settings, "sessions", "list", "--unserved", "--json")
    assert [row["session_id"] for row in json.loads(listed.stdout)["items"]] == [str(lonely)]
    gauges = {family.name: family for family in DatabaseCollector(client.db).collect()}
    assert [
        (s.labels["agent"], s.value) for s in gauges["resumable_sessions_unserved"].samples
    ] == [("lonely", 1.0)]
    while time.monotonic() - created < 5:  # two reconcile grace periods and more
        assert _events(client, lonely) == ["session_created"]
        time.sleep(0.1)
    after = client.get(lonely)
    assert (after.status, after.updated_at) == ("pending", updated_at)

    # A worker that loads it starts, and runs it at once.
    lonely_worker()
    wait_until(lambda: client.get(lonely).status == "completed", timeout=10, what="the run")
    assert _events(client, lonely).count("run_started") == 1
    assert client.list_sessions(unserved=True) == []


def test_a_new_agent_s_sessions_started_before_its_workers_wait_for_them(
    client: Client,
    db: Database,
    start_process: Callable[..., ManagedProcess],
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """An application may start sessions of an agent no worker has announced
    yet (its workers are still being deployed): the workers already running
    leave them pending, untouched, and the first worker that loads the agent
    runs them. (They were failed at once as `unknown_agent`.)"""
    with db.connection() as conn:  # `lonely` was never announced
        conn.execute("DELETE FROM agents WHERE name = 'lonely'")
        conn.execute("DELETE FROM agent_versions WHERE agent = 'lonely'")
    other = start_worker()  # loads every agent but `lonely`
    early = [client.start("lonely") for _ in range(3)]
    wait_until(lambda: "no live worker loads agent 'lonely'" in other.output(), what="the skip")
    served = client.start("five")
    wait_until(lambda: client.get(served).status == "completed", what="a served session")
    for session in early:
        assert client.get(session).status == "pending"
        assert _events(client, session) == ["session_created"]
    assert sorted(s.session_id for s in client.list_sessions(unserved=True)) == sorted(early)

    start_process(["worker", "--agents", "tests.other_agents"], "worker started")
    wait_until(lambda: all(client.get(s).status == "completed" for s in early), what="the runs")
    for session in early:
        assert _events(client, session).count("run_started") == 1
        assert client.get(session).result == {"ran": True}
    assert client.list_sessions(unserved=True) == []


def test_a_starting_worker_enqueues_only_unserved_agents(
    db: Database,
) -> None:
    from resumable.models import agent_queries

    with db.connection() as conn:
        conn.execute("DELETE FROM workers")
        for name in ("skipped", "served"):
            conn.execute(
                agent_queries.REGISTER_AGENT, {"name": name, "steps": "[]", "checks": "[]"}
            )
        conn.execute(
            agent_queries.ANNOUNCE_WORKER, {"id": "other:1", "agents": '["served"]', "ttl": 60}
        )
        conn.execute(
            agent_queries.ANNOUNCE_WORKER, {"id": "dead:2", "agents": '["skipped"]', "ttl": -1}
        )
        rows = conn.execute(
            agent_queries.UNSERVED_AGENTS,
            {"id": "me:3", "agents": ["skipped", "served", "never_announced"]},
        ).fetchall()
        conn.execute("DELETE FROM workers")
    # A never announced agent's sessions (started before its workers) waited too.
    assert [row["name"] for row in rows] == ["skipped", "never_announced"]
