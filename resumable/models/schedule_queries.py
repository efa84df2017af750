"""Schedules (``resumable/schedules.py``): their rows, and the statements
the scheduler runs to start their due sessions.

A due schedule is locked ``FOR UPDATE SKIP LOCKED`` for the transaction that
starts its sessions and moves ``next_due_at`` on, so two schedulers never
handle one due time; the session's idempotency key (``schedules.due_key``)
would refuse a second start anyway. Each statement's typed function follows
the statements.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from resumable.models import columns, rows
from resumable.models.metrics_queries import TERMINAL
from resumable.models.records import ScheduleRecord

SCHEDULE_COLUMNS = ", ".join(columns.SCHEDULE_FIELDS)

# A schedule defined in code, as a starting worker records it: new, or
# changed since (its next due time then follows the new definition); one
# defined at run time under that name is left alone (and named back, so the
# worker can warn). Paused stays paused.
SYNC_FROM_CODE = f"""
INSERT INTO schedules (name, agent, cron, every_seconds, timezone, input, catch_up, overlap,
                       source, agent_version, anchor_at, next_due_at, created_by)
VALUES (%(name)s, %(agent)s, %(cron)s, %(every_seconds)s, %(timezone)s, %(input)s::jsonb,
        %(catch_up)s, %(overlap)s, 'code', %(agent_version)s, %(anchor_at)s, %(next_due_at)s,
        %(created_by)s)
ON CONFLICT (name) DO UPDATE SET
    agent = EXCLUDED.agent, cron = EXCLUDED.cron, every_seconds = EXCLUDED.every_seconds,
    timezone = EXCLUDED.timezone, input = EXCLUDED.input, catch_up = EXCLUDED.catch_up,
    overlap = EXCLUDED.overlap, agent_version = EXCLUDED.agent_version,
    anchor_at = EXCLUDED.anchor_at, next_due_at = EXCLUDED.next_due_at, queued_due_at = NULL,
    updated_at = now()
WHERE schedules.source = 'code'
  AND EXCLUDED.agent_version >= schedules.agent_version
  AND (schedules.agent, schedules.cron, schedules.every_seconds, schedules.timezone,
       schedules.input, schedules.catch_up, schedules.overlap)
      IS DISTINCT FROM
      (EXCLUDED.agent, EXCLUDED.cron, EXCLUDED.every_seconds, EXCLUDED.timezone,
       EXCLUDED.input, EXCLUDED.catch_up, EXCLUDED.overlap)
RETURNING {SCHEDULE_COLUMNS}
"""

SCHEDULE_SOURCE = "SELECT source FROM schedules WHERE name = %(name)s"

# A schedule created at run time; nothing if the name is taken.
CREATE_SCHEDULE = f"""
INSERT INTO schedules (name, agent, cron, every_seconds, timezone, input, catch_up, overlap,
                       source, paused, paused_by, paused_reason, anchor_at, next_due_at,
                       created_by)
VALUES (%(name)s, %(agent)s, %(cron)s, %(every_seconds)s, %(timezone)s, %(input)s::jsonb,
        %(catch_up)s, %(overlap)s, 'api', %(paused)s,
        CASE WHEN %(paused)s THEN %(created_by)s END, NULL,
        %(anchor_at)s, %(next_due_at)s, %(created_by)s)
ON CONFLICT (name) DO NOTHING
RETURNING {SCHEDULE_COLUMNS}
"""

SCHEDULE = f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE name = %(name)s"

SCHEDULES = f"""
SELECT {SCHEDULE_COLUMNS} FROM schedules
WHERE (%(agent)s::text IS NULL OR agent = %(agent)s)
  AND name > %(after)s
ORDER BY name
LIMIT %(limit)s
"""

LOCK_SCHEDULE = f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE name = %(name)s FOR UPDATE"

# Schedules with a due time come, or a queued run whose live session has
# finished (a queued run behind a session still live is not selected again
# and again): the oldest due first, each locked for this transaction. Two
# index scans (ix_schedules_next_due_at, ix_schedules_queued), not an OR
# that read every schedule: an idle pass over 100,000 schedules took 204 ms.
# A row both due and queued is named twice; IN takes it once. `live`: whether
# the session it started last still runs or waits (read here, not by a
# statement per schedule).
LOCK_DUE = f"""
SELECT {SCHEDULE_COLUMNS}, now() AS now,
       EXISTS (SELECT 1 FROM sessions s WHERE s.id = schedules.last_session_id
               AND s.status NOT IN ({TERMINAL})) AS live
FROM schedules
WHERE name IN (
    (SELECT name FROM schedules
     WHERE NOT paused AND next_due_at <= now()
     ORDER BY next_due_at LIMIT %(limit)s)
    UNION ALL
    (SELECT name FROM schedules
     WHERE queued_due_at IS NOT NULL AND NOT paused
       AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = schedules.last_session_id
                       AND s.status NOT IN ({TERMINAL}))
     LIMIT %(limit)s))
