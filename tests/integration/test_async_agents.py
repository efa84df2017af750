"""``async def`` steps, tools, checks and compensations on real worker, web and
scheduler processes: every wait, a SIGKILL mid-step, a worker paused past its
lease with 200 async runs in flight, a time limit by cancellation, a saga,
and a blocking call inside an async step."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from resumable.agent import AgentRegistry
from resumable.client import Client
from resumable.models.database import Database
from resumable.services.time_travel import TimeTravel
from tests.conftest import LocalDeployment, exit_status, wait_until
from tests.fake_api import FakeAPI
from tests.integration.test_history import recording
from tests.signing import signed

AGENTS = "tests.async_agents"


def _status(client: Client, session_id: uuid.UUID) -> str:
    return client.get(session_id).status


def _effects_at(api: FakeAPI, path: str) -> int:
    with api.lock:
        return sum(1 for at, _ in api.order if at.endswith(path))


def _run_trip(client: Client, api: FakeAPI, session_id: uuid.UUID, path: Path) -> None:
    """Answer the callback, let the timer pass and the poll find its file."""
    wait_until(lambda: _status(client, session_id) == "suspended", timeout=30, what="callback")
    body, headers = signed({"ok": True})
    url = client.state(session_id)["callback_url"]
    assert httpx.post(url, content=body, headers=headers, timeout=10).status_code == 202
    wait_until(lambda: _effects_at(api, "/charge") >= 2, timeout=30, what="the timer step")
    path.write_text("ready")
    wait_until(lambda: _status(client, session_id) == "completed", timeout=30, what="the poll")


def _assert_trip_effects_once(client: Client, api: FakeAPI, session_id: uuid.UUID) -> None:
    result = client.get(session_id).result
    assert result["quotes"] == ["a", "b"]
    assert result["reply"] == {"ok": True}
    assert result["polled"] == "ready"
    # plan's charge, two quotes, the sync note, after_timer's charge: each once, by key.
    assert api.effect_count() == 5
    # Which key came twice, and the session's story, should a run ever repeat one.
    story = [(e.type, e.step, e.payload) for e in client.events(session_id)]
    assert sorted(api.calls.values()) == [1] * 5, (dict(api.calls), story)
    committed = Counter(e.seq for e in client.events(session_id) if e.type == "step_completed")
    assert set(committed.values()) == {1} and len(committed) == 4


def test_an_async_agent_with_tools_a_callback_a_timer_and_a_poll_completes(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.web()
    deployment.scheduler()
    deployment.worker(AGENTS)
    with FakeAPI() as api:
        path = tmp_path / "ready"
        session_id = client.start("async_trip", {"api": api.url, "path": str(path)})
        _run_trip(client, api, session_id, path)
        _assert_trip_effects_once(client, api, session_id)
    events = client.events(session_id)
    kinds = [e.payload.get("woken_by") for e in events if e.payload]
    assert {"callback", "timer", "poll"} <= set(kinds)
    # The poll check's `resumed` commits with the async step it woke, at the position before.
    [by_poll] = [e for e in events if e.type == "resumed" and e.payload.get("by") == "poll"]
    [finished] = [e for e in events if e.type == "step_completed" and e.step == "finish"]
    assert finished.seq is not None
    assert (by_poll.step, by_poll.seq, by_poll.at) == ("finish", finished.seq - 1, finished.at)


def test_sigkill_in_an_async_step_replays_its_tool_calls_without_repeating_them(
    client: Client, tmp_path: Path, reconciler: None, deployment: LocalDeployment
) -> None:
    deployment.web()
    deployment.scheduler()
    (tmp_path / "hold").touch()
    victim = deployment.worker(AGENTS)
    with FakeAPI() as api:
        path = tmp_path / "ready"
        session_id = client.start(
            "async_trip", {"api": api.url, "path": str(path), "gate_dir": str(tmp_path)}
        )
        wait_until(lambda: list(tmp_path.glob("entered-plan-*")), timeout=30, what="the async step")
        assert api.total_calls() == 3  # charged and quoted, then killed mid-step
        deployment.kill(victim)
        (tmp_path / "hold").unlink()
        deployment.worker(AGENTS)
        _run_trip(client, api, session_id, path)
        _assert_trip_effects_once(client, api, session_id)
    assert "lease_recovered" in [e.type for e in client.events(session_id)]


def test_two_hundred_async_runs_paused_past_their_lease_are_fenced_out(
    client: Client, db: Database, tmp_path: Path, reconciler: None, deployment: LocalDeployment
) -> None:
    (tmp_path / "hold").touch()
    paused = deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="2")
    with FakeAPI() as api:
        ids = [
            client.start("async_crowd", {"api": api.url, "n": n, "gate_dir": str(tmp_path)})
            for n in range(200)
        ]
        wait_until(
            lambda: len(list(tmp_path.glob("entered-crowd-*"))) == 200,
            timeout=60,
            what="200 async runs in flight on one process (2 threads)",
        )
        epochs = _epochs(db, ids)
        paused.pause()
        (tmp_path / "hold").unlink()
        deployment.worker(AGENTS)
        wait_until(
            lambda: client.count_by_status() == {"completed": 200},
            timeout=90,
            what="a second worker takes all 200 over",
        )
        assert all(now > epochs[i] for i, now in _epochs(db, ids).items())
        paused.resume()
        # Woken, each stale run tries to claim its tool call: refused under the old epoch.
        wait_until(
            lambda: paused.output().count("lease lost") >= 200,
            timeout=30,
            what="every late write of the paused worker rejected",
        )
        assert api.effect_count() == 200
        assert api.total_calls() == 200  # the stale runs never reached the API
    with db.connection() as conn:
        doubled = conn.execute(
            "SELECT session_id FROM audit_events WHERE event_type = 'step_completed' "
            "GROUP BY session_id HAVING count(*) <> 1"
        ).fetchall()
    assert doubled == []


def _epochs(db: Database, ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT id, lease_epoch FROM sessions WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    return {uuid.UUID(str(row["id"])): int(str(row["lease_epoch"])) for row in rows}


def test_an_async_step_over_its_time_limit_is_cancelled_and_retried(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    counter = tmp_path / "tries"
    session_id = client.start("async_slow", {"counter": str(counter)})
    wait_until(lambda: _status(client, session_id) == "completed", timeout=30, what="the retry")
    assert client.get(session_id).result == {"tries": 2}
    retried = [e for e in client.events(session_id) if e.type == "retry_scheduled"]
    assert len(retried) == 1
    assert retried[0].payload["type"] == "StepTimeoutError"
    assert "1 s time limit" in retried[0].payload["message"]


def test_an_async_compensation_runs_once(client: Client, deployment: LocalDeployment) -> None:
    deployment.worker(AGENTS)
    with FakeAPI() as api:
        session_id = client.start("async_saga", {"api": api.url})
        wait_until(lambda: _status(client, session_id) == "failed", timeout=30, what="the saga")
        undone = {key: n for key, n in api.calls.items() if key.endswith(":compensate")}
    assert list(undone.values()) == [1]
    assert _effects_at(api, "/undo") == 1
    events = [e.type for e in client.events(session_id)]
    assert events.count("compensation_completed") == 1
    assert [d.session_id for d in client.dead_letters().items] == [session_id]


def test_a_call_then_a_failure_in_one_async_step_is_recorded_then_compensated_once(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    with FakeAPI() as api:
        session_id = client.start("async_saga_in_one_step", {"api": api.url})
        wait_until(lambda: _status(client, session_id) == "failed", timeout=30, what="the saga")
        assert _effects_at(api, "/book") == 1
        assert _effects_at(api, "/undo") == 1
    events = [e.type for e in client.events(session_id)]
    assert events.count("compensation_completed") == 1


def test_a_call_whose_commit_rolls_back_is_recorded_then_compensated_once(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    with FakeAPI() as api:
        session_id = client.start("async_saga_rolled_back", {"api": api.url})
        wait_until(lambda: _status(client, session_id) == "failed", timeout=30, what="the saga")
        assert _effects_at(api, "/book") == 1
        assert _effects_at(api, "/undo") == 1
    events = [e.type for e in client.events(session_id)]
    assert events.count("compensation_completed") == 1


def test_a_tool_result_postgresql_cannot_store_fails_the_step_not_the_run(
    client: Client, deployment: LocalDeployment
) -> None:
    """A NUL in a tool's result is refused when the call returns: the step
    fails for good (NotSerializableError is permanent, whatever the retry
    policy) with an error that says why, instead of a commit that fails
    again on every recovery."""
    deployment.worker(AGENTS)
    with FakeAPI() as api:
        session_id = client.start("async_unstorable_result", {"api": api.url})
        wait_until(lambda: _status(client, session_id) == "failed", timeout=30, what="failure")
        assert _effects_at(api, "/answer") == 1  # not retried, though max_attempts=2
    error = client.get(session_id).error
    assert error is not None and "NUL" in str(error.message), error


def test_an_async_calls_result_rides_with_its_steps_commit(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    """A step that returns right after its call: the result is recorded in
    the step's own commit (one transaction: the same now()), not a statement
    of its own, and every call is recorded as completed with its response."""
    deployment.worker(AGENTS)
    with FakeAPI() as api:
        session_id = client.start("async_relay", {"api": api.url, "steps": 10, "sleep": 0})
        wait_until(lambda: _status(client, session_id) == "completed", timeout=30, what="10 hops")
        assert api.effect_count() == 10
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT t.status, t.response, t.updated_at = c.created_at AS with_commit"
            " FROM tool_execution_cache t JOIN checkpoints c"
            " ON c.session_id = t.session_id AND c.seq = t.step_seq"
            " WHERE t.session_id = %s ORDER BY t.step_seq",
            (session_id,),
        ).fetchall()
    assert [row["status"] for row in rows] == ["completed"] * 10
    assert all(row["response"] is not None for row in rows)
    # A database thread may take a record before the step returns (then it is
    # written on its own, as before); on an idle worker most ride along.
    assert sum(bool(row["with_commit"]) for row in rows) >= 1, rows


def test_more_async_sagas_than_database_threads_each_compensate_once(
    client: Client, deployment: LocalDeployment
) -> None:
    """Eight sagas at once on a loop with 2 database threads, each async
    compensation awaiting ``asyncio.to_thread``: none waits for a thread that
    a waiting saga holds (once, the compensations ran on the database threads,
    which were also the loop's default executor: two sagas took both and
    waited forever for their own ``to_thread``)."""
    # A pool of 2 threads + 2 (keeper, heartbeat) + 2 left: 2 database threads.
    deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="2", RESUMABLE_DB_POOL_SIZE="6")
    with FakeAPI() as api:
        ids = [client.start("async_saga_crowd", {"api": api.url, "n": n}) for n in range(8)]
        wait_until(lambda: client.count_by_status() == {"failed": 8}, timeout=60, what="8 sagas")
        undone = {key: n for key, n in api.calls.items() if key.endswith(":compensate")}
        assert _effects_at(api, "/hold") == 8
        assert _effects_at(api, "/undo") == 8
    assert sorted(undone.values()) == [1] * 8
    for session_id in ids:
        events = [e.type for e in client.events(session_id)]
        assert events.count("compensation_completed") == 1


def test_a_blocking_call_in_an_async_step_is_reported_and_other_leases_survive(
    client: Client, db: Database, tmp_path: Path, reconciler: None, deployment: LocalDeployment
) -> None:
    """The blocked loop stalls the other async runs of its worker, but the lease
    keeper's own thread keeps their leases: a second worker, ready to take over
    any lease that lapses, takes none."""
    first = deployment.worker(AGENTS)
    with FakeAPI() as api:
        common = {"api": api.url, "gate_dir": str(tmp_path)}
        waiting = [
            client.start("async_blocker", {**common, "n": n, "seconds": 3}) for n in range(20)
        ]
        wait_until(lambda: len(list(tmp_path.glob("entered-*"))) == 20, what="20 async runs")
        blocker = client.start("async_blocker", {**common, "n": 99, "seconds": 5, "block": True})
        wait_until(lambda: len(list(tmp_path.glob("entered-*"))) == 21, what="the blocking run")
        deployment.worker(AGENTS)  # would take over any lease that lapsed (2 s leases)
        wait_until(lambda: client.count_by_status() == {"completed": 21}, timeout=60, what="all 21")
        assert api.effect_count() == 21
        assert api.total_calls() == 21
    for session_id in [*waiting, blocker]:
        assert "lease_recovered" not in [e.type for e in client.events(session_id)]
    # Detected, and the session and step that blocked the loop are named.
    wait_until(lambda: "event loop has been blocked" in first.output(), what="the warning")
    warnings = [line for line in first.output().splitlines() if "has been blocked" in line]
    assert any(f"step 'wait_or_block' of session {blocker}" in line for line in warnings)


def test_hundreds_of_quick_async_steps_lag_the_loop_without_blaming_one(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    """300 steps of short awaits with 3 ms of CPU between them, let go at
    once: the loop's rounds take about a second, past the 0.5 s warning, yet
    none of them holds it. The worker says its loop is busy (or, on a loaded
    machine, starved of CPU), never that a step blocked it."""
    sessions = 300
    (tmp_path / "hold").touch()
    worker = deployment.worker(AGENTS, RESUMABLE_LOOP_LAG_WARNING_SECONDS="0.5")
    common = {"gate_dir": str(tmp_path), "rounds": 4, "cpu": 0.003}
    for _ in range(sessions):
        client.start("async_busy", common)
    wait_until(
        lambda: len(list(tmp_path.glob("entered-think-*"))) == sessions,
        timeout=120,
        what=f"{sessions} async runs in flight on one process",
    )
    (tmp_path / "hold").unlink()
    wait_until(
        lambda: client.count_by_status() == {"completed": sessions},
        timeout=120,
        what="all of them to complete",
    )
    output = worker.output()
    assert "has been blocked" not in output
    assert "the event loop is busy" in output or "starved of CPU" in output, worker.tail(40)


def test_a_sync_step_returning_a_coroutine_or_calling_an_async_tool_gets_a_clear_error(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.worker(AGENTS)
    returned = client.start("async_mistakes", {})
    called = client.start("async_mistakes", {"tool": True})
    wait_until(
        lambda: client.count_by_status() == {"failed": 2}, timeout=30, what="both dead-lettered"
    )
    returned_error, called_error = client.get(returned).error, client.get(called).error
    assert returned_error is not None and called_error is not None
    assert returned_error.code == "invalid_step_result"
    assert "returned a coroutine" in str(returned_error.message)
    assert called_error.code == "agent_definition_error"
    assert "declare the step `async def`" in str(called_error.message)


def test_sigterm_hands_back_every_async_run_in_flight(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    steps, sessions = 6, 10
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        stopping = deployment.worker(AGENTS)
        common = {"api": api.url, "steps": steps, "hold_at": 3, "gate_dir": str(tmp_path)}
        ids = [client.start("async_relay", common) for _ in range(sessions)]
        wait_until(
            lambda: len(list(tmp_path.glob("entered-hop-*"))) == sessions,
            what="every run in the middle of its third step",
        )
        other = deployment.worker(AGENTS)
        stopping.signal(signal.SIGTERM)
        wait_until(lambda: "received SIGTERM" in stopping.output(), what="the signal")
        (tmp_path / "hold").unlink()  # the steps in flight finish, then are handed back
        assert exit_status(stopping, 15) == 0
        wait_until(
            lambda: client.count_by_status() == {"completed": sessions},
            timeout=60,
            what="the other worker to finish them",
        )
        # Every step ran once and every charge was made once: nothing was cut off.
        assert api.total_calls() == steps * sessions
        assert api.effect_count() == steps * sessions
    assert f"{sessions} session(s) handed back mid-run" in stopping.output()
    for session_id in ids:
        events = client.events(session_id)
        committed = Counter(e.seq for e in events if e.type == "step_completed")
        assert committed == Counter(range(1, steps + 1))
        released = [e.payload["reason"] for e in events if e.type == "lease_released"]
        assert released == ["worker stopping"]
        assert "lease_recovered" not in [e.type for e in events]
    assert "taken over" not in other.output()


@pytest.mark.parametrize(
    "agent", ["async_hist_snapshot", "async_hist_incremental", "async_hist_events"]
)
def test_every_checkpoint_strategy_records_async_steps_with_secrets_redacted(
    agent: str, client: Client, db: Database, deployment: LocalDeployment
) -> None:
    steps, secret = 12, "sk-live-" + uuid.uuid4().hex
    deployment.worker(AGENTS)
    # The event-sourced agent changes its state only through events: no secret there.
    session_input = {"steps": steps, "secret": None if "events" in agent else secret}
    with FakeAPI() as api:
        session_id = client.start(agent, {**session_input, "api": api.url})
        wait_until(lambda: _status(client, session_id) == "completed", what="the session")
    history = TimeTravel(db, AgentRegistry.from_modules([AGENTS]))
    for seq, expected in enumerate(recording(steps), start=1):
        state = history.state_at(session_id, seq).state
        if "events" not in agent:
            assert state.pop("credentials") == "[REDACTED]"
        assert state == expected, seq
    assert len(history.checkpoints(session_id)) == steps
    with db.connection() as conn:
        for table in ("checkpoints", "audit_events", "tool_execution_cache"):
            row = conn.execute(
                f"SELECT count(*) AS n FROM {table} t WHERE to_jsonb(t)::text LIKE %s",
                (f"%{secret}%",),
            ).fetchone()
            assert row is not None and row["n"] == 0, table


def test_a_slow_sync_step_met_by_an_async_run_does_not_stall_the_loop(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    # Each sync step blocks 3 s: run on the loop, it would stall it for 3 s, far
    # past the 1.5 s warning; a loaded machine's own scheduling lag stays below.
    worker = deployment.worker(AGENTS, RESUMABLE_LOOP_LAG_WARNING_SECONDS="1.5")
    with FakeAPI() as api:
        common = {"api": api.url, "gate_dir": str(tmp_path), "seconds": 3}
        slow = [client.start("async_mixed", {**common, "n": n}) for n in range(3)]
        fast = [client.start("async_relay", {"api": api.url, "steps": 10}) for _ in range(3)]
        wait_until(lambda: client.count_by_status() == {"completed": 6}, timeout=60, what="all six")
        assert api.effect_count() == 3 + 3 * 10
    # The sync steps ran on threads: the async sessions went on meanwhile.
    assert "has been blocked" not in worker.output()
    for session_id in [*slow, *fast]:
        assert client.get(session_id).status == "completed"


def test_a_full_worker_takes_no_more_messages_than_it_can_run(
    client: Client, db: Database, tmp_path: Path, deployment: LocalDeployment
) -> None:
    """Backpressure: with 5 places on its loop and 2 threads, a worker holds at
    most 7 sessions (5 running, 2 claimed by threads waiting for a place) and
    at most its prefetch (2 x threads, unclaimed) besides; the rest stay in
    the queue, and a second worker takes them."""
    (tmp_path / "hold").touch()
    full = deployment.worker(AGENTS, RESUMABLE_WORKER_THREADS="2", RESUMABLE_MAX_INFLIGHT="5")
    with FakeAPI() as api:
        common = {"api": api.url, "gate_dir": str(tmp_path)}
        ids = [client.start("async_crowd", {**common, "n": n}) for n in range(20)]
        wait_until(lambda: len(list(tmp_path.glob("entered-crowd-*"))) == 5, what="5 places")
        wait_until(lambda: _held_by(db, full.pid) == 7, what="2 threads waiting for a place")
        assert len(list(tmp_path.glob("entered-crowd-*"))) == 5
        deployment.worker(AGENTS)

        def taken_by_the_other() -> bool:
            assert _held_by(db, full.pid) == 7  # never more, while its places are full
            return len(list(tmp_path.glob("entered-crowd-*"))) >= 5 + (20 - 7 - 4)

        wait_until(taken_by_the_other, timeout=30, what="the other worker to take the rest")
        (tmp_path / "hold").unlink()
        wait_until(lambda: client.count_by_status() == {"completed": 20}, what="all 20")
        assert api.effect_count() == 20
    assert len(ids) == 20


def _held_by(db: Database, pid: int) -> int:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM sessions WHERE status = 'running' AND lease_owner LIKE %s",
            (f"%:{pid}:%",),
        ).fetchone()
    assert row is not None
    return int(str(row["n"]))
