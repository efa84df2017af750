"""The statements of shared state, locks and semaphores (see
``resumable/coordination``). Shared-document writes run inside the step's
commit transaction, after ``COMMIT_STEP`` succeeded, so they commit with the
step or not at all; the row locks they take are held only until that commit.
Their typed functions are in ``coordination_ops.py``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from resumable.models.metrics_queries import TERMINAL


@dataclass(frozen=True)
class SharedDocument:
    """A shared document as stored: its value, version (0: never written) and
    who wrote it last."""

    name: str
    value: Any
    version: int
    updated_at: datetime
    updated_by: uuid.UUID | None


@dataclass(frozen=True)
class SharedVersion:
    """One committed value of a shared document and the step that wrote it."""

    name: str
    version: int
    value: Any
    session_id: uuid.UUID
    seq: int
    step: str
    created_at: datetime


READ_SHARED = """
SELECT name, value, version, updated_at, updated_by FROM shared_documents WHERE name = %(name)s
"""

SHARED_HISTORY = """
SELECT name, version, value, session_id, seq, step, created_at FROM shared_versions
WHERE name = %(name)s AND (%(before)s::bigint IS NULL OR version < %(before)s::bigint)
ORDER BY version DESC
LIMIT %(limit)s
"""

# Make sure every document the step updates has a row (a statement of its
# own: a data-modifying CTE's rows are invisible to the rest of its statement),
ENSURE_SHARED = """
INSERT INTO shared_documents (name, value, version)
SELECT n, NULL, 0 FROM unnest(%(names)s::text[]) AS n ORDER BY n
ON CONFLICT (name) DO NOTHING
"""

# then lock them all in name order (one global order, so two steps updating
# the same documents cannot deadlock). Both run inside the commit transaction,
# after COMMIT_STEP: the locks last only until that commit.
LOCK_SHARED = """
SELECT name, value, version FROM shared_documents
WHERE name = ANY(%(names)s::text[])
ORDER BY name
FOR UPDATE
"""

# The new values, their history rows and one audit event each, in one statement.
WRITE_SHARED = """
WITH d AS (
    SELECT * FROM jsonb_to_recordset(%(docs)s::jsonb) AS d(name text, value jsonb, version bigint)
), u AS (
    UPDATE shared_documents SET value = d.value, version = d.version, updated_at = now(),
                                updated_by = %(session_id)s
    FROM d WHERE shared_documents.name = d.name
), h AS (
    INSERT INTO shared_versions (name, version, value, session_id, seq, step)
    SELECT d.name, d.version, d.value, %(session_id)s, %(seq)s, %(step)s FROM d
)
INSERT INTO audit_events (session_id, seq, step, event_type, payload)
SELECT %(session_id)s, %(seq)s, %(step)s, 'shared_updated',
       jsonb_build_object('name', d.name, 'version', d.version)
FROM d
"""


# -- locks and semaphores ------------------------------------------------------------

# The server ends the transaction if its client goes quiet inside it for
# longer than this (a worker paused or partitioned while it holds a lock row
# or a shared document's row), instead of every other writer of that row
# waiting for it indefinitely. Set before a transaction takes a contended
# row lock; for that transaction only.
BOUND_IDLE = "SELECT set_config('idle_in_transaction_session_timeout', %s, true)"

# Who owns the session now (a fence asked by a run that no longer holds the lock).
LEASE_EPOCH = "SELECT lease_epoch FROM sessions WHERE id = %(id)s"

# Locks this session holds at or after `name` in name order: acquiring `name`
# then could deadlock with a session taking them the other way round.
HELD_AT_OR_AFTER = """
SELECT name FROM coordination_lock_requests
WHERE session_id = %(session_id)s AND status = 'held' AND name >= %(name)s
ORDER BY name LIMIT 1
"""

# A request joins the lock's FIFO queue (its permits are fixed by first use),
# in the transaction that suspends the session on it.
REQUEST_LOCK = """
WITH l AS (
    INSERT INTO coordination_locks (name, permits) VALUES (%(name)s, %(permits)s)
    ON CONFLICT (name) DO NOTHING
)
INSERT INTO coordination_lock_requests (name, session_id, status)
VALUES (%(name)s, %(session_id)s, 'waiting')
ON CONFLICT (name, session_id) DO NOTHING
"""

RELEASE_LOCK = """
DELETE FROM coordination_lock_requests
WHERE name = %(name)s AND session_id = %(session_id)s AND status = 'held'
RETURNING name
"""

# The lock row, locked: grants of one lock happen one at a time.
LOCK_ROW = """
SELECT permits, fence FROM coordination_locks WHERE name = %(name)s FOR UPDATE
"""

# Requests that no longer count: their session finished (completed, failed,
# cancelled: a dead letter is failed), or a waiting session is no longer
# suspended on this lock (its wait timed out, or it was woken otherwise).
DROP_STALE_REQUESTS = """
DELETE FROM coordination_lock_requests r USING sessions s
WHERE r.name = %(name)s AND s.id = r.session_id
  AND (s.status IN ('completed', 'failed', 'cancelled')
       OR (r.status = 'waiting'
           AND NOT (s.status = 'suspended' AND s.wait -> 'lock' ->> 'name' = %(name)s)))
