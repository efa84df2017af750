"""Calls without side effects (``ctx.tool(..., side_effects=False)``) are not
claimed: each answer rides with the step's next write, the next call's claim
or the step's commit, on real workers; so does a deferred result
(``defer_record=True``). Rows written by one statement share
its transaction id (``xmin``), which is how these tests see what rode with
what."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from resumable.client import Client
from resumable.models.database import Database
from tests.conftest import LocalDeployment, wait_until
from tests.fake_api import FakeAPI

AGENTS = "tests.answer_agents"


def _finished(client: Client, session_id: uuid.UUID) -> Any:
    wait_until(lambda: client.get(session_id).status == "completed", timeout=60, what="completion")
    return client.get(session_id).result


def _calls(db: Database, session_id: uuid.UUID) -> list[dict[str, Any]]:
    """The session's recorded calls in order, with the transaction that last wrote each."""
    with db.connection() as conn:
        return conn.execute(
            "SELECT call_index, tool, status, response, idempotency_key AS key,"
            " xmin::text AS xact FROM tool_execution_cache WHERE session_id = %s"
            " ORDER BY step_seq, call_index",
            (session_id,),
        ).fetchall()


def _checkpoint_xact(db: Database, session_id: uuid.UUID) -> str:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT xmin::text AS xact FROM checkpoints WHERE session_id = %s AND seq = 1",
            (session_id,),
        ).fetchone()
    assert row is not None
    return str(row["xact"])


def _per_key(api: FakeAPI, db: Database, session_id: uuid.UUID) -> list[int]:
    """How many requests the fake API had under each recorded call's key, in call order."""
    return [api.calls[call["key"]] for call in _calls(db, session_id)]


@pytest.mark.parametrize("agent", ["answers", "answers_async"])
def test_an_answer_rides_with_the_next_claim_and_the_last_with_the_commit(
    client: Client, db: Database, deployment: LocalDeployment, tmp_path: Path, agent: str
) -> None:
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        deployment.worker(AGENTS)
        session_id = client.start(
            agent, {"api": api.url, "gate_dir": str(tmp_path), "hold_at": "in-charge"}
        )
        wait_until((tmp_path / "entered-in-charge").exists, what="the charge")
        # Inside the charge: its claim inserted the first answer with it.
        claimed = _calls(db, session_id)
        (tmp_path / "hold").unlink()
        result = _finished(client, session_id)
    assert [(c["tool"], c["status"]) for c in claimed] == [
        ("think", "completed"),
        ("charge", "started"),
    ]
    assert claimed[0]["xact"] == claimed[1]["xact"]
    calls = _calls(db, session_id)
    assert [(c["call_index"], c["tool"], c["status"]) for c in calls] == [
        (0, "think", "completed"),
        (1, "charge", "completed"),
        (2, "think", "completed"),
    ]
    assert result == {
        "idea": calls[0]["response"]["id"],
        "charge": calls[1]["response"]["id"],
        "final": calls[2]["response"]["id"],
    }
    # The last answer rode with the step's commit.
    assert calls[2]["xact"] == _checkpoint_xact(db, session_id)
    assert _per_key(api, db, session_id) == [1, 1, 1]


# Sync steps under SIGKILL: test_framework_pydantic_ai runs its sync adapter.
@pytest.mark.parametrize("agent", ["answers_async"])
def test_a_kill_after_the_effect_replays_the_answer_it_acted_on(
    client: Client,
    db: Database,
    reconciler: None,
    deployment: LocalDeployment,
    tmp_path: Path,
    agent: str,
) -> None:
    """SIGKILL after the charge: the charge's claim carried the first answer,
    so the replay returns it instead of asking again, and the charge is
    made again under its key (deduplicated by the API)."""
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        victim = deployment.worker(AGENTS)
        session_id = client.start(
            agent, {"api": api.url, "gate_dir": str(tmp_path), "hold_at": "after-charge"}
        )
        wait_until((tmp_path / "entered-after-charge").exists, what="the charge")
        before = _calls(db, session_id)
        victim.kill()
        (tmp_path / "hold").unlink()
        deployment.worker(AGENTS)
        result = _finished(client, session_id)
        effects = [path for path, _ in api.order]
    assert [(c["tool"], c["status"]) for c in before][:1] == [("think", "completed")]
    assert result["charge"] == _calls(db, session_id)[1]["response"]["id"]
    # The first answer was asked for once; the charge's effect happened once.
    assert _per_key(api, db, session_id)[0] == 1
    assert effects == ["/think", "/charge", "/think"]


