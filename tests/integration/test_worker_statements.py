"""The typed functions the worker's step loop runs (issue 37): each sends its
named statement with the parameters it names and maps the rows it answers,
through a session's whole life: announced workers, the claim, a callback and
a tool call, the step commit (fenced), lease renewals, a retry, a saga, the
dead letter; parking, taking over, waking."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from resumable.client import Client
from resumable.models import (
    agent_queries,
    blocked_queries,
    failure_queries,
    lease_queries,
    session_queries,
    step_ops,
    tool_call_queries,
    wait_ops,
)
from resumable.models.database import Database
from resumable.models.status import SessionStatus, ToolCallStatus

VERSIONS = json.dumps({"a": 0})
STARTS = json.dumps({"a": {"step": "first", "limit": None}})
ERROR = {"code": "step_failed", "type": "ValueError", "message": "no", "step": "second"}


def _claim(db: Database, session_id: uuid.UUID, owner: str = "host:1:1") -> tuple[int, int]:
    with db.connection() as conn:
        claim = step_ops.claim(
            conn, session_id, owner=owner, versions=VERSIONS, starts=STARTS, lease_seconds=30
        )
    assert claim is not None
    return claim.epoch, claim.step_seq


def _commit(
    db: Database,
    session_id: uuid.UUID,
    epoch: int,
    seq: int,
    records: str | None = None,
    record_keys: list[str] | None = None,
) -> int | None:
    with db.connection() as conn:
        return step_ops.commit_step(
            conn,
            session_id,
            epoch,
            expected_seq=seq,
            state=json.dumps({"n": seq + 1}),
            state_patch=None,
            cursor="second",
            status=SessionStatus.RUNNING,
            result=None,
            release=False,
            wait=None,
            wake_at=None,
            delivery_id=None,
            after_wake=False,
            lease_seconds=30,
            next_time_limit=None,
            step="first",
            events="[]",
            kind="snapshot",
            history_state=None,
            patch=None,
            step_events=None,
            records=records,
            record_keys=record_keys,
        )


def _version(conn: psycopg.Connection[Any], fingerprint: str) -> str | None:
    return agent_queries.register_agent_version(
        conn,
        "a",
        0,
        fingerprint=fingerprint,
        steps=["first"],
        checks=[],
        compensations=[],
        takes_over=[],
    )


def test_workers_announce_beat_and_retire(db: Database) -> None:
    with db.connection() as conn:
        agent_queries.announce_worker(
            conn, "host:1", agents=["a"], ttl=60, versions={"a": 0}, takes_over=[]
        )
        assert agent_queries.unserved_agents(conn, "host:2", ["a", "b"]) == ["b"]
        agent_queries.register_agent(conn, "a", steps=["first", "second"], checks=[])
        assert agent_queries.agent_known(conn, "a") and not agent_queries.agent_known(conn, "b")
        assert agent_queries.agent_names(conn) == ["a"]
        assert _version(conn, "f1") is None
        assert _version(conn, "f2") == "f1"  # announced before with another fingerprint
        assert agent_queries.unserved_versions(conn, "host:2", ["a@0"]) == []
        assert agent_queries.unserved_versions(conn, "host:1", ["a@0"]) == ["a"]
        assert blocked_queries.other_live_workers(conn, "host:2")[0].versions == {"a": 0}
        assert agent_queries.worker_heartbeat(conn, "host:1", ttl=60, problem=None)
        assert not agent_queries.worker_heartbeat(conn, "host:9", ttl=60, problem=None)
        assert agent_queries.worker_health(conn, seconds=600).live == 1
        agent_queries.retire_worker(conn, "host:1", "its consumer died")
        health = agent_queries.worker_health(conn, seconds=600)
        assert (health.live, health.unhealthy, health.problem) == (0, 1, "its consumer died")
        agent_queries.forget_dead_workers(conn)
        agent_queries.retire_worker(conn, "host:1", None)
        assert agent_queries.worker_health(conn, seconds=600).unhealthy == 0


def test_a_worker_whose_heartbeat_expired_is_dead_only_for_steps_begun_before(
    client: Client, db: Database
) -> None:
    """A host cut off and back claims before its heartbeat gets through: a
    step it began after its row expired proves it alive, so that lease is
    not a dead worker's (the partition test saw such claims taken over at
    once, their steps wasted); a step begun before the row expired is."""
    session_id = client.start("a", {"x": 1})
    with db.connection() as conn:
        agent_queries.announce_worker(
            conn, "host:1", agents=["a"], ttl=60, versions={"a": 0}, takes_over=[]
        )
        conn.execute("UPDATE workers SET expires_at = now() - interval '5 seconds'")
    _claim(db, session_id, owner="host:1:1")  # its step begins now, after the row expired

    def claim_elsewhere() -> Any:
        with db.connection() as conn:
            return step_ops.claim(
                conn,
                session_id,
                owner="host:2:1",
                versions=VERSIONS,
                starts=STARTS,
                lease_seconds=30,
            )

    assert claim_elsewhere() is None
    with db.connection() as conn:  # the step began before the heartbeat stopped
        conn.execute(
            "UPDATE sessions SET step_started_at = now() - interval '10 seconds' WHERE id = %s",
            (session_id,),
        )
    taken = claim_elsewhere()
    assert taken is not None and taken.status is SessionStatus.RUNNING
    with db.connection() as conn:
        event = conn.execute(
            "SELECT event_type, payload ->> 'previous_owner' AS previous FROM audit_events"
            " WHERE session_id = %s ORDER BY id DESC LIMIT 1",
            (session_id,),
        ).fetchone()
    assert event == {"event_type": "lease_recovered", "previous": "host:1:1"}


def test_a_claim_a_call_a_fenced_commit_and_the_leases(client: Client, db: Database) -> None:
    session_id = client.start("a", {"x": 1})
    epoch, seq = _claim(db, session_id)
    with db.connection() as conn:
        assert (
            step_ops.claim(
                conn,
                session_id,
                owner="host:2:1",
                versions=VERSIONS,
                starts=STARTS,
                lease_seconds=30,
            )
            is None
        )  # held: another claim finds nothing
        step_ops.start_step(conn, session_id, epoch, cursor="first", time_limit=None)
        token = wait_ops.create_callback(
            conn, session_id, epoch, token="t1", step_seq=seq + 1, call_index=0, topic="paid"
        )
        assert token == "t1"
        assert (
            wait_ops.create_callback(
                conn, session_id, epoch + 1, token="t2", step_seq=1, call_index=1, topic="x"
            )
            is None
        )
        call = tool_call_queries.claim_tool_call(
            conn,
            session_id,
            epoch,
            key="k1",
            step_seq=seq + 1,
            step="first",
            call_index=0,
            tool="charge",
            request=json.dumps({"args": [], "kwargs": {}}),
            compensation="refund",
            args_hash="h",
        )
        assert call.owned and call.status is ToolCallStatus.STARTED
        assert tool_call_queries.complete_tool_call(
            conn, session_id, "k1", epoch, json.dumps({"ok": 1})
        )
        assert not tool_call_queries.fail_tool_call(
            conn, session_id, "k1", epoch + 1, {"type": "E"}
        )
        beyond = step_ops.recorded_beyond(conn, session_id, seq + 1, 0)
        assert [(r.idempotency_key, r.tool, r.status) for r in beyond] == [
            ("k1", "charge", "completed")
        ]
    assert _commit(db, session_id, epoch, seq) == seq + 1
    assert _commit(db, session_id, epoch, seq) is None  # committed already: fenced
    assert _commit(db, session_id, epoch, seq + 1, records="{}", record_keys=[]) == seq + 2
    with db.connection() as conn:
        assert client.state(session_id) == {"n": seq + 2}
        renewal = step_ops.renew_lease(conn, session_id, epoch, lease_seconds=30)
        assert renewal is not None and renewal.renewed and renewal.status is SessionStatus.RUNNING
        assert lease_queries.renew_leases(conn, [(session_id, epoch)], lease_seconds=30) == []
        lost = lease_queries.renew_leases(conn, [(session_id, epoch - 1)], lease_seconds=30)
        assert [(r.id, r.held_epoch, r.epoch) for r in lost] == [(session_id, epoch - 1, epoch)]
        assert [r.epoch for r in lease_queries.not_renewed_now(conn, [(session_id, 0)])] == [epoch]
        hung = step_ops.hung_sessions(conn, after_seconds=0.0, limit=10)
        assert [h.session_id for h in hung] == [session_id]
        assert step_ops.release_lease(conn, session_id, epoch, reason="stopping")
        assert not step_ops.release_lease(conn, session_id, epoch, reason="stopping")
        assert session_queries.get(conn, session_id).status == "pending"  # type: ignore[union-attr]


def test_a_retry_a_saga_and_the_dead_letter(client: Client, db: Database) -> None:
    session_id = client.start("a", {})
    epoch, seq = _claim(db, session_id)
    with db.connection() as conn:
        tool_call_queries.claim_tool_call(
            conn,
            session_id,
            epoch,
            key="k1",
            step_seq=seq + 1,
            step="first",
            call_index=0,
            tool="charge",
            request="{}",
            compensation="refund",
            args_hash="h",
        )
        tool_call_queries.complete_tool_call(conn, session_id, "k1", epoch, "{}")
        retry_at = failure_queries.schedule_retry(
            conn, session_id, epoch, attempts=1, error=ERROR, delay=0.0, step="first"
        )
        assert isinstance(retry_at, datetime)
        assert failure_queries.wake_due_retries(conn, limit=10) == [(session_id, "normal")]
    epoch, _ = _claim(db, session_id)
    with db.connection() as conn:
        assert failure_queries.start_compensation(
            conn, session_id, epoch, attempts=2, error=ERROR, step="first"
        )
        assert failure_queries.has_pending_compensations(conn, session_id)
        [undo] = failure_queries.pending_compensations(conn, session_id)
        assert (undo.idempotency_key, undo.compensation) == ("k1", "refund")
        assert failure_queries.claim_compensation(conn, "k1", epoch)
        assert failure_queries.compensation_failed(
            conn, "k1", epoch, give_up=False, error=ERROR, delay=0.0
        )
        assert failure_queries.wake_due_compensations(conn, limit=10) == [(session_id, "normal")]
    epoch, _ = _claim(db, session_id)
    with db.connection() as conn:
        assert not failure_queries.compensations_ran(conn, session_id)
        assert failure_queries.claim_compensation(conn, "k1", epoch)
        assert not failure_queries.compensation_done(conn, "k1", epoch - 1)
        assert failure_queries.compensation_done(conn, "k1", epoch)
        assert failure_queries.compensations_ran(conn, session_id)
        assert not failure_queries.has_pending_compensations(conn, session_id)
        letter = failure_queries.fail_session(
            conn,
            session_id,
            epoch,
            error=ERROR,
            attempts=2,
            compensation="completed",
            compensation_error=None,
            alert_kind="dead_letter",
            alerts_enabled=False,
        )
        assert letter is not None
    dead = client.dead_letter(letter.dead_letter_id)
    assert (dead.status, dead.step, dead.compensation) == ("open", "second", "completed")


def test_parking_taking_over_and_who_else_could_run_it(client: Client, db: Database) -> None:
    parked, other, older = (client.start(agent, {}) for agent in ("a", "b", "a"))
    epoch, _ = _claim(db, parked)
    with db.connection() as conn:
        reason = {"kind": "tool_call_diverged", "message": "another tool"}
        assert blocked_queries.block(
            conn, parked, epoch, reason=reason, step="first", alerts_enabled=False
        )
        blocked = blocked_queries.blocked_reason(conn, parked)
        assert blocked is not None and blocked.status == "blocked"
        assert blocked.blocked_reason == {**reason, "from": "running"}
        elsewhere = step_ops.claimable_elsewhere(conn, other, versions=VERSIONS, takes_over=[])
        assert elsewhere is not None and (elsewhere.agent, elsewhere.served) == ("b", False)
        assert step_ops.claimable_of_agents(
            conn, ["a"], versions=VERSIONS, takes_over=[], worker="host:1", limit=10
        ) == [older]
        conn.execute(
            "UPDATE sessions SET cursor = 'first', agent_version = 1 WHERE id = %s", (older,)
        )
        taken = step_ops.take_over(
            conn,
            older,
            owner="host:1:1",
            versions=json.dumps({"a": 2}),
            starts=json.dumps({"a": {"code": "c0de"}}),
            takes_over=["a@1"],
            lease_seconds=30,
        )
        assert taken is not None and (taken.version, taken.cursor) == (1, "first")
        migrated = step_ops.migrate_session(
            conn,
            older,
            taken.epoch,
            state=json.dumps({"migrated": True}),
            cursor="first_v2",
            from_version=1,
            to_version=2,
            from_step="first",
            owner="host:1:1",
        )
        assert migrated is not None and migrated.cursor == "first_v2"
        positions = blocked_queries.waiting_positions(conn, ["a", "b"])
        assert [(p.agent, p.step, p.n) for p in positions] == [("b", None, 1)]
        assert step_ops.orphaned_sessions(conn) == []


def test_a_poll_sleeps_again_and_a_signal_wakes_it(client: Client, db: Database) -> None:
    session_id = client.start("a", {})
    epoch, _ = _claim(db, session_id)
    later = datetime.now(UTC) + timedelta(hours=1)
    with db.connection() as conn:
        conn.execute(
            "UPDATE sessions SET wait = %s WHERE id = %s",
            (json.dumps({"signals": ["go"], "poll": {"check": "c"}}), session_id),
        )
        assert wait_ops.resuspend_after_poll(conn, session_id, epoch, wake_at=later)
        assert not wait_ops.resuspend_after_poll(conn, session_id, epoch, wake_at=later)
    client.signal(session_id, "go", {"ok": True})  # stored, and it wakes the session
    with db.connection() as conn:
        [delivery] = conn.execute(
            "SELECT id FROM deliveries WHERE session_id = %s", (session_id,)
        ).fetchall()
        age = wait_ops.delivery_age(conn, int(str(delivery["id"])))
        assert age is not None and age.kind == "signal" and age.seconds >= 0
        assert wait_ops.delivery_age(conn, -1) is None
        assert wait_ops.wake_from_deliveries(conn, session_id) is None  # woken already
        assert wait_ops.wake_due(conn, limit=10) == []
        assert session_queries.get(conn, session_id).status == "pending"  # type: ignore[union-attr]
