"""Named SQL for reading, forking, compacting and retiring session history,
and the typed functions that run it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from resumable._internal import serialization
from resumable.errors import SessionExistsError
from resumable.models import rows
from resumable.priorities import Routed

# The rows needed to rebuild the state after `seq`: from the latest snapshot at
# or before it (so at most K rows with incremental checkpoints).
CHAIN_TO = """
SELECT seq, step, next_step, kind, state, patch, events, created_at
FROM checkpoints
WHERE session_id = %(id)s AND seq <= %(seq)s
  AND seq >= (SELECT max(seq) FROM checkpoints
              WHERE session_id = %(id)s AND seq <= %(seq)s AND kind = 'snapshot')
ORDER BY seq
"""

# The rows that rebuild every state from %(first)s to %(last)s (the console's
# window of checkpoints), from the snapshot at or before %(first)s, with each
# row's stored size: one read where a state_at per checkpoint re-read the
# same snapshot for each (21 reads of a 300 KB state for one page).
CHAIN_BETWEEN = """
SELECT seq, step, next_step, kind, state, patch, events, created_at,
       coalesce(pg_column_size(state), 0) + coalesce(pg_column_size(patch), 0)
       + coalesce(pg_column_size(events), 0) AS bytes
FROM checkpoints
WHERE session_id = %(id)s AND seq <= %(last)s
  AND seq >= (SELECT max(seq) FROM checkpoints
              WHERE session_id = %(id)s AND seq <= %(first)s AND kind = 'snapshot')
ORDER BY seq
"""

LIST_CHECKPOINTS = """
SELECT seq, step, next_step, kind, created_at,
       coalesce(pg_column_size(state), 0) + coalesce(pg_column_size(patch), 0)
       + coalesce(pg_column_size(events), 0) AS bytes
FROM checkpoints
WHERE session_id = %(id)s AND seq > %(after)s
ORDER BY seq
LIMIT %(limit)s
"""

# Tool results a fork from `seq` would reuse although the source's saga undid
# (or is undoing) their effects: compensation attempted, or the source compensating.
COMPENSATED_BEFORE = """
SELECT t.step_seq, t.step, t.tool, t.compensation,
       coalesce(t.compensation_status, 'pending') AS compensation_status
FROM tool_execution_cache t JOIN sessions s ON s.id = t.session_id
WHERE t.session_id = %(source)s AND t.step_seq <= %(seq)s AND t.status = 'completed'
  AND t.compensation IS NOT NULL
  AND (t.compensation_status IS NOT NULL OR s.status = 'compensating')
