"""Blocked sessions: parking a session whose replay diverged, and the
operator's way out (resume, accept the new behaviour, fail).

A blocked session is in no claimable or reconcilable status, so no worker
runs it and no compensation starts until an operator acts. Its reason (a
JSON object: ``kind``, ``step``, ``message``, what was recorded, what the
code asked for, the status to go back to as ``from``) is kept on the session
and in the ``session_blocked`` audit event.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from resumable._internal import serialization
from resumable.models import rows


@dataclass(frozen=True)
class WaitingPosition:
    """A row of WAITING_POSITIONS."""

    agent: str
    step: str | None
    poll_check: str | None
    n: int
    version: int = 0


# Park a held session (running or compensating) as blocked, releasing its
# lease, with its audit event and, when an operator webhook is configured, an
# alert in the outbox: one transaction. The wake and wait stay, so a resumed
# session replays the same step with the same wake.
BLOCK_SESSION = """
WITH s AS (
    UPDATE sessions SET
        status = 'blocked',
        blocked_reason = %(reason)s::jsonb || jsonb_build_object('from', sessions.status),
        lease_owner = NULL,
        lease_expires_at = NULL,
        wake_at = NULL,
        step_started_at = NULL,
        step_deadline = NULL,
        updated_at = now()
    WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status IN ('running', 'compensating')
      AND lease_owner IS NOT NULL
    RETURNING id, agent, step_seq, blocked_reason
), a AS (
    INSERT INTO alerts (kind, session_id, payload, status)
    SELECT 'session_blocked', s.id,
           jsonb_build_object('kind', 'session_blocked', 'session_id', s.id, 'agent', s.agent,
                              'reason', s.blocked_reason),
           'pending'
    FROM s WHERE %(alerts_enabled)s
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT s.id, s.step_seq, %(step)s, 'session_blocked', s.blocked_reason FROM s
)
SELECT id FROM s
"""

# The reason a session is blocked (no row: no such session).
BLOCKED_REASON = "SELECT status, blocked_reason FROM sessions WHERE id = %(id)s"
# The same, holding the session's row until the transaction ends: an accept
# checks its confirmation against the record it then changes.
LOCK_BLOCKED_REASON = BLOCKED_REASON + " FOR UPDATE"

# The recorded calls an accept would supersede (those of the diverged step
# from the divergence point on), with what they asked and answered.
RECORDED_FROM = """
SELECT idempotency_key, step_seq, step, call_index, tool, status, request, response, error,
       compensation
FROM tool_execution_cache
WHERE session_id = %(id)s AND step_seq = %(step_seq)s AND call_index >= %(call_index)s
  AND superseded_at IS NULL
ORDER BY call_index, created_at
"""

# Resume a blocked session: back to where it was parked from (a compensating
# session continues its saga, any other runs its step again).
RESUME_BLOCKED = """
WITH s AS (
    UPDATE sessions SET
        status = CASE WHEN blocked_reason->>'from' = 'compensating'
                      THEN 'compensating' ELSE 'pending' END,
        blocked_reason = NULL,
        updated_at = now()
    WHERE id = %(id)s AND status = 'blocked'
    RETURNING id, step_seq, cursor, status
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, %(event)s,
           jsonb_build_object('by', %(actor)s::text, 'reason', %(reason)s::text,
                              'blocked', %(blocked)s::jsonb,
                              'superseded', %(superseded)s::jsonb)
    FROM s
)
SELECT id, status FROM s
"""

# Accepting new behaviour: the recorded calls of the diverged step from the
# divergence point on are superseded (kept, for the audit trail, but no longer
# replayed or compared), so the step runs again with the calls it now makes.
SUPERSEDE_CALLS = """
UPDATE tool_execution_cache SET superseded_at = now(), superseded_by = %(actor)s
WHERE session_id = %(id)s AND step_seq = %(step_seq)s AND call_index >= %(call_index)s
  AND superseded_at IS NULL
RETURNING idempotency_key, call_index, tool, status, args_hash
"""

# Fail a blocked session: it becomes compensating with the error, so a worker
# runs its saga (if any) and dead-letters it, as after any permanent failure.
FAIL_BLOCKED = """
WITH s AS (
    UPDATE sessions SET
        status = 'compensating',
        -- Parked mid-saga: the saga's own cause stays the error.
        error = CASE WHEN blocked_reason->>'from' = 'compensating' AND error IS NOT NULL
                     THEN error ELSE %(error)s::jsonb END,
        blocked_reason = NULL,
        lease_owner = NULL,
        lease_expires_at = NULL,
        wake_at = NULL,
        updated_at = now()
    WHERE id = %(id)s AND status = 'blocked'
    RETURNING id, step_seq, cursor, status
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'blocked_failed',
           jsonb_build_object('by', %(actor)s::text, 'reason', %(reason)s::text,
                              'blocked', %(blocked)s::jsonb)
    FROM s
)
SELECT id, status FROM s
"""

# Waiting sessions of these agents, counted by the step they wait at and the
# poll check they wait on: a starting worker compares them with its code.
WAITING_POSITIONS = """
SELECT agent, agent_version AS version, cursor AS step, wait->'poll'->>'check' AS poll_check,
       count(*)::int AS n
