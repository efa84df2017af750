"""Named SQL for the operator's dead-letter actions and reads, with the typed
functions that run it. Each action is guarded by the dead letter's status,
so retrying or discarding twice changes nothing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from resumable._internal import serialization
from resumable.models import columns, rows
from resumable.models.records import DeadLetterRecord
from resumable.priorities import Routed

# Retry: the dead letter closes and the session goes back to pending at its
# failing step, attempts reset, state optionally replaced by the patched one.
RETRY_DEAD_LETTER = """
WITH d AS (
    UPDATE dead_letters SET status = 'retried', resolved_at = now(),
                            resolved_by = %(actor)s, resolution = %(reason)s
    WHERE id = %(id)s AND status = 'open'
    RETURNING id, session_id
), s AS (
    UPDATE sessions SET
        status = 'pending',
        attempts = 0,
        error = NULL,
        result = NULL,
        finished_at = NULL,
        wake_at = NULL,
        state = coalesce(%(state)s::jsonb, sessions.state),
        state_patch = CASE WHEN %(state)s::jsonb IS NULL THEN sessions.state_patch END,
        history_rebase = sessions.history_rebase OR %(state)s IS NOT NULL,
        updated_at = now()
    FROM d
    WHERE sessions.id = d.session_id AND sessions.status = 'failed'
    RETURNING sessions.id, sessions.step_seq, sessions.cursor, d.id AS dead_letter_id,
              sessions.priority
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'dead_letter_retried',
           jsonb_build_object('dead_letter_id', dead_letter_id, 'by', %(actor)s::text,
                              'reason', %(reason)s::text, 'state_patch', %(patch)s::jsonb)
    FROM s
)
SELECT id AS session_id, priority FROM s
"""

DISCARD_DEAD_LETTER = """
WITH d AS (
    UPDATE dead_letters SET status = 'discarded', resolved_at = now(),
                            resolved_by = %(actor)s, resolution = %(reason)s
    WHERE id = %(id)s AND status = 'open'
    RETURNING id, session_id
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT d.session_id, s.step_seq, s.cursor, 'dead_letter_discarded',
           jsonb_build_object('dead_letter_id', d.id, 'by', %(actor)s::text,
                              'reason', %(reason)s::text)
    FROM d JOIN sessions s ON s.id = d.session_id
)
SELECT session_id FROM d
"""

# -- reads ---------------------------------------------------------------------------

DEAD_LETTER_COLUMNS = ", ".join(columns.DEAD_LETTER_FIELDS)

DEAD_LETTER = f"SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE id = %(id)s"

# Dead letters newest first, a page at a time (below the previous page's last
# id); each filter given adds its condition from DEAD_LETTER_FILTERS to {where}.
FIND_DEAD_LETTERS = f"""
SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters
WHERE {{where}}
ORDER BY id DESC
LIMIT %(limit)s
"""

DEAD_LETTER_FILTERS = {
    "status": "status = %(status)s",
    "agent": "agent = %(agent)s",
    "error_type": "error_type = %(error_type)s",
    "step": "step = %(step)s",
    "since": "failed_at >= %(since)s",
    "until": "failed_at < %(until)s",
    "compensation": "compensation = %(compensation)s",
    "ids": "id = ANY(%(ids)s)",
    "before_id": "id < %(before_id)s",
}

# Dead letters that failed alike, biggest group first: twenty identical
# ConnectErrors are one line to act on (the same filters as FIND_DEAD_LETTERS).
GROUP_DEAD_LETTERS = """
SELECT agent, step, error_type, count(*) AS n, min(failed_at) AS first_failed_at,
       max(failed_at) AS last_failed_at