ORDER BY t.step_seq, t.call_index
"""

FORK_SESSION = """
WITH src AS (
    -- The fork keeps the versions of the source at the fork point: the state
    -- of a checkpoint before a migration (session_migrated) is the older one's.
    SELECT id, agent, input, started_version, priority,
           coalesce((SELECT (payload->>'to_version')::int FROM audit_events a
                     WHERE a.session_id = sessions.id AND a.event_type = 'session_migrated'
                       AND a.seq < %(seq)s
                     ORDER BY a.id DESC LIMIT 1), started_version) AS agent_version
    FROM sessions WHERE id = %(source)s
), s AS (
    INSERT INTO sessions (id, agent, status, cursor, step_seq, step_seq_mark, state, input,
                          forked_from, forked_at_seq, history_rebase, compacted_to,
                          agent_version, started_version, priority)
    SELECT %(id)s, agent, 'pending', %(cursor)s, %(seq)s, %(seq)s, %(state)s::jsonb, input, id,
           %(seq)s, %(rebase)s, 0, agent_version, started_version, priority
    FROM src
    RETURNING id, priority
), c AS (
    INSERT INTO checkpoints (session_id, seq, step, next_step, state, kind, patch, events,
                             created_at)
    SELECT %(id)s, seq, step, next_step, state, kind, patch, events, created_at
    FROM checkpoints WHERE session_id = %(source)s AND seq <= %(seq)s AND EXISTS (SELECT 1 FROM s)
), t AS (
    -- Tool results before the fork point come along, under the fork's own keys,
    -- without their compensations: those effects are the origin's, undone by
    -- the origin's saga if it fails (or already undone, for a fork allowed to
    -- reuse compensated calls), never by the fork's, which undoes its own calls.
    INSERT INTO tool_execution_cache (idempotency_key, session_id, step_seq, step, call_index,
                                      tool, request, status, response, error, lease_epoch,
                                      attempts, compensation)
    SELECT 'rsm_' || encode(sha256(convert_to(%(id)s::text || idempotency_key, 'UTF8')), 'hex'),
           %(id)s, step_seq, step, call_index, tool, request, status, response, error, 0,
           attempts, NULL
    FROM tool_execution_cache
    WHERE session_id = %(source)s AND step_seq <= %(seq)s AND status = 'completed'
      AND EXISTS (SELECT 1 FROM s)
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT %(id)s, %(seq)s, %(cursor)s, 'session_created',
           jsonb_build_object('forked_from', %(source)s::text, 'at', %(seq)s::int,
                              'by', %(actor)s::text, 'state_patch', %(patch)s::jsonb,
                              'compensated_calls_reused', %(compensated)s::int)
    FROM s
    UNION ALL
    SELECT %(source)s, %(seq)s, NULL, 'forked',
           jsonb_build_object('fork', %(id)s::text, 'at', %(seq)s::int, 'by', %(actor)s::text)
    FROM s
)
SELECT id, priority FROM s
"""

# Compaction: make the oldest kept row a snapshot, then drop what precedes it.
REBASE_ROW = """
UPDATE checkpoints SET kind = 'snapshot', state = %(state)s::jsonb, patch = NULL
WHERE session_id = %(id)s AND seq = %(seq)s
"""

DROP_BEFORE = """
WITH d AS (
    DELETE FROM checkpoints WHERE session_id = %(id)s AND seq < %(seq)s RETURNING seq
), s AS (
    UPDATE sessions SET compacted_to = %(seq)s - 1 WHERE id = %(id)s RETURNING step_seq
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT %(id)s, (SELECT step_seq FROM s), NULL, 'history_compacted',
           jsonb_build_object('kept_from', %(seq)s::int, 'removed', (SELECT count(*) FROM d))
)
SELECT count(*) AS removed FROM d
"""

# Read through the index on `step_seq_mark - compacted_to`: a session that
# stopped is seen exactly, a running one up to STEP_SEQ_MARK_EVERY steps late.
COMPACTION_CANDIDATES = """
SELECT id, agent, step_seq FROM sessions
WHERE step_seq_mark - compacted_to > %(threshold)s
ORDER BY step_seq_mark - compacted_to DESC
LIMIT %(limit)s
"""

LOCK_FOR_COMPACTION = """
SELECT step_seq FROM sessions WHERE id = %(id)s FOR UPDATE SKIP LOCKED
"""

# Retention: finished sessions past their time, without an open dead letter
# (an operator may still need those), in bounded batches.
RETIRE_SESSIONS = """
WITH old AS (
    SELECT id FROM sessions s
    WHERE s.status IN ('completed', 'failed', 'cancelled')
      AND s.finished_at < now() - make_interval(secs => %(age_seconds)s)
      AND NOT EXISTS (SELECT 1 FROM dead_letters d
                      WHERE d.session_id = s.id AND d.status = 'open')
    ORDER BY s.finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), a AS (
    INSERT INTO archived_sessions (session_id, agent, status, finished_at, document)
    SELECT s.id, s.agent, s.status, s.finished_at,
           jsonb_build_object(
               'session', to_jsonb(s),
               'checkpoints', coalesce((SELECT jsonb_agg(to_jsonb(c) ORDER BY c.seq)
                                        FROM checkpoints c WHERE c.session_id = s.id), '[]'),
               'events', coalesce((SELECT jsonb_agg(to_jsonb(e) ORDER BY e.id)
                                   FROM audit_events e WHERE e.session_id = s.id), '[]'),
               'tool_calls', coalesce((SELECT jsonb_agg(to_jsonb(t) ORDER BY t.step_seq,
                                                        t.call_index)
                                       FROM tool_execution_cache t
                                       WHERE t.session_id = s.id), '[]'),
               'dead_letters', coalesce((SELECT jsonb_agg(to_jsonb(d) ORDER BY d.id)
                                         FROM dead_letters d WHERE d.session_id = s.id), '[]'))
    FROM sessions s JOIN old ON old.id = s.id
    WHERE %(archive)s
    ON CONFLICT (session_id) DO NOTHING
)
DELETE FROM sessions USING old WHERE sessions.id = old.id
RETURNING sessions.id
"""


# -- the typed functions ------------------------------------------------------------
#
# The history's rows come back as dicts: ``checkpoints.rebuild`` folds them
# and ``schemas.Checkpoint.from_row`` reads them as mappings.


def chain_to(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, seq: int
) -> list[dict[str, Any]]:
    """The rows that rebuild the state after `seq`, from the snapshot before it."""
    return rows.every(conn, dict, CHAIN_TO, {"id": session_id, "seq": seq})


def chain_between(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, first: int, last: int
) -> list[dict[str, Any]]:
    """The rows that rebuild each state from `first` to `last`, from the
    snapshot at or before `first` (none: no such snapshot)."""
    params = {"id": session_id, "first": first, "last": last}
    return rows.every(conn, dict, CHAIN_BETWEEN, params)


def list_checkpoints(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, after: int, limit: int
) -> list[dict[str, Any]]:
    params = {"id": session_id, "after": after, "limit": limit}
    return rows.every(conn, dict, LIST_CHECKPOINTS, params)


@dataclass(frozen=True)
class CompensatedCall:
    """A row of COMPENSATED_BEFORE."""

    step_seq: int
    step: str
    tool: str
    compensation: str
    compensation_status: str


def compensated_before(
    conn: psycopg.Connection[Any], source: uuid.UUID, seq: int
) -> list[CompensatedCall]:
    return rows.every(conn, CompensatedCall, COMPENSATED_BEFORE, {"source": source, "seq": seq})


def fork(
    conn: psycopg.Connection[Any],
    fork_id: uuid.UUID,
    *,
    source: uuid.UUID,
    seq: int,
    cursor: str,
    state: dict[str, Any],
    rebase: bool,
    actor: str,
    patch: list[dict[str, Any]] | None,
    compensated: int,
) -> Routed | None:
    """Create the fork; the fork, with the priority it took from its
    source; None if there is no session `source`. SessionExistsError if
    `fork_id` is taken."""
    params = {
        "id": fork_id,
        "source": source,
        "seq": seq,
        "cursor": cursor,
        "state": serialization.dumps(state, "state"),
        "rebase": rebase,
        "actor": actor,
        "patch": serialization.dumps(patch) if patch else None,
        "compensated": compensated,
    }
    try:
        forked = rows.routes(conn, FORK_SESSION, params)
    except psycopg.errors.UniqueViolation:
        raise SessionExistsError(f"a session with id {fork_id} already exists") from None
    return forked[0] if forked else None


def rebase_row(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, seq: int, state: dict[str, Any]
) -> None:
    params = {"id": session_id, "seq": seq, "state": serialization.dumps(state)}
    rows.run(conn, REBASE_ROW, params)


def drop_before(conn: psycopg.Connection[Any], session_id: uuid.UUID, seq: int) -> int:
    """Drop the checkpoints before `seq`; how many."""
    removed = rows.value(conn, DROP_BEFORE, {"id": session_id, "seq": seq})
    return int(removed) if removed else 0


@dataclass(frozen=True)
class CompactionCandidate:
    """A row of COMPACTION_CANDIDATES."""

    id: uuid.UUID
    agent: str
    step_seq: int


def compaction_candidates(
    conn: psycopg.Connection[Any], *, threshold: int, limit: int
) -> list[CompactionCandidate]:
    params = {"threshold": threshold, "limit": limit}
    return rows.every(conn, CompactionCandidate, COMPACTION_CANDIDATES, params)


def lock_for_compaction(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> int | None:
    """The session's step_seq, its row locked; None if a worker holds the row."""
    step_seq = rows.value(conn, LOCK_FOR_COMPACTION, {"id": session_id})
    return None if step_seq is None else int(step_seq)


def retire_sessions(
    conn: psycopg.Connection[Any], *, age_seconds: float, limit: int, archive: bool
) -> int:
    """Delete (`archive`: archive, then delete) a batch of old finished
    sessions; how many."""
    params = {"age_seconds": age_seconds, "limit": limit, "archive": archive}
    return len(rows.values(conn, RETIRE_SESSIONS, params))
