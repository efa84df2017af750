"""Sessions as a whole: create one (once per idempotency key), find, cancel,
read them (one, a page, counts), and the reconciler's scan for sessions
that should be running but have no message in flight. Each statement's
typed function follows the statements.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from resumable.errors import SessionExistsError
from resumable.models import columns, live_state, metrics_queries, rows
from resumable.models.agent_queries import SERVED_ELSEWHERE
from resumable.models.records import SessionRecord
from resumable.priorities import Priority, Routed

# Create a session and its first audit event. With an idempotency key that is
# already taken nothing is inserted and no row comes back.
CREATE_SESSION = """
WITH s AS (
    INSERT INTO sessions (id, agent, status, cursor, state, input, idempotency_key,
                          trace_context, priority)
    VALUES (%(id)s, %(agent)s, 'pending', %(cursor)s, '{}'::jsonb, %(input)s::jsonb,
            %(idempotency_key)s, %(trace_context)s::jsonb, %(priority)s)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, agent, status, priority
), e AS (
    INSERT INTO audit_events (session_id, event_type, payload)
    SELECT id, 'session_created',
           jsonb_build_object('agent', agent)
           || CASE WHEN priority = 'normal' THEN '{}'::jsonb
                   ELSE jsonb_build_object('priority', priority) END
    FROM s
)
SELECT id, status FROM s
"""

FIND_BY_IDEMPOTENCY_KEY = """
SELECT id, agent, input, status FROM sessions WHERE idempotency_key = %(idempotency_key)s
"""

# Sessions that should be running but may have no queue message: pending ones
# untouched for a grace period (their message was lost, or Redis was flushed)
# and running ones whose lease expired (their worker died). Locked rows are
# skipped so several reconcilers never hand out the same session at once, and
# the touch makes each session come back at most once per grace period.
# Sessions waiting for a concurrency slot have no message by design: the
# end of a run of their key, or the scheduler's slot pass, wakes them
# (``services/slots.py``). Sessions no live worker can run (none loads the
# agent, serves the version or migrates it) are left alone (untouched, so
# the oldest-pending alert sees them): a worker that serves them enqueues them when it starts.
RECONCILE = f"""
WITH due AS (
    SELECT id FROM sessions
    WHERE ((status = 'pending' AND updated_at < now() - make_interval(secs => %(grace)s)
            AND slot_wait_since IS NULL)
       OR (status IN ('running', 'compensating') AND lease_expires_at < now()
           AND (updated_at < lease_expires_at
                OR updated_at < now() - make_interval(secs => %(grace)s)))
       OR (status = 'compensating' AND lease_owner IS NULL AND wake_at IS NULL
           AND updated_at < now() - make_interval(secs => %(grace)s)))
      AND ({SERVED_ELSEWHERE}
           OR NOT EXISTS (SELECT 1 FROM agents a WHERE a.name = sessions.agent))
    ORDER BY updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE sessions SET updated_at = now()
FROM due WHERE sessions.id = due.id
RETURNING sessions.id, sessions.status, sessions.priority
"""

# Not a finished session, nor one whose saga is running: it failed for good
# already, and a cancel would leave what it did half undone (the saga's
# compensations abandoned, no dead letter). It ends `failed` on its own.
CANCEL_SESSION = """
WITH s AS (
    UPDATE sessions SET
        status = 'cancelled',
        lease_epoch = lease_epoch + 1,
        lease_owner = NULL,
        lease_expires_at = NULL,
        wake_at = NULL,
        finished_at = now(),
        updated_at = now()
    WHERE id = %(id)s AND status NOT IN ('completed', 'failed', 'cancelled', 'compensating')
    RETURNING id, step_seq, cursor
), c AS (
    UPDATE callbacks SET status = 'closed', closed_at = now()
    FROM s WHERE callbacks.session_id = s.id AND callbacks.status = 'open'
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'session_cancelled',
           jsonb_build_object('by', %(actor)s::text, 'reason', %(reason)s::text)
    FROM s
)
SELECT id FROM s
"""

# An operator's change of an unfinished session's priority, audited
# (nothing when it already has it). `changed` is the session's status when
# it changed, `queued` whether it is pending with a message (not waiting
# for a concurrency slot): that message is sent again, on the new lane.
SET_PRIORITY = """
WITH old AS (
    SELECT id, priority FROM sessions
    WHERE id = %(id)s AND status NOT IN ('completed', 'failed', 'cancelled')
    FOR UPDATE
), s AS (
    UPDATE sessions SET priority = %(priority)s
    FROM old WHERE sessions.id = old.id AND old.priority <> %(priority)s
    RETURNING sessions.id, sessions.step_seq, sessions.cursor, sessions.status,
              sessions.slot_wait_since, old.priority AS was
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'priority_changed',
           jsonb_build_object('from', was, 'to', %(priority)s::text,
                              'by', %(actor)s::text, 'reason', %(reason)s::text)
    FROM s
)
SELECT EXISTS (SELECT 1 FROM old) AS open, (SELECT status FROM s) AS changed,
       coalesce((SELECT status = 'pending' AND slot_wait_since IS NULL FROM s), false) AS queued
"""

SESSION_AGENT = "SELECT agent FROM sessions WHERE id = %s"

ROUTES_OF = "SELECT id, priority FROM sessions WHERE id = ANY(%(ids)s)"

# Operators type id prefixes: a prefix is a range of uuids (the bounds padded
# with 0s and fs), answered from the primary key index.
SESSIONS_BY_ID_PREFIX = """
SELECT id, agent, status FROM sessions
WHERE id BETWEEN %(low)s AND %(high)s
ORDER BY created_at DESC
LIMIT %(limit)s
"""

# One row per matching session: its newest dead letter.
DEAD_LETTERS_BY_SESSION_PREFIX = """
SELECT DISTINCT ON (session_id) session_id, id AS dead_letter_id, agent
FROM dead_letters
WHERE session_id BETWEEN %(low)s AND %(high)s
ORDER BY session_id, id DESC
LIMIT %(limit)s
"""

DEAD_LETTER_EXISTS = "SELECT 1 FROM dead_letters WHERE id = %(id)s"


# -- reading sessions ---------------------------------------------------------------

# Every column of `sessions`, as ``SessionRecord`` names them (its fields are
# the table's columns: the migration test holds them equal).
SESSION_COLUMNS = ", ".join(columns.SESSION_FIELDS)

SESSION = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = %(id)s"

# Sessions newest first, a page at a time: the page before the cursor (the
# previous page's last `created_at` and `id`, as the index orders them).
# Each filter given adds its condition from SESSION_FILTERS to {where}.
PAGE_SESSIONS = f"""
SELECT {SESSION_COLUMNS} FROM sessions
WHERE {{where}}
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s
"""

SESSION_FILTERS = {
    "status": "status = %(status)s",
    "agent": "agent = %(agent)s",
    "parent": "parent_id = %(parent)s",
    # Running past its step's time limit, or longer than hung_after seconds.
    "hung_after": """status = 'running'
        AND (step_deadline < now()
             OR step_started_at < now() - make_interval(secs => %(hung_after)s))""",
    # Waiting for a worker that can run it, and no live one can.
    "unserved": f"""status IN ('pending', 'retrying', 'running', 'compensating')
        AND NOT {SERVED_ELSEWHERE}""",
    "before": "(created_at, id) < (%(before_created_at)s, %(before_id)s)",
}

# A row of the console's sessions list: no state (it can be large), and when
# the session last changed (``SessionRecord.changed_at``, in SQL).
SESSION_SUMMARIES = """
SELECT id, agent, status, cursor, step_seq, attempts, created_at,
       greatest(updated_at, step_started_at) AS updated_at, error
FROM sessions
WHERE {where}
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s
"""

SUMMARY_FILTERS = {
    "status": "status = %(status)s",
    "agent": "agent = %(agent)s",
    # The start of the id as typed (lower-case hex and dashes).
    "id_prefix": "CAST(id AS TEXT) LIKE %(id_prefix)s || '%%'",
    "created_before": "created_at <= %(created_before)s",
    "created_after": "created_at >= %(created_after)s",
    "before": "(created_at, id) < (%(before_created_at)s, %(before_id)s)",
    # The error's type or message contains the text (a LIKE pattern, escaped).
    "error_like": "(error ->> 'type' ILIKE %(error_like)s"
    " OR error ->> 'message' ILIKE %(error_like)s)",
    # The value at a path of the input, the state (as last written whole: see
    # live_state.py) or the result: as JSON, or as the text typed.
    **{
        f"{column}_at": f"{column} #> %(path)s"
        " IN (%(json_value)s::jsonb, to_jsonb(%(text_value)s::text))"
        for column in ("input", "state", "result")
    },
}

# Where a search by path and value looks.
SEARCHABLE_DOCUMENTS = ("input", "state", "result")

SESSION_STATUSES = "SELECT id, status FROM sessions WHERE id = ANY(%(ids)s)"


# -- the typed functions ------------------------------------------------------------


def live_row(**values: Any) -> SessionRecord:
    """A `sessions` row as its class, its `.state` the live state (see
    live_state.py): the row factory of every read of whole session rows."""
    values["state"] = live_state.apply(values["state"], values.get("state_patch"))
    return SessionRecord(**values)


def create(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    *,
    agent: str,
    cursor: str | None,
    input: str,
    idempotency_key: str | None,
    trace_context: dict[str, str] | None,
    priority: str = "normal",
) -> bool:
    """Create the session (`input` is JSON text); False if its idempotency key
    is taken. SessionExistsError if its id is."""
    try:
        return rows.found(
            conn,
            CREATE_SESSION,
            {
                "id": session_id,
                "agent": agent,
                "cursor": cursor,
                "input": input,
                "idempotency_key": idempotency_key,
                "trace_context": json.dumps(trace_context) if trace_context else None,
                "priority": priority,
            },
        )
    except psycopg.errors.UniqueViolation:
        raise SessionExistsError(f"a session with id {session_id} already exists") from None


@dataclass(frozen=True)
class IdempotentSession:
    """A row of FIND_BY_IDEMPOTENCY_KEY: the session a key created."""

    id: uuid.UUID
    agent: str
    input: Any
    status: str


def find_by_idempotency_key(
    conn: psycopg.Connection[Any], idempotency_key: str | None
) -> IdempotentSession | None:
    return rows.one(
        conn, IdempotentSession, FIND_BY_IDEMPOTENCY_KEY, {"idempotency_key": idempotency_key}
    )


@dataclass(frozen=True)
class Stranded:
    """A row of RECONCILE: a session to enqueue again, and its status."""

    id: uuid.UUID
    status: str
    priority: Priority = "normal"


def reconcile(conn: psycopg.Connection[Any], *, grace: float, limit: int) -> list[Stranded]:
    return rows.every(conn, Stranded, RECONCILE, {"grace": grace, "limit": limit})


def cancel(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, actor: str, reason: str | None
) -> bool:
    """Cancel the session; False if it had finished or is compensating."""
    return rows.found(conn, CANCEL_SESSION, {"id": session_id, "actor": actor, "reason": reason})


@dataclass(frozen=True)
class PriorityChange:
    """A row of SET_PRIORITY."""

    open: bool  # the session exists and has not finished
    changed: str | None  # its status, if its priority changed
    queued: bool  # pending with a queue message, to send again on the new lane


def set_priority(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    priority: str,
    *,
    actor: str,
    reason: str | None,
) -> PriorityChange:
    """Give an unfinished session another priority (SET_PRIORITY)."""
    row = (
        conn.cursor(row_factory=class_row(PriorityChange))
        .execute(
            SET_PRIORITY,
            {"id": session_id, "priority": priority, "actor": actor, "reason": reason},
        )
        .fetchone()
    )
    assert row is not None  # the statement always answers one row
    return row


def routes_of(
    conn: psycopg.Connection[Any], session_ids: Iterable[uuid.UUID | str]
) -> list[Routed]:
    """The sessions, each with the priority that picks its lane: for a path
    that wakes sessions and did not read their priorities (an operator's
    action, a lock's grant), one more read rather than a send on the wrong lane."""
    ids = [uuid.UUID(str(session_id)) for session_id in session_ids]
    return rows.routes(conn, ROUTES_OF, {"ids": ids}) if ids else []


def agent_of(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> str | None:
    """The session's agent; None if there is no such session."""
    agent = rows.value(conn, SESSION_AGENT, (session_id,))
    return None if agent is None else str(agent)


def id_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The smallest and largest id starting with `prefix` (hex digits):
    PostgreSQL orders uuids by their bytes, so a prefix is a range the
    primary key index answers."""
    return uuid.UUID(prefix.ljust(32, "0")), uuid.UUID(prefix.ljust(32, "f"))


@dataclass(frozen=True)
class SessionMatch:
    """A row of SESSIONS_BY_ID_PREFIX."""

    id: uuid.UUID
    agent: str
    status: str


def sessions_by_id_prefix(
    conn: psycopg.Connection[Any], prefix: str, *, limit: int
) -> list[SessionMatch]:
    """Sessions whose id starts with `prefix` (hex digits), newest first."""
    low, high = id_range(prefix)
    params = {"low": low, "high": high, "limit": limit}
    return rows.every(conn, SessionMatch, SESSIONS_BY_ID_PREFIX, params)


@dataclass(frozen=True)
class DeadLetterMatch:
    """A row of DEAD_LETTERS_BY_SESSION_PREFIX."""

    session_id: uuid.UUID
    dead_letter_id: int
    agent: str


def dead_letters_by_session_prefix(
    conn: psycopg.Connection[Any], prefix: str, *, limit: int
) -> list[DeadLetterMatch]:
    """The newest dead letter of each session whose id starts with `prefix`."""
    low, high = id_range(prefix)
    params = {"low": low, "high": high, "limit": limit}
    return rows.every(conn, DeadLetterMatch, DEAD_LETTERS_BY_SESSION_PREFIX, params)


def dead_letter_exists(conn: psycopg.Connection[Any], dead_letter_id: int) -> bool:
    return rows.found(conn, DEAD_LETTER_EXISTS, {"id": dead_letter_id})


def get(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> SessionRecord | None:
    """The session's row, with its live state; None if there is none."""
    return rows.one(conn, live_row, SESSION, {"id": session_id})


def _where(filters: dict[str, str], given: Iterable[str]) -> str:
    """The conditions of the `given` filters (names in `filters`), joined."""
    return " AND ".join(f"({filters[name]})" for name in given) or "true"


def page(
    conn: psycopg.Connection[Any],
    *,
    limit: int,
    status: str | None = None,
    agent: str | None = None,
    parent: uuid.UUID | None = None,
    hung_after: float | None = None,
    unserved: bool = False,
    before: tuple[datetime, uuid.UUID] | None = None,
) -> list[SessionRecord]:
    """Up to `limit` sessions newest first (with their live states), older
    than `before` (a page's last ``created_at`` and id) when given."""
    params: dict[str, Any] = {
        "limit": limit,
        "status": status or None,
        "agent": agent or None,
        "parent": parent,
        "hung_after": hung_after,
        "unserved": unserved or None,
    }
    if before is not None:
        params["before"] = True
        params["before_created_at"], params["before_id"] = before
    given = [name for name in SESSION_FILTERS if params.get(name) is not None]
    query = PAGE_SESSIONS.format(where=_where(SESSION_FILTERS, given))
    return rows.every(conn, live_row, query, params)


@dataclass(frozen=True)
class SessionSummary:
    """A row of SESSION_SUMMARIES (the state stays in the database)."""

    id: uuid.UUID
    agent: str
    status: str
    cursor: str | None
    step_seq: int
    attempts: int
    created_at: datetime
    updated_at: datetime
    error: dict[str, Any] | None


def summaries(
    conn: psycopg.Connection[Any],
    *,
    limit: int,
    status: str | None = None,
    agent: str | None = None,
    id_prefix: str | None = None,
    created_before: datetime | None = None,
    created_after: datetime | None = None,
    error: str | None = None,
    document: str | None = None,
    path: list[str] | None = None,
    value: str | None = None,
    before: tuple[datetime, uuid.UUID] | None = None,
) -> list[SessionSummary]:
    """Up to `limit` sessions newest first, without their state. `error`:
    text its error's type or message contains; `document` ("input", "state"
    or "result"), `path` and `value`: the value at that path, read as JSON if
    it is JSON, else as text."""
    params: dict[str, Any] = {
        "limit": limit,
        "status": status or None,
        "agent": agent or None,
        "id_prefix": id_prefix or None,
        "created_before": created_before,
        "created_after": created_after,
        "error_like": None if not error else f"%{_like_escaped(error)}%",
    }
    if document in SEARCHABLE_DOCUMENTS and path and value is not None:
        params[f"{document}_at"] = True
        params["path"], params["text_value"] = path, value
        params["json_value"] = value if _is_json(value) else json.dumps(value)
    if before is not None:
        params["before"] = True
        params["before_created_at"], params["before_id"] = before
    given = [name for name in SUMMARY_FILTERS if params.get(name) is not None]
    query = SESSION_SUMMARIES.format(where=_where(SUMMARY_FILTERS, given))
    return rows.every(conn, SessionSummary, query, params)


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def count_by_status(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Every session, by status, as a /metrics scrape counts them: the active
    ones from their partial index, the resting and finished ones from the
    counts the triggers keep. A console page asks this on every load, and a
    ``count(*)`` of the table read every row, a million on a busy deployment."""
    counts: dict[str, int] = {}
    for count in metrics_queries.sessions_by_agent_and_status(conn):
        counts[count.status] = counts.get(count.status, 0) + count.n
    return counts


@dataclass(frozen=True)
class SessionStatusRow:
    """A row of SESSION_STATUSES."""

    id: uuid.UUID
    status: str


def statuses(conn: psycopg.Connection[Any], ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The status of each of these sessions that exists."""
    found = rows.every(conn, SessionStatusRow, SESSION_STATUSES, {"ids": ids})
    return {row.id: row.status for row in found}