FROM dead_letters
WHERE {where}
GROUP BY agent, step, error_type
ORDER BY n DESC, last_failed_at DESC
LIMIT %(limit)s
"""

# A session's dead letters, newest first (a retried session may fail again).
DEAD_LETTERS_OF_SESSION = f"""
SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE session_id = %(session_id)s
ORDER BY id DESC
LIMIT %(limit)s
"""

DEAD_LETTERS_BY_ID = f"SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE id = ANY(%(ids)s)"


# -- the typed functions ------------------------------------------------------------


def get(conn: psycopg.Connection[Any], dead_letter_id: int) -> DeadLetterRecord | None:
    return rows.one(conn, DeadLetterRecord, DEAD_LETTER, {"id": dead_letter_id})


def find(
    conn: psycopg.Connection[Any],
    *,
    limit: int,
    before_id: int | None = None,
    status: str | None = None,
    agent: str | None = None,
    error_type: str | None = None,
    step: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    compensation: str | None = None,
    ids: list[int] | None = None,
) -> list[DeadLetterRecord]:
    """Up to `limit` dead letters newest first, below `before_id` when given,
    matching each filter given (failed `since`, and before `until`; among
    `ids`)."""
    params: dict[str, Any] = {
        "limit": limit,
        "before_id": before_id,
        "status": status,
        "agent": agent,
        "error_type": error_type,
        "step": step,
        "since": since,
        "until": until,
        "compensation": compensation,
        "ids": ids,
    }
    query = FIND_DEAD_LETTERS.format(where=_conditions(params))
    return rows.every(conn, DeadLetterRecord, query, params)


def _conditions(params: dict[str, Any]) -> str:
    """The WHERE clause of the filters given in `params` (as an operator's
    filter reads: an empty text is no filter)."""
    given = [name for name in DEAD_LETTER_FILTERS if params.get(name) not in (None, "")]
    return " AND ".join(f"({DEAD_LETTER_FILTERS[name]})" for name in given) or "true"


@dataclass(frozen=True)
class DeadLetterGroup:
    """A row of GROUP_DEAD_LETTERS: dead letters of one agent and step that
    failed with one error type."""

    agent: str
    step: str | None
    error_type: str
    n: int
    first_failed_at: datetime
    last_failed_at: datetime


def groups(conn: psycopg.Connection[Any], *, limit: int, **filters: Any) -> list[DeadLetterGroup]:
    """The dead letters matching `filters` (those of ``find``), grouped by
    agent, step and error type, largest group first."""
    params: dict[str, Any] = {"limit": limit, **filters}
    query = GROUP_DEAD_LETTERS.format(where=_conditions(params))
    return rows.every(conn, DeadLetterGroup, query, params)


def of_session(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, limit: int
) -> list[DeadLetterRecord]:
    params = {"session_id": session_id, "limit": limit}
    return rows.every(conn, DeadLetterRecord, DEAD_LETTERS_OF_SESSION, params)


def by_id(conn: psycopg.Connection[Any], ids: list[int]) -> list[DeadLetterRecord]:
    """These dead letters, in the order given (those that exist)."""
    letters = rows.every(conn, DeadLetterRecord, DEAD_LETTERS_BY_ID, {"ids": ids})
    found = {row.id: row for row in letters}
    return [found[i] for i in ids if i in found]


def retry(
    conn: psycopg.Connection[Any],
    dead_letter_id: int,
    *,
    actor: str,
    reason: str | None,
    state: str | None,
    patch: list[dict[str, Any]] | None,
) -> Routed | None:
    """Retry the dead letter (its session's state replaced by `state`, JSON
    text, when given); its session, or None if it was no longer open."""
    params = {
        "id": dead_letter_id,
        "actor": actor,
        "reason": reason,
        "state": state,
        "patch": serialization.dumps(patch) if patch else None,
    }
    retried = rows.routes(conn, RETRY_DEAD_LETTER, params)
    return retried[0] if retried else None


def discard(conn: psycopg.Connection[Any], dead_letter_id: int, *, actor: str, reason: str) -> bool:
    """Discard the dead letter; False if it was no longer open."""
    params = {"id": dead_letter_id, "actor": actor, "reason": reason}
    return rows.found(conn, DISCARD_DEAD_LETTER, params)