"""

HELD_COUNT = """
SELECT count(*) AS held FROM coordination_lock_requests
WHERE name = %(name)s AND status = 'held'
"""

# Grant the oldest waiting requests the free permits, each with the next
# fencing token, and wake their sessions. The waiters' session rows are locked
# and re-checked (still suspended on this lock): a wait that timed out, or was
# cancelled, in the instant before the grant is skipped rather than handed a
# lock it would never know it holds. A skipped request is dropped as stale by
# the next grant, and the scheduler's backstop grants what this one left free.
GRANT = """
WITH candidates AS (
    SELECT r.id, r.session_id
    FROM coordination_lock_requests r JOIN sessions s ON s.id = r.session_id
    WHERE r.name = %(name)s AND r.status = 'waiting'
      AND s.status = 'suspended' AND s.wait -> 'lock' ->> 'name' = %(name)s
    ORDER BY r.id
    LIMIT %(free)s
    FOR UPDATE OF s
), next AS (
    SELECT id, session_id, row_number() OVER (ORDER BY id) AS k FROM candidates
), g AS (
    UPDATE coordination_lock_requests r
    SET status = 'held', token = %(fence)s + next.k, token_epoch = NULL, granted_at = now()
    FROM next WHERE r.id = next.id
    RETURNING r.session_id, r.token
), l AS (
    UPDATE coordination_locks SET fence = %(fence)s + (SELECT count(*) FROM g)
    WHERE name = %(name)s
), s AS (
    UPDATE sessions SET
        status = 'pending',
        wake = jsonb_build_object('kind', 'lock', 'topic', %(name)s::text,
                                  'payload', jsonb_build_object('name', %(name)s::text,
                                                                'token', g.token)),
        wake_at = NULL,
        updated_at = now()
    FROM g
    WHERE sessions.id = g.session_id AND sessions.status = 'suspended'
    RETURNING sessions.id, sessions.step_seq, sessions.cursor, g.token, sessions.priority
), c AS (
    UPDATE callbacks SET status = 'closed', closed_at = now()
    FROM s WHERE callbacks.session_id = s.id AND callbacks.status = 'open'
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'resumed',
           jsonb_build_object('by', 'lock', 'name', %(name)s::text, 'token', token)
    FROM s
)
SELECT id, priority FROM s
"""

# The holder's request, if this epoch of the session still owns its lease.
HELD_BY = """
SELECT r.id, r.token, r.token_epoch
FROM coordination_lock_requests r JOIN sessions s ON s.id = r.session_id
WHERE r.name = %(name)s AND r.session_id = %(session_id)s AND r.status = 'held'
  AND s.lease_epoch = %(epoch)s AND s.status = 'running'