ORDER BY next_due_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

# What one pass did to a schedule.
ADVANCE = """
UPDATE schedules SET next_due_at = %(next_due_at)s, queued_due_at = %(queued_due_at)s,
    last_due_at = COALESCE(%(last_due_at)s, last_due_at),
    last_session_id = COALESCE(%(last_session_id)s, last_session_id),
    last_started_at = CASE WHEN %(last_session_id)s::uuid IS NULL THEN last_started_at
                           ELSE now() END,
    started_runs = started_runs + %(started)s, skipped_runs = skipped_runs + %(skipped)s
WHERE name = %(name)s
"""

# An audit event on a session a schedule started: which schedule, which due time.
SCHEDULED_EVENT = """
INSERT INTO audit_events (session_id, event_type, payload)
VALUES (%(session_id)s, 'scheduled', %(payload)s::jsonb)
"""

PAUSE = f"""
UPDATE schedules SET paused = true, paused_by = %(actor)s, paused_reason = %(reason)s,
                     updated_at = now()
WHERE name = %(name)s
RETURNING {SCHEDULE_COLUMNS}
"""

# Resumed from now on: the due times of the pause are not started.
RESUME = f"""
UPDATE schedules SET paused = false, paused_by = NULL, paused_reason = NULL,
                     next_due_at = %(next_due_at)s, queued_due_at = NULL, updated_at = now()
WHERE name = %(name)s
RETURNING {SCHEDULE_COLUMNS}
"""

DELETE = "DELETE FROM schedules WHERE name = %(name)s RETURNING name"


@dataclass(slots=True, kw_only=True)
class DueSchedule(ScheduleRecord):
    """A due schedule, locked, with the transaction's time and whether the
    session it started last is live."""

    now: datetime
    live: bool = False


def sync_from_code(conn: psycopg.Connection[Any], **values: Any) -> ScheduleRecord | None:
    """The row as written, or None if it was already so (or is not code's)."""
    return rows.one(conn, ScheduleRecord, SYNC_FROM_CODE, values)


def source(conn: psycopg.Connection[Any], name: str) -> str | None:
    found: str | None = rows.value(conn, SCHEDULE_SOURCE, {"name": name})
    return found


def create(conn: psycopg.Connection[Any], **values: Any) -> ScheduleRecord | None:
    """The new row; None if the name is taken."""
    return rows.one(conn, ScheduleRecord, CREATE_SCHEDULE, values)


def get(conn: psycopg.Connection[Any], name: str) -> ScheduleRecord | None:
    return rows.one(conn, ScheduleRecord, SCHEDULE, {"name": name})


def page(
    conn: psycopg.Connection[Any], *, limit: int, agent: str | None = None, after: str = ""
) -> list[ScheduleRecord]:
    """Up to `limit` schedules by name, after the name `after`."""
    return rows.every(
        conn, ScheduleRecord, SCHEDULES, {"limit": limit, "agent": agent, "after": after}
    )


def lock(conn: psycopg.Connection[Any], name: str) -> ScheduleRecord | None:
    """The schedule, locked until the transaction ends; None if there is none."""
    return rows.one(conn, ScheduleRecord, LOCK_SCHEDULE, {"name": name})


def lock_due(conn: psycopg.Connection[Any], *, limit: int) -> list[DueSchedule]:
    return rows.every(conn, DueSchedule, LOCK_DUE, {"limit": limit})


def advance(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    next_due_at: datetime,
    queued_due_at: datetime | None,
    last_due_at: datetime | None,
    last_session_id: uuid.UUID | None,
    started: int,
    skipped: int,
) -> None:
    rows.run(
        conn,
        ADVANCE,
        {
            "name": name,
            "next_due_at": next_due_at,
            "queued_due_at": queued_due_at,
            "last_due_at": last_due_at,
            "last_session_id": last_session_id,
            "started": started,
            "skipped": skipped,
        },
    )


def record_scheduled(conn: psycopg.Connection[Any], session_id: uuid.UUID, payload: str) -> None:
    rows.run(conn, SCHEDULED_EVENT, {"session_id": session_id, "payload": payload})


def pause(
    conn: psycopg.Connection[Any], name: str, *, actor: str, reason: str | None
) -> ScheduleRecord | None:
    return rows.one(conn, ScheduleRecord, PAUSE, {"name": name, "actor": actor, "reason": reason})


def resume(
    conn: psycopg.Connection[Any], name: str, *, next_due_at: datetime
) -> ScheduleRecord | None:
    return rows.one(conn, ScheduleRecord, RESUME, {"name": name, "next_due_at": next_due_at})


def delete(conn: psycopg.Connection[Any], name: str) -> bool:
    return rows.found(conn, DELETE, {"name": name})
