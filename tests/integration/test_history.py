"""Checkpoint strategies, time travel, forks, retention, compaction, redaction."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from resumable.agent import AgentRegistry
from resumable.client import Client
from resumable.errors import ReducerNotLoadedError
from resumable.models.database import Database
from resumable.scheduler.retention import compact_histories, retire_old_sessions
from resumable.services.time_travel import TimeTravel
from tests import agents
from tests.conftest import API_TOKEN, ManagedProcess, wait_until
from tests.fake_api import FakeAPI

STRATEGIES = ["hist_snapshot", "hist_incremental", "hist_events"]
REGISTRY = AgentRegistry.from_modules(["tests.agents"])


def recording(steps: int) -> list[dict[str, Any]]:
    """The state after each step, computed independently of the runtime."""
    state: dict[str, Any] = {}
    states = []
    for n in range(1, steps + 1):
        state = agents.transition(json.loads(json.dumps(state)), n)
        states.append(json.loads(json.dumps(state)))
    return states


def _done(client: Client, session_id: uuid.UUID) -> bool:
    return client.get(session_id).status == "completed"


@pytest.mark.parametrize("agent", STRATEGIES)
def test_every_past_state_matches_the_recording_across_a_crash(
    agent: str,
    client: Client,
    db: Database,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
    reconciler: None,
) -> None:
    (tmp_path / "hold").touch()
    victim = start_worker()
    session_id = client.start(agent, {"steps": 50, "hold_at": 30, "gate_dir": str(tmp_path)})
    wait_until((tmp_path / "entered-advance-30").exists, what="step 30")
    victim.kill()
    (tmp_path / "hold").unlink()
    start_worker()
    wait_until(lambda: _done(client, session_id), timeout=30, what="recovery")

    expected = recording(50)
    history = TimeTravel(db, REGISTRY)
    for seq in range(1, 51):
        assert history.state_at(session_id, seq).state == expected[seq - 1], seq
    assert client.get(session_id).state == expected[-1]
    kinds = [row["kind"] for row in history.checkpoints(session_id)]
    assert len(kinds) == 50
    if agent == "hist_incremental":
        assert kinds.count("snapshot") == 10  # every 5th (1, 6, 11, ...)
        assert all(history.state_at(session_id, s).rows_read <= 5 for s in range(1, 51))
    elif agent == "hist_events":
        assert kinds.count("snapshot") == 8  # seq 1, 8, 15, ... 50
    else:
        assert set(kinds) == {"snapshot"}


def test_fork_from_step_ten_reuses_earlier_tool_results_and_leaves_the_original(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    with FakeAPI() as api:
        original = client.start("hist_incremental", {"steps": 20, "api": api.url})
        wait_until(lambda: _done(client, original), what="the original")
        before = client.get(original)
        before_checkpoints = [(c.seq, c.kind) for c in client.checkpoints(original)]
        assert api.total_calls() == 20

        history = TimeTravel(db, REGISTRY)
        fork_id = history.fork(
            original, 10, actor="test", broker=client.broker, settings=client.settings
        )
        wait_until(lambda: _done(client, fork_id), what="the fork")
        fork = client.get(fork_id)
        # Steps 11-20 ran again in the fork, with new keys; 1-10 did not.
        assert api.total_calls() == 30
        assert api.effect_count() == 30

    assert fork.result == before.result == {"n": 20}
    assert fork.state == before.state
    assert (fork.forked_from, fork.forked_at) == (original, 10)
    after = client.get(original)
    assert (after.state, after.seq, after.status) == (before.state, 20, "completed")
    assert [(c.seq, c.kind) for c in client.checkpoints(original)] == before_checkpoints
    with db.connection() as conn:
        copied = conn.execute(
            "SELECT step_seq FROM tool_execution_cache WHERE session_id = %s ORDER BY step_seq",
            (fork_id,),
        ).fetchall()
    assert [r["step_seq"] for r in copied] == list(range(1, 21))
    assert history.state_at(fork_id, 5).state == recording(5)[-1]
    assert [e.type for e in client.events(original)][-1] == "forked"


def test_fork_validation(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    from resumable.errors import CheckpointNotFoundError, InvalidPatchError, SessionStateError

    start_worker()
    session_id = client.start("hist_snapshot", {"steps": 3})
    wait_until(lambda: _done(client, session_id), what="completion")
    history = TimeTravel(db, REGISTRY)
    with pytest.raises(CheckpointNotFoundError):
        history.fork(session_id, 9, actor="t")
    with pytest.raises(SessionStateError, match="finished"):
        history.fork(session_id, 3, actor="t")
    with pytest.raises(InvalidPatchError):
        history.fork(session_id, 1, actor="t", state_patch=[{"op": "remove", "path": "/nope"}])
    patched = history.fork(
        session_id, 1, actor="t", state_patch=[{"op": "add", "path": "/note", "value": "x"}]
    )
    assert client.state(patched)["note"] == "x"
    assert client.count_by_status() == {"completed": 1, "pending": 1}


def test_compaction_keeps_every_remaining_checkpoint_loadable(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    ids = {a: client.start(a, {"steps": 50}) for a in STRATEGIES}
    wait_until(lambda: all(_done(client, s) for s in ids.values()), what="three sessions")
    history = TimeTravel(db, REGISTRY)
    expected = recording(50)
    for agent, session_id in ids.items():
        removed = history.compact(session_id, keep=13)
        assert removed == 37, agent
        rows = history.checkpoints(session_id)
        assert [r["seq"] for r in rows] == list(range(38, 51))
        assert rows[0]["kind"] == "snapshot"
        for seq in range(38, 51):
            assert history.state_at(session_id, seq).state == expected[seq - 1], (agent, seq)
        assert client.session_row(session_id).compacted_to == 37


def test_the_scheduler_compacts_the_sessions_past_twice_the_kept_history(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    """The candidates come from an index on a copy of ``step_seq`` that a
    step updates only when the session stops (or every 32 steps), so that
    steps in mid-run write no index: a session that finished must be found
    at once, with its exact count."""
    start_worker()
    long_one = client.start("hist_snapshot", {"steps": 45})
    short_one = client.start("hist_snapshot", {"steps": 14})
    wait_until(lambda: _done(client, long_one) and _done(client, short_one), what="both")
    settings = client.settings.model_copy(update={"compact_keep": 7})
    # 45 > 2 x 7 and 45 is not a multiple of 32: only its last commit set the mark.
    assert compact_histories(settings, db, REGISTRY) == 45 - 7
    assert compact_histories(settings, db, REGISTRY) == 0
    assert [r["seq"] for r in TimeTravel(db, REGISTRY).checkpoints(long_one)] == list(range(39, 46))
    assert len(TimeTravel(db, REGISTRY).checkpoints(short_one)) == 14  # not over 2 x 7
    assert client.session_row(short_one).compacted_to == 0


def test_retention_deletes_only_old_finished_sessions(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess], tmp_path: Path
) -> None:
    worker = start_worker()
    old_done = client.start("five")
    recent_done = client.start("five")
    flag = tmp_path / "flag"
    old_dead = client.start("fragile", {"flag": str(flag)})
    wait_until(lambda: client.count_by_status() == {"completed": 2, "failed": 1}, what="finishing")
    worker.stop()  # so the next session stays pending
    old_pending = client.start("five", {"x": 1}, idempotency_key="stays-pending")
    with db.connection() as conn:
        conn.execute(
            "UPDATE sessions SET finished_at = now() - interval '10 days', "
            "created_at = now() - interval '10 days' WHERE id = ANY(%s)",
            ([old_done, old_dead, old_pending],),
        )
    settings = client.settings.model_copy(update={"retention_days": 7, "retention_mode": "archive"})
    assert retire_old_sessions(settings, db) == 1
    assert retire_old_sessions(settings, db) == 0
    remaining = {s.session_id for s in client.list_sessions(limit=10)}
    assert remaining == {recent_done, old_dead, old_pending}
    with db.connection() as conn:
        archived = conn.execute("SELECT session_id, document FROM archived_sessions").fetchall()
        leftovers = conn.execute(
            "SELECT count(*) AS n FROM checkpoints WHERE session_id = %s", (old_done,)
        ).fetchone()
    assert [a["session_id"] for a in archived] == [old_done]
    document: Any = archived[0]["document"]
    assert len(document["checkpoints"]) == 5 and document["events"]
    assert leftovers is not None and leftovers["n"] == 0


def test_secrets_never_reach_the_history(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    secret = "sk-live-" + uuid.uuid4().hex
    start_worker()
    with FakeAPI() as api:
        session_id = client.start("leaky", {"secret": secret, "api": api.url})
        wait_until(lambda: client.get(session_id).status == "failed", what="the failure")
        incremental = client.start("hist_incremental", {"steps": 6, "secret": secret})
        wait_until(lambda: _done(client, incremental), what="the incremental session")
    # The live state keeps what the agent needs.
    assert client.state(session_id)["auth"]["api_key"] == secret
    with db.connection() as conn:
        for table in ("checkpoints", "audit_events", "tool_execution_cache", "dead_letters"):
            row = conn.execute(
                f"SELECT count(*) AS n FROM {table} t WHERE to_jsonb(t)::text LIKE %s",
                (f"%{secret}%",),
            ).fetchone()
            assert row is not None and row["n"] == 0, table
        letter = conn.execute("SELECT error_message FROM dead_letters").fetchone()
    assert letter is not None and "[REDACTED]" in str(letter["error_message"])
    checkpoint = TimeTravel(db, REGISTRY).state_at(session_id, 1).state
    assert checkpoint["auth"] == {"api_key": "[REDACTED]", "user": "alice"}


def test_an_event_sourced_state_between_snapshots_names_the_module_to_load(
    client: Client, db: Database, app: Starlette, start_worker: Callable[..., ManagedProcess]
) -> None:
    """Between snapshots an event-sourced state is the reducer folded over the
    events: a process without the agent's module answered 404
    checkpoint_not_found for a checkpoint that exists. It is 409
    reducer_not_loaded (ReducerNotLoadedError), naming what to load."""
    start_worker()
    session_id = client.start("hist_events", {"steps": 3})
    wait_until(lambda: _done(client, session_id), what="the run")
    assert [c.kind for c in client.checkpoints(session_id)] == ["snapshot", "events", "events"]
    plain = Client(client.settings, client.db, client.broker)  # no registry
    with pytest.raises(ReducerNotLoadedError, match="RESUMABLE_AGENTS"):
        plain.checkpoint_state(session_id, 2)
    with pytest.raises(ReducerNotLoadedError):
        plain.fork(session_id, 2, actor="test")
    assert plain.checkpoint_state(session_id, 1).state == recording(1)[-1]  # a snapshot
    with TestClient(app) as web:  # a web process without RESUMABLE_AGENTS
        answer = web.get(
            f"/v1/sessions/{session_id}/checkpoints/2",
            headers={"authorization": f"Bearer {API_TOKEN}"},
        )
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["code"] == "reducer_not_loaded"
    loaded = Client(client.settings, client.db, client.broker, REGISTRY)
    assert loaded.checkpoint_state(session_id, 2).state == recording(2)[-1]
    assert [s.session_id for s in client.list_sessions()] == [session_id]  # no fork made


@pytest.mark.parametrize("agent", STRATEGIES)
def test_the_console_s_window_of_checkpoints_shows_each_state_and_change_as_recorded(
    agent: str, client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    """The session page reads its window of checkpoints in one go (a delta's
    change is the patch its step stored); each state and each change must be
    what the recording says, at every window position, for every strategy
    (an event-sourced chain takes the per-checkpoint path)."""
    from resumable.checkpoints import apply_patch
    from resumable.webhooks.console.session_view import _checkpoints

    start_worker()
    session_id = client.start(agent, {"steps": 33})
    wait_until(lambda: _done(client, session_id), timeout=30, what="33 steps")
    expected = recording(33)
    history = TimeTravel(db, REGISTRY)
    row = client.session_row(session_id)
    for at in (None, 33, 26, 21, 20, 6, 5, 1):
        views, selected, state, note, earlier = _checkpoints(history, row, at)
        last = at or 33
        assert note is None and selected == last and state == expected[last - 1]
        first = max(1, last - 19)
        assert [v.seq for v in views] == list(range(first, last + 1))
        assert earlier == (first - 1 if first > 1 else None)
        for view in views:
            before = copy.deepcopy(expected[view.seq - 2]) if view.seq > 1 else {}
            assert view.diff is not None, view.seq
            changed = apply_patch(before, copy.deepcopy(view.diff))  # (in place)
            assert changed == expected[view.seq - 1], (at, view.seq)
