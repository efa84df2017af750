"""Named SQL for failures: retries, saga compensations, dead letters, alerts.

Like the step commit, each transition is one statement fenced by the lease
epoch, so a worker that lost its session cannot schedule a retry, run a
compensation or write a dead letter for it. The typed functions follow the
statements; a fenced one answers False (or None) when the epoch moved on.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from resumable._internal import serialization
from resumable.models import rows
from resumable.priorities import Routed


@dataclass(frozen=True)
class PendingCompensation:
    """A row of PENDING_COMPENSATIONS: one completed tool call still to undo."""

    idempotency_key: str
    tool: str
    step: str
    step_seq: int
    call_index: int
    compensation: str
    request: Any
    response: Any
    compensation_attempts: int


@dataclass(frozen=True)
class DeadLettered:
    """A row of FAIL_SESSION: the dead letter the failure opened."""

    dead_letter_id: int


# A transient failure: release the session until its next attempt. The epoch
# moves on so a step still running past its time limit cannot commit.
SCHEDULE_RETRY = """
WITH s AS (
    UPDATE sessions SET
        status = 'retrying',
        attempts = %(attempts)s,
        error = %(error)s::jsonb,
        wake_at = now() + make_interval(secs => %(delay)s),
        lease_epoch = lease_epoch + 1,
        lease_owner = NULL,
        lease_expires_at = NULL,
        step_started_at = NULL,
        step_deadline = NULL,
        updated_at = now()
    WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status = 'running'
    RETURNING id, step_seq, wake_at
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, %(step)s, %(event)s,
           %(error)s::jsonb || jsonb_build_object('attempt', %(attempts)s::int,
                                                  'delay', %(delay)s::float8,
                                                  'retry_at', wake_at)
    FROM s
)
SELECT wake_at FROM s
"""

# Failed for good with compensations to run: the worker keeps its lease and
# runs them; the original error stays on the session for the dead letter.
START_COMPENSATION = """
WITH s AS (
    UPDATE sessions SET status = 'compensating', attempts = %(attempts)s,
                        error = %(error)s::jsonb, step_started_at = NULL, step_deadline = NULL,
                        updated_at = now()
    WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status = 'running'
    RETURNING id, step_seq
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, %(step)s, 'compensation_started', %(error)s::jsonb FROM s
)
SELECT id FROM s
"""

# What is left to undo, newest call first.
PENDING_COMPENSATIONS = """
SELECT idempotency_key, tool, step, step_seq, call_index, compensation, request, response,
       compensation_attempts
FROM tool_execution_cache
WHERE session_id = %(id)s AND status = 'completed' AND compensation IS NOT NULL
  AND coalesce(compensation_status, 'pending') <> 'completed'
ORDER BY step_seq DESC, call_index DESC
"""

# Before a compensation runs: only the worker holding the current epoch may
# start it (a worker that lost the saga cannot start another undo), and the
# call is marked as started (a crash now means it runs again, with its key).
CLAIM_COMPENSATION = """
UPDATE tool_execution_cache AS t SET compensation_status = 'started'
FROM sessions s
WHERE t.idempotency_key = %(key)s AND s.id = t.session_id
  AND s.lease_epoch = %(epoch)s AND s.status = 'compensating' AND s.lease_owner IS NOT NULL
  AND coalesce(t.compensation_status, 'pending') <> 'completed'
