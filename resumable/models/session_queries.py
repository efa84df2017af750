"""Sessions as a whole: create one (once per idempotency key), find, cancel,
and the reconciler's scan for sessions that should be running but have no
message in flight.
"""

from __future__ import annotations

from resumable.models.agent_queries import SERVED_ELSEWHERE

# Create a session and its first audit event. With an idempotency key that is
# already taken nothing is inserted and no row comes back.
CREATE_SESSION = """
WITH s AS (
    INSERT INTO sessions (id, agent, status, cursor, state, input, idempotency_key,
                          trace_context)
    VALUES (%(id)s, %(agent)s, 'pending', %(cursor)s, '{}'::jsonb, %(input)s::jsonb,
            %(idempotency_key)s, %(trace_context)s::jsonb)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, agent, status
), e AS (
    INSERT INTO audit_events (session_id, event_type, payload)
    SELECT id, 'session_created', jsonb_build_object('agent', agent) FROM s
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
# Sessions no live worker can run (none loads the agent, serves the version
# or migrates it) are left alone (untouched, so the oldest-pending alert sees
# them): a worker that serves them enqueues them when it starts.
RECONCILE = f"""
WITH due AS (
    SELECT id FROM sessions
    WHERE ((status = 'pending' AND updated_at < now() - make_interval(secs => %(grace)s))
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
RETURNING sessions.id, sessions.status
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

SESSION_AGENT = "SELECT agent FROM sessions WHERE id = %s"

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