FROM sessions
WHERE agent = ANY(%(agents)s) AND status IN ('pending', 'suspended', 'retrying')
GROUP BY agent, agent_version, cursor, wait->'poll'->>'check'
ORDER BY agent, agent_version, cursor
"""

# What the other live workers serve: the version of each agent they load and
# the older versions they migrate.
OTHER_LIVE_WORKERS = """
SELECT versions, takes_over FROM workers WHERE expires_at > now() AND id <> %(id)s
"""


# -- the typed functions ------------------------------------------------------------


def block(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    reason: dict[str, Any],
    step: str | None,
    alerts_enabled: bool,
) -> bool:
    """Park the held session as blocked; False if this epoch no longer holds it."""
    params = {
        "id": session_id,
        "epoch": epoch,
        "reason": serialization.dumps(reason, "blocked reason"),
        "step": step,
        "alerts_enabled": alerts_enabled,
    }
    return rows.found(conn, BLOCK_SESSION, params)


@dataclass(frozen=True)
class BlockedReason:
    """A row of BLOCKED_REASON."""

    status: str
    blocked_reason: dict[str, Any] | None


def blocked_reason(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, lock: bool = False
) -> BlockedReason | None:
    """The session's status and why it is blocked; None if there is no such
    session. `lock`: hold its row until the transaction ends."""
    query = LOCK_BLOCKED_REASON if lock else BLOCKED_REASON
    return rows.one(conn, BlockedReason, query, {"id": session_id})


@dataclass(frozen=True)
class RecordedCall:
    """A row of RECORDED_FROM: a live recorded call an accept would supersede."""

    idempotency_key: str
    step_seq: int
    step: str
    call_index: int
    tool: str
    status: str
    request: Any
    response: Any
    error: dict[str, Any] | None
    compensation: str | None


def recorded_from(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, step_seq: int, call_index: int
) -> list[RecordedCall]:
    """The step's live recorded calls from position `call_index` on, in order."""
    params = {"id": session_id, "step_seq": step_seq, "call_index": call_index}
    return rows.every(conn, RecordedCall, RECORDED_FROM, params)


def resume(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    *,
    event: str,
    actor: str,
    reason: str | None,
    blocked: dict[str, Any],
    superseded: list[dict[str, Any]],
) -> str | None:
    """Release the blocked session with the audit event `event`; the status
    it went back to, or None if it was no longer blocked."""
    params = {
        "id": session_id,
        "event": event,
        "actor": actor,
        "reason": reason,
        "blocked": serialization.dumps(blocked),
        "superseded": serialization.dumps(superseded),
    }
    row = rows.one(conn, _Reopened, RESUME_BLOCKED, params)
    return None if row is None else row.status


@dataclass(frozen=True)
class SupersededCall:
    """A row of SUPERSEDE_CALLS: a recorded call no longer replayed."""

    idempotency_key: str
    call_index: int
    tool: str
    status: str
    args_hash: str | None


def supersede_calls(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    *,
    actor: str,
    step_seq: int,
    call_index: int,
) -> list[SupersededCall]:
    params = {"id": session_id, "actor": actor, "step_seq": step_seq, "call_index": call_index}
    return rows.every(conn, SupersededCall, SUPERSEDE_CALLS, params)


def fail(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    *,
    actor: str,
    reason: str | None,
    blocked: dict[str, Any],
    error: dict[str, Any],
) -> str | None:
    """Fail the blocked session into its saga; its new status, or None if it
    was no longer blocked."""
    params = {
        "id": session_id,
        "actor": actor,
        "reason": reason,
        "blocked": serialization.dumps(blocked),
        "error": serialization.dumps(error),
    }
    row = rows.one(conn, _Reopened, FAIL_BLOCKED, params)
    return None if row is None else row.status


@dataclass(frozen=True)
class _Reopened:
    """A row of RESUME_BLOCKED or FAIL_BLOCKED."""

    id: uuid.UUID
    status: str


def waiting_positions(conn: psycopg.Connection[Any], agents: list[str]) -> list[WaitingPosition]:
    return rows.every(conn, WaitingPosition, WAITING_POSITIONS, {"agents": agents})


@dataclass(frozen=True)
class LiveWorker:
    """A row of OTHER_LIVE_WORKERS."""

    versions: dict[str, int] | None
    takes_over: list[str] | None


def other_live_workers(conn: psycopg.Connection[Any], worker_id: str | None) -> list[LiveWorker]:
    return rows.every(conn, LiveWorker, OTHER_LIVE_WORKERS, {"id": worker_id})