RETURNING t.idempotency_key
"""

COMPENSATION_DONE = """
WITH t AS (
    UPDATE tool_execution_cache AS t SET
        compensation_status = 'completed',
        compensation_attempts = t.compensation_attempts + 1,
        compensation_error = NULL,
        compensated_at = now()
    FROM sessions s
    WHERE t.idempotency_key = %(key)s AND s.id = t.session_id
      AND s.lease_epoch = %(epoch)s AND s.status = 'compensating' AND s.lease_owner IS NOT NULL
    RETURNING t.session_id, t.step_seq, t.step, t.tool, t.compensation
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT session_id, step_seq, step, 'compensation_completed',
           jsonb_build_object('tool', tool, 'compensation', compensation)
    FROM t
)
SELECT session_id FROM t
"""

# A compensation attempt failed: count it and, unless it is the last one,
# release the session until the next attempt (status stays 'compensating').
COMPENSATION_FAILED = """
WITH t AS (
    UPDATE tool_execution_cache AS t SET
        compensation_status = CASE WHEN %(give_up)s THEN 'failed' ELSE 'pending' END,
        compensation_attempts = t.compensation_attempts + 1,
        compensation_error = %(error)s::jsonb
    FROM sessions s
    WHERE t.idempotency_key = %(key)s AND s.id = t.session_id
      AND s.lease_epoch = %(epoch)s AND s.status = 'compensating' AND s.lease_owner IS NOT NULL
    RETURNING t.session_id, t.step_seq, t.step, t.compensation, t.compensation_attempts
), s AS (
    UPDATE sessions SET
        wake_at = now() + make_interval(secs => %(delay)s),
        lease_owner = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    FROM t
    WHERE sessions.id = t.session_id AND NOT %(give_up)s
    RETURNING sessions.id
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT session_id, step_seq, step,
           CASE WHEN %(give_up)s THEN 'compensation_gave_up'
                ELSE 'compensation_retry_scheduled' END,
           %(error)s::jsonb || jsonb_build_object('compensation', compensation,
                                                  'attempt', compensation_attempts)
    FROM t
)
SELECT session_id FROM t
"""

# The end of the road: 'failed', an open dead letter and, when an operator
# webhook is configured, an alert in the outbox, all in one transaction.
FAIL_SESSION = """
WITH s AS (
    UPDATE sessions SET
        status = 'failed',
        error = %(error)s::jsonb,
        attempts = %(attempts)s,
        lease_owner = NULL,
        lease_expires_at = NULL,
        wake_at = NULL,
        step_started_at = NULL,
        step_deadline = NULL,
        finished_at = now(),
        updated_at = now()
    WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status IN ('running', 'compensating')
      AND lease_owner IS NOT NULL
    RETURNING id, agent, step_seq
), d AS (
    INSERT INTO dead_letters (session_id, agent, step, error_code, error_type, error_message,
                              traceback, attempts, compensation, compensation_error, status)
    SELECT id, agent, %(step)s, %(code)s, %(type)s, %(message)s, %(traceback)s,
           %(attempts)s, %(compensation)s, %(compensation_error)s::jsonb, 'open'
    FROM s
    RETURNING id, session_id, agent
), a AS (
    INSERT INTO alerts (kind, session_id, payload, status)
    SELECT %(alert_kind)s, d.session_id,
           jsonb_build_object('kind', %(alert_kind)s::text, 'dead_letter_id', d.id,
                              'session_id', d.session_id, 'agent', d.agent,
                              'step', %(step)s::text, 'error_type', %(type)s::text,
                              'error_message', %(message)s::text,
                              'compensation', %(compensation)s::text,
                              'compensation_error', %(compensation_error)s::jsonb),
           'pending'
    FROM d WHERE %(alerts_enabled)s
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT s.id, s.step_seq, %(step)s, 'session_failed',
           %(error)s::jsonb || jsonb_build_object('dead_letter_id', d.id,
                                                  'compensation', %(compensation)s::text)
    FROM s, d
)
SELECT d.id AS dead_letter_id FROM d
"""

# -- the scheduler's side -------------------------------------------------------------

# Retries whose time has come become pending again (a delayed queue message
# usually got there first; this is the durable path when Redis lost it).
WAKE_DUE_RETRIES = """
WITH due AS (
    SELECT id FROM sessions
    WHERE status = 'retrying' AND wake_at <= now()
    ORDER BY wake_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE sessions SET status = 'pending', wake_at = NULL, updated_at = now()
FROM due WHERE sessions.id = due.id
RETURNING sessions.id, sessions.priority
"""

# Compensations whose next attempt is due.
WAKE_DUE_COMPENSATIONS = """
WITH due AS (
    SELECT id FROM sessions
    WHERE status = 'compensating' AND lease_owner IS NULL AND wake_at <= now()
    ORDER BY wake_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE sessions SET wake_at = NULL, updated_at = now()
FROM due WHERE sessions.id = due.id
RETURNING sessions.id, sessions.priority
"""

# Whether any compensation of the session ran: a saga with nothing left to do
# ends `completed` if it undid something, `none` if there was nothing to undo
# (an operator failed a blocked session that had made no compensable call).
COMPENSATIONS_RAN = """
SELECT 1 FROM tool_execution_cache
WHERE session_id = %(id)s AND compensation_status = 'completed'
LIMIT 1
"""


# -- the typed functions ------------------------------------------------------------


def schedule_retry(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    attempts: int,
    error: dict[str, Any],
    delay: float,
    step: str | None,
    event: str = "retry_scheduled",
) -> datetime | None:
    """Release the session until its next attempt; when that is, or None if
    this epoch no longer holds it. `event` names the audit event: a wait for
    a rate limit's turn (``rate_limited``) takes the same path, its
    `attempts` unchanged."""
    params = {
        "id": session_id,
        "epoch": epoch,
        "attempts": attempts,
        "error": serialization.dumps(error, "error"),
        "delay": delay,
        "step": step,
        "event": event,
    }
    retry_at: datetime | None = rows.value(conn, SCHEDULE_RETRY, params)
    return retry_at


def start_compensation(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    attempts: int,
    error: dict[str, Any],
    step: str | None,
) -> bool:
    params = {
        "id": session_id,
        "epoch": epoch,
        "attempts": attempts,
        "error": serialization.dumps(error, "error"),
        "step": step,
    }
    return rows.found(conn, START_COMPENSATION, params)


def has_pending_compensations(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> bool:
    return rows.found(conn, PENDING_COMPENSATIONS, {"id": session_id})


def pending_compensations(
    conn: psycopg.Connection[Any], session_id: uuid.UUID
) -> list[PendingCompensation]:
    return rows.every(conn, PendingCompensation, PENDING_COMPENSATIONS, {"id": session_id})


def claim_compensation(conn: psycopg.Connection[Any], key: str, epoch: int) -> bool:
    """Mark the call's compensation started; False if the epoch moved on."""
    return rows.found(conn, CLAIM_COMPENSATION, {"key": key, "epoch": epoch})


def compensation_done(conn: psycopg.Connection[Any], key: str, epoch: int) -> bool:
    return rows.found(conn, COMPENSATION_DONE, {"key": key, "epoch": epoch})


def compensation_failed(
    conn: psycopg.Connection[Any],
    key: str,
    epoch: int,
    *,
    give_up: bool,
    error: dict[str, Any],
    delay: float,
) -> bool:
    params = {
        "key": key,
        "epoch": epoch,
        "give_up": give_up,
        "error": serialization.dumps(error, "error"),
        "delay": delay,
    }
    return rows.found(conn, COMPENSATION_FAILED, params)


def fail_session(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    error: dict[str, Any],
    attempts: int,
    compensation: str,
    compensation_error: dict[str, Any] | None,
    alert_kind: str,
    alerts_enabled: bool,
) -> DeadLettered | None:
    """End the session `failed` with an open dead letter (its step, code,
    type, message and traceback taken from `error`); None if this epoch no
    longer holds it."""
    params = {
        "id": session_id,
        "epoch": epoch,
        "error": serialization.dumps(error, "error"),
        "attempts": attempts,
        "step": error.get("step"),
        "code": error.get("code", "step_failed"),
        "type": error.get("type", "Exception"),
        "message": error.get("message", ""),
        "traceback": error.get("traceback"),
        "compensation": compensation,
        "compensation_error": serialization.dumps(compensation_error)
        if compensation_error
        else None,
        "alert_kind": alert_kind,
        "alerts_enabled": alerts_enabled,
    }
    return rows.one(conn, DeadLettered, FAIL_SESSION, params)


def wake_due_retries(conn: psycopg.Connection[Any], *, limit: int) -> list[Routed]:
    """The retries due, made pending, each with its lane."""
    return rows.routes(conn, WAKE_DUE_RETRIES, {"limit": limit})


def wake_due_compensations(conn: psycopg.Connection[Any], *, limit: int) -> list[Routed]:
    """The compensations due, each with its lane."""
    return rows.routes(conn, WAKE_DUE_COMPENSATIONS, {"limit": limit})


def compensations_ran(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> bool:
    return rows.found(conn, COMPENSATIONS_RAN, {"id": session_id})