FOR UPDATE OF r
"""

# A new run of the holder (another lease epoch) gets a new, larger token: the
# previous run's token is stale from now on.
REISSUE_TOKEN = """
WITH l AS (
    UPDATE coordination_locks SET fence = fence + 1 WHERE name = %(name)s RETURNING fence
)
UPDATE coordination_lock_requests SET token = (SELECT fence FROM l), token_epoch = %(epoch)s
WHERE id = %(id)s
RETURNING token
"""

CLAIM_TOKEN = """
UPDATE coordination_lock_requests SET token_epoch = %(epoch)s WHERE id = %(id)s
"""

LOCKS_WITH_WAITERS = """
SELECT DISTINCT name FROM coordination_lock_requests WHERE status = 'waiting' LIMIT %(limit)s
"""


# -- child sessions ------------------------------------------------------------------

# Children spawned by a step, created in its commit transaction. Their ids are
# deterministic (parent, step sequence, call index), so a replayed step finds
# them and creates nothing twice.
SPAWN_CHILDREN = """
WITH s AS (
    -- A child has its parent's priority.
    INSERT INTO sessions (id, agent, status, cursor, state, input, parent_id, priority)
    SELECT (c ->> 'id')::uuid, c ->> 'agent', 'pending', NULL, '{}'::jsonb, c -> 'input',
           %(parent_id)s, (SELECT priority FROM sessions WHERE id = %(parent_id)s)
    FROM jsonb_array_elements(%(children)s::jsonb) AS c
    ON CONFLICT (id) DO NOTHING
    RETURNING id, agent
)
INSERT INTO audit_events (session_id, event_type, payload)
SELECT id, 'session_created', jsonb_build_object('agent', agent, 'parent_id', %(parent_id)s::text)
FROM s
"""

# Wake the parent suspended on its children once enough of them finished: all,
# any or N (``need``). A failed child counts when the wait's ``on_failure`` is
# ``inform``, or (``wait``) once its dead letter is no longer open: retried,
# it runs again and counts when it ends; discarded, it counts as a failure.
# The parent row is locked, so concurrent finishing children wake it once.
#
# Under ``inform`` the parent handles the failures it is woken with: in the
# same statement each such child's open dead letter is discarded by the
# parent (``session:<parent id>``, an audit event on the child) and its
# pending alert cancelled, so no one is paged for what the parent's code
# dealt with. Until then the alert is held back (``alert_queries``). A dead
# letter whose saga failed stays open: the parent knows, but the effects its
# compensations could not undo still need an operator.
HANDLED_BY_PARENT = 'handled by its parent session %s (on_failure="inform")'

WAKE_PARENT = """
WITH p AS (
    SELECT id, wait FROM sessions
    WHERE id = coalesce(%(parent_id)s::uuid,
                        (SELECT parent_id FROM sessions WHERE id = %(child_id)s::uuid))
      AND status = 'suspended' AND wait ? 'children'
    FOR UPDATE
), kids AS (
    -- Only ids that are uuids: a wait stored before Children(...) checked its
    -- ids would otherwise fail this statement, and with it the scheduler's
    -- backstop for every parent after it.
    SELECT k::uuid AS id FROM p, jsonb_array_elements_text(p.wait -> 'children' -> 'ids') AS k
    WHERE k ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
), done AS (
    SELECT c.id, c.status, c.result, c.error FROM sessions c JOIN kids ON c.id = kids.id
    WHERE c.status IN ('completed', 'cancelled')
       OR (c.status = 'failed'
           AND ((SELECT wait -> 'children' ->> 'on_failure' FROM p) = 'inform'
                OR NOT EXISTS (SELECT 1 FROM dead_letters d
                               WHERE d.session_id = c.id AND d.status = 'open')))
), ready AS (
    SELECT p.id FROM p
    WHERE (SELECT count(*) FROM done) >= (p.wait -> 'children' ->> 'need')::int
), s AS (
    UPDATE sessions SET
        status = 'pending',
        wake = jsonb_build_object(
            'kind', 'children',
            'payload', jsonb_build_object(
                'results', (SELECT coalesce(jsonb_object_agg(id::text, result)
                                            FILTER (WHERE status = 'completed'), '{}'::jsonb)
                            FROM done),
                'failures', (SELECT coalesce(jsonb_object_agg(
                                 id::text, jsonb_build_object('status', status, 'error', error))
                                 FILTER (WHERE status <> 'completed'), '{}'::jsonb)
                             FROM done))),
        wake_at = NULL,
        updated_at = now()
    FROM ready
    WHERE sessions.id = ready.id AND sessions.status = 'suspended'
    RETURNING sessions.id, sessions.step_seq, sessions.cursor, sessions.priority
), c AS (
    UPDATE callbacks SET status = 'closed', closed_at = now()
    FROM s WHERE callbacks.session_id = s.id AND callbacks.status = 'open'
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'resumed',
           jsonb_build_object('by', 'children', 'finished', (SELECT count(*) FROM done))
    FROM s
), handled AS (
    UPDATE dead_letters d SET
        status = 'discarded',
        resolved_at = now(),
        resolved_by = 'session:' || s.id::text,
        resolution = format(%(handled)s, s.id)
    FROM s, done
    WHERE d.session_id = done.id AND done.status = 'failed' AND d.status = 'open'
      AND d.compensation <> 'failed'
      AND (SELECT wait -> 'children' ->> 'on_failure' FROM p) = 'inform'
    RETURNING d.id, d.session_id, d.resolved_by, d.resolution, s.id AS parent_id
), quiet AS (
    UPDATE alerts a SET status = 'cancelled'
    FROM handled h
    WHERE a.session_id = h.session_id AND a.status = 'pending' AND a.kind = 'dead_letter'
      AND a.payload ->> 'dead_letter_id' = h.id::text
), he AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT h.session_id, c.step_seq, c.cursor, 'dead_letter_discarded',
           jsonb_build_object('dead_letter_id', h.id, 'by', h.resolved_by,
                              'reason', h.resolution, 'parent_id', h.parent_id)
    FROM handled h JOIN sessions c ON c.id = h.session_id
)
SELECT id, (SELECT array_agg(id ORDER BY id) FROM handled) AS handled, priority FROM s
"""

# Run before WAKE_PARENT when a child finishes: whether the parent waits for
# all the children it names and one of them is still running, in which case
# it cannot wake yet. The partial index holds only unfinished children, so
# this reads about one entry (the ids test is on the parent's own row) and
# does not lock the parent: only the last child runs the full count. Each
# child asks after its own commit, so the last one to commit sees the others
# finished.
STILL_WAITING_FOR_ALL = f"""
SELECT EXISTS (
    SELECT 1 FROM sessions p JOIN sessions c ON c.parent_id = p.id
    WHERE p.id = %(parent_id)s AND p.status = 'suspended' AND p.wait ? 'children'
      AND (p.wait -> 'children' ->> 'need')::int
          >= jsonb_array_length(p.wait -> 'children' -> 'ids')
      AND c.status NOT IN ({TERMINAL})
      AND p.wait -> 'children' -> 'ids' ? c.id::text
) AS waiting
"""

# Parents waiting on children, for the scheduler's backstop (a child that
# finished while its worker died before waking the parent, a discarded dead
# letter). Every tick asks, so a partial index holds just these sessions
# (migration 0017): through the status index the question read every
# suspended session, however long they wait and on what.
WAITING_PARENTS_WHERE = "status = 'suspended' AND wait ? 'children'"
WAITING_PARENTS = f"""
SELECT id FROM sessions WHERE {WAITING_PARENTS_WHERE}
ORDER BY updated_at LIMIT %(limit)s
"""

UNFINISHED_CHILDREN = """
SELECT id FROM sessions
WHERE parent_id = %(parent_id)s AND status NOT IN ('completed', 'failed', 'cancelled')
"""

# A session finished: let go of its locks (the names, to grant them next) and
# say whether it has a parent to wake, in one round trip, since every
# finishing session runs it.
SESSION_FINISHED = """
WITH released AS (
    DELETE FROM coordination_lock_requests WHERE session_id = %(id)s RETURNING name
)
SELECT coalesce((SELECT array_agg(DISTINCT name) FROM released), '{}') AS names,
       (SELECT parent_id FROM sessions WHERE id = %(id)s) AS parent_id
"""


# Retention of shared documents' histories: versions older than the retention
# age, oldest first, in bounded batches; a document's current version stays
# (its history always shows who wrote what it holds now).
RETIRE_SHARED_VERSIONS = """
WITH old AS (
    SELECT v.name, v.version FROM shared_versions v
    WHERE v.created_at < now() - make_interval(secs => %(age_seconds)s)
      AND NOT EXISTS (SELECT 1 FROM shared_documents d
                      WHERE d.name = v.name AND d.version = v.version)
    ORDER BY v.created_at
    LIMIT %(limit)s
)
DELETE FROM shared_versions v USING old
WHERE v.name = old.name AND v.version = old.version
RETURNING v.name
"""