# Sync steps under SIGKILL: test_framework_pydantic_ai runs its sync adapter.
@pytest.mark.parametrize("agent", ["answers_async"])
def test_a_kill_before_the_next_write_asks_again(
    client: Client,
    db: Database,
    reconciler: None,
    deployment: LocalDeployment,
    tmp_path: Path,
    agent: str,
) -> None:
    """SIGKILL after the first answer and before any write: nothing recorded
    it and nothing acted on it, so the replay asks again (the documented
    window); the effect still happens once."""
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        victim = deployment.worker(AGENTS)
        session_id = client.start(
            agent, {"api": api.url, "gate_dir": str(tmp_path), "hold_at": "after-think"}
        )
        wait_until((tmp_path / "entered-after-think").exists, what="the first answer")
        assert _calls(db, session_id) == []  # the answer waits for the next write
        victim.kill()
        (tmp_path / "hold").unlink()
        deployment.worker(AGENTS)
        _finished(client, session_id)
    assert _per_key(api, db, session_id) == [2, 1, 1]


@pytest.mark.parametrize("agent", ["answers", "answers_async"])
def test_a_step_that_fails_after_an_answer_keeps_it_for_the_retry(
    client: Client, db: Database, deployment: LocalDeployment, tmp_path: Path, agent: str
) -> None:
    """The step fails before any write: its answer is written before the
    retry, which returns it without asking again."""
    with FakeAPI() as api:
        deployment.worker(AGENTS)
        session_id = client.start(
            agent, {"api": api.url, "gate_dir": str(tmp_path), "fail_once": "after-think"}
        )
        _finished(client, session_id)
    assert (tmp_path / "failed").exists()
    assert _per_key(api, db, session_id) == [1, 1, 1]
    events = [e.type for e in client.events(session_id)]
    assert "step_failed" in events or "retry_scheduled" in events


def test_gathered_answers_and_effects_are_each_recorded_once(
    client: Client, db: Database, deployment: LocalDeployment, tmp_path: Path
) -> None:
    with FakeAPI() as api:
        deployment.worker(AGENTS)
        ids = [client.start("gathered", {"api": api.url}) for _ in range(5)]
        results = [_finished(client, session_id) for session_id in ids]
    for session_id, result in zip(ids, results, strict=True):
        calls = _calls(db, session_id)
        assert [c["call_index"] for c in calls] == list(range(12))
        assert {c["status"] for c in calls} == {"completed"}
        assert _per_key(api, db, session_id) == [1] * 12
        charges = sorted(c["response"]["id"] for c in calls if c["tool"] == "charge")
        assert result == charges


def test_a_deferred_result_rides_with_the_next_claim(
    client: Client, db: Database, deployment: LocalDeployment, tmp_path: Path
) -> None:
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        deployment.worker(AGENTS)
        session_id = client.start(
            "deferred", {"api": api.url, "gate_dir": str(tmp_path), "hold_at": "in-second"}
        )
        wait_until((tmp_path / "entered-in-second").exists, what="the second charge")
        claimed = _calls(db, session_id)
        (tmp_path / "hold").unlink()
        result = _finished(client, session_id)
    # Inside the second call: its claim recorded the first call's result.
    assert [(c["tool"], c["status"]) for c in claimed] == [
        ("charge", "completed"),
        ("charge", "started"),
    ]
    assert claimed[0]["xact"] == claimed[1]["xact"]
    calls = _calls(db, session_id)
    assert result == [c["response"]["id"] for c in calls]
    # The last result rode with the step's commit; each charge was made once.
    assert calls[1]["xact"] == _checkpoint_xact(db, session_id)
    assert _per_key(api, db, session_id) == [1, 1]


def test_a_kill_before_a_deferred_result_is_written_makes_the_call_again_under_its_key(
    client: Client, db: Database, reconciler: None, deployment: LocalDeployment, tmp_path: Path
) -> None:
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        victim = deployment.worker(AGENTS)
        session_id = client.start(
            "deferred", {"api": api.url, "gate_dir": str(tmp_path), "hold_at": "after-charge"}
        )
        wait_until((tmp_path / "entered-after-charge").exists, what="the first charge")
        assert [c["status"] for c in _calls(db, session_id)] == ["started"]
        victim.kill()
        (tmp_path / "hold").unlink()
        deployment.worker(AGENTS)
        _finished(client, session_id)
        effects = api.effect_count()
    # Made twice under one key: the API deduplicated it, one effect.
    assert _per_key(api, db, session_id) == [2, 1]
    assert effects == 2
