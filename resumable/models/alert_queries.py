"""The alert outbox: operator alerts written with their dead letter, POSTed
later; and the lingering sessions an operator is alerted about."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from resumable.models import rows
from resumable.models.agent_queries import AGENT_SERVED

# Alerts to POST: taken for a minute (so two schedulers do not both send one),
# then marked sent, or put back with a later attempt time.
#
# A failed child's dead-letter alert is held back while its parent waits on
# it with ``on_failure="inform"``: the parent will be woken with the failure
# and handle it, and the wake cancels the alert in the same commit that
# discards the dead letter (``coordination_queries.WAKE_PARENT``). One
# snapshot decides, so no alert is taken between the child's failure and its
# parent's wake. Once the parent stops waiting on it otherwise (a timeout,
# another condition, a cancel) or the child is retried, the alert goes out.
HELD_FOR_PARENT = """
a.kind = 'dead_letter' AND EXISTS (
    SELECT 1 FROM sessions c JOIN sessions p ON p.id = c.parent_id
    WHERE c.id = a.session_id AND c.status = 'failed' AND p.status = 'suspended'
      AND p.wait -> 'children' ->> 'on_failure' = 'inform'
      AND p.wait -> 'children' -> 'ids' ? c.id::text)
"""

TAKE_DUE_ALERTS = f"""
UPDATE alerts SET next_attempt_at = now() + interval '60 seconds', attempts = attempts + 1
WHERE id IN (
    SELECT a.id FROM alerts a
    WHERE a.status = 'pending' AND a.next_attempt_at <= now() AND NOT ({HELD_FOR_PARENT})
    ORDER BY a.id LIMIT %(limit)s FOR UPDATE OF a SKIP LOCKED
)
RETURNING id, kind, session_id, payload, attempts, created_at
"""


ALERT_SENT = "UPDATE alerts SET status = 'sent', sent_at = now() WHERE id = %(id)s"

# A cancelled alert (its dead letter handled while it was being sent) stays so.
ALERT_FAILED = """
UPDATE alerts SET
    status = CASE WHEN %(give_up)s THEN 'failed' ELSE 'pending' END,
    last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => %(delay)s)
WHERE id = %(id)s AND status = 'pending'
"""


# Lingering sessions, by condition: what an operator is alerted about once per
# session and condition, and again ("resolved") when it clears.
#   overdue:  suspended past its timer or deadline (the scheduler missed it)
#   unserved: waiting for a worker that loads its agent (none alive does)
#   hung:     running a step past its time limit, or long without one
#   blocked:  parked for an operator (a reminder; the first alert went out when parked)
# Every branch reads live sessions through a status-led or partial index.
_LINGERING_NOW = f"""
SELECT id AS session_id, agent, 'overdue' AS condition,
       jsonb_build_object('wake_at', wake_at, 'step', cursor) AS detail
FROM sessions WHERE status = 'suspended' AND wake_at < now() - make_interval(secs => %(overdue)s)
UNION ALL
SELECT id, agent, 'unserved', jsonb_build_object('status', status, 'since', updated_at)
FROM sessions
WHERE status IN ('pending', 'retrying', 'running', 'compensating')
  AND updated_at < now() - make_interval(secs => %(unserved)s)
  AND NOT {AGENT_SERVED.format(agent="sessions.agent")}
UNION ALL
SELECT id, agent, 'hung',
       jsonb_build_object('step', cursor, 'step_started_at', step_started_at,
                          'step_deadline', step_deadline, 'lease_owner', lease_owner)
FROM sessions
WHERE status = 'running' AND step_started_at IS NOT NULL
  AND (step_deadline < now() OR step_started_at < now() - make_interval(secs => %(hung)s))
UNION ALL
SELECT id, agent, 'blocked',
       jsonb_build_object('since', updated_at, 'reason', blocked_reason -> 'message')
FROM sessions WHERE status = 'blocked' AND updated_at < now() - make_interval(secs => %(blocked)s)
"""

# One statement, safe from several schedulers at once: a condition opens once
# (the unique index on open conditions), resolves once (the UPDATE re-checks
# `resolved_at IS NULL` after waiting for a concurrent one), and each opening
# and resolution writes its alert in the same transaction (when alerts are on).
SYNC_LINGERING = f"""
WITH now_lingering AS ({_LINGERING_NOW}),
opened AS (
    INSERT INTO session_conditions (session_id, condition, detail)
    SELECT session_id, condition, detail || jsonb_build_object('agent', agent)
    FROM now_lingering
    ON CONFLICT (session_id, condition) WHERE resolved_at IS NULL DO NOTHING
    RETURNING session_id, condition, detail, opened_at
), resolved AS (
    UPDATE session_conditions c SET resolved_at = now()
    WHERE c.resolved_at IS NULL AND NOT EXISTS (
        SELECT 1 FROM now_lingering n
        WHERE n.session_id = c.session_id AND n.condition = c.condition)
    RETURNING c.session_id, c.condition, c.detail, c.opened_at, c.resolved_at
), changed AS (
    SELECT 'session_lingering' AS kind, session_id, condition, detail, opened_at,
           NULL::timestamptz AS resolved_at
    FROM opened
    UNION ALL
    SELECT 'session_lingering_resolved', session_id, condition, detail, opened_at, resolved_at
    FROM resolved
), alerted AS (
    INSERT INTO alerts (kind, session_id, payload, status)
    SELECT kind, session_id,
           jsonb_build_object('kind', kind, 'condition', condition, 'session_id', session_id,
                              'agent', detail ->> 'agent', 'detail', detail,
                              'opened_at', opened_at, 'resolved_at', resolved_at),
           'pending'
    FROM changed WHERE %(alerts_enabled)s
)
SELECT kind, session_id, condition, detail ->> 'agent' AS agent FROM changed
"""


# -- the typed functions ------------------------------------------------------------


@dataclass(frozen=True)
class DueAlert:
    """A row of TAKE_DUE_ALERTS: an alert to POST (`attempts` counts this one)."""

    id: int
    kind: str
    session_id: uuid.UUID | None
    payload: dict[str, Any]
    attempts: int
    created_at: datetime


def take_due_alerts(conn: psycopg.Connection[Any], *, limit: int) -> list[DueAlert]:
    return rows.every(conn, DueAlert, TAKE_DUE_ALERTS, {"limit": limit})


def alert_sent(conn: psycopg.Connection[Any], alert_id: int) -> None:
    rows.run(conn, ALERT_SENT, {"id": alert_id})


def alert_failed(
    conn: psycopg.Connection[Any], alert_id: int, *, give_up: bool, error: str, delay: float
) -> None:
    """Put the alert back until `delay` seconds from now, or give up on it."""
    params = {"id": alert_id, "give_up": give_up, "error": error, "delay": delay}
    rows.run(conn, ALERT_FAILED, params)


@dataclass(frozen=True)
class LingeringChange:
    """A row of SYNC_LINGERING: a condition opened (`session_lingering`) or
    resolved (`session_lingering_resolved`)."""

    kind: str
    session_id: uuid.UUID
    condition: str
    agent: str | None


def sync_lingering(
    conn: psycopg.Connection[Any],
    *,
    overdue: float,
    unserved: float,
    hung: float,
    blocked: float,
    alerts_enabled: bool,
) -> list[LingeringChange]:
    """Open and resolve the lingering conditions (each threshold in seconds)."""
    params = {
        "overdue": overdue,
        "unserved": unserved,
        "hung": hung,
        "blocked": blocked,
        "alerts_enabled": alerts_enabled,
    }
    return rows.every(conn, LingeringChange, SYNC_LINGERING, params)
