"""Named SQL for suspending and waking sessions, and for inbound deliveries.

The wake-up rule, shared by every path: a suspended session becomes pending
when a pending delivery matches its wait (a callback token or a signal topic
it names), or when its timer, deadline or next poll comes due. Each wake is a
single UPDATE guarded by ``status = 'suspended'``, so however many receivers,
workers and schedulers race, a session wakes once per wait. The typed
functions that run the statements are in ``wait_ops.py``.
"""

from __future__ import annotations

from resumable.models import columns

# Create (or, when the step is replayed, find again) a callback token. Claim:
# a worker that lost its lease cannot hand out new tokens.
CREATE_CALLBACK = """
WITH owner AS (
    SELECT id FROM sessions
    WHERE id = %(session_id)s AND lease_epoch = %(epoch)s AND status = 'running'
), ins AS (
    INSERT INTO callbacks (token, session_id, step_seq, call_index, topic, status)
    SELECT %(token)s, id, %(step_seq)s, %(call_index)s, %(topic)s, 'open' FROM owner
    ON CONFLICT (session_id, step_seq, call_index) DO NOTHING
    RETURNING token
)
SELECT (SELECT count(*) FROM owner) AS owned,
       coalesce((SELECT token FROM ins),
                (SELECT token FROM callbacks WHERE session_id = %(session_id)s
                   AND step_seq = %(step_seq)s AND call_index = %(call_index)s)) AS token
"""

# Wake a suspended session with its oldest pending delivery that the wait names.
# Run in the transaction that stores a delivery (with the session row locked,
# see below) and after every suspension commits: whichever runs second sees the
# other's committed row, so no wake-up is lost.
WAKE_FROM_DELIVERIES = """
WITH d AS (
    SELECT d.id, d.kind, d.topic, d.payload, d.received_at
    FROM deliveries d JOIN sessions s ON s.id = d.session_id
    WHERE d.session_id = %(id)s AND d.status = 'pending' AND s.status = 'suspended'
      AND ((d.kind = 'callback' AND coalesce(s.wait -> 'callbacks', '[]'::jsonb) ? d.token)
        OR (d.kind = 'signal' AND coalesce(s.wait -> 'signals', '[]'::jsonb) ? d.topic))
    ORDER BY d.id
    LIMIT 1
), s AS (
    UPDATE sessions SET
        status = 'pending',
        -- received_at: the claim measures the resume latency from it.
        wake = jsonb_build_object('kind', d.kind, 'topic', d.topic, 'payload', d.payload,
                                  'delivery_id', d.id, 'received_at', d.received_at),
        wake_at = NULL,
        updated_at = now()
    FROM d
    WHERE sessions.id = %(id)s AND sessions.status = 'suspended'
    RETURNING sessions.id, sessions.step_seq, sessions.cursor, d.id AS delivery_id, d.kind,
              d.topic, sessions.priority
), c AS (
    UPDATE callbacks SET status = 'closed', closed_at = now()
    FROM s WHERE callbacks.session_id = %(id)s AND callbacks.status = 'open'
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'resumed',
           jsonb_build_object('by', kind, 'topic', topic, 'delivery_id', delivery_id)
    FROM s
)
SELECT id, delivery_id, kind, priority FROM s
"""

# Suspended sessions that a pending delivery should already have woken (a
# receiver that died between its commit and its wake attempt). The scheduler
# runs WAKE_FROM_DELIVERIES for each.
STRANDED_DELIVERIES = """
SELECT DISTINCT s.id
FROM deliveries d JOIN sessions s ON s.id = d.session_id
WHERE d.status = 'pending' AND s.status = 'suspended'
  AND ((d.kind = 'callback' AND coalesce(s.wait -> 'callbacks', '[]'::jsonb) ? d.token)
    OR (d.kind = 'signal' AND coalesce(s.wait -> 'signals', '[]'::jsonb) ? d.topic))
LIMIT %(limit)s
"""

# Timers, deadlines and polls that have come due. SKIP LOCKED plus the status
# guard make two schedulers hand each due session out once.
WAKE_DUE = """
WITH due AS (
    SELECT id, wait FROM sessions
    WHERE status = 'suspended' AND wake_at <= now()
    ORDER BY wake_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), s AS (
    UPDATE sessions SET
        status = 'pending',
        wake_at = NULL,
        updated_at = now(),
        wake = CASE
            WHEN (due.wait ->> 'timer_at')::timestamptz <= now()
                THEN jsonb_build_object('kind', 'timer')
            WHEN (due.wait ->> 'deadline')::timestamptz <= now()
                THEN jsonb_build_object('kind', 'timeout')
            -- When the check fell due (the old wake_at): the next one is due
            -- `every` after it, not after the tick that ran this one.
            ELSE jsonb_build_object('kind', 'poll_check', 'due_at', sessions.wake_at)
        END
    FROM due
    WHERE sessions.id = due.id AND sessions.status = 'suspended'
    RETURNING sessions.id, sessions.step_seq, sessions.cursor, sessions.wake ->> 'kind' AS kind,
              sessions.priority
), c AS (
    UPDATE callbacks SET status = 'closed', closed_at = now()
    FROM s WHERE callbacks.session_id = s.id AND callbacks.status = 'open'
                 AND s.kind <> 'poll_check'
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'resumed', jsonb_build_object('by', kind)
    FROM s WHERE kind <> 'poll_check'
)
SELECT id, kind, priority FROM s
"""

# A poll check found nothing yet: back to sleep until the next check, without
# a checkpoint (the state did not change).
RESUSPEND_AFTER_POLL = """
UPDATE sessions SET
    status = 'suspended',
    wake = NULL,
    wake_at = %(wake_at)s,
    wait = jsonb_set(wait, '{polls}', to_jsonb(coalesce((wait ->> 'polls')::int, 0) + 1)),
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = now()
WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status = 'running'
RETURNING id
"""

# -- inbound deliveries (run inside one transaction by the receiver) -----------------
#
# The receiver locks the session row first (as every writer of a session and
# its callbacks does: sessions, then callbacks), stores the delivery and runs
# WAKE_FROM_DELIVERIES before it commits. Holding the lock is what makes the
# wake in the same transaction safe: a worker's suspension either committed
# before the lock was granted (the wake statement, with a newer snapshot, sees
# the session suspended) or waits for this commit (and the worker's own wake
# statement after it sees the delivery). NO KEY UPDATE, not SHARE: two
# deliveries for one session queue up instead of deadlocking on the upgrade.

# The session a callback token names (models/callback_tokens.py), or, for a
# token made before they carried it (%(session_id)s NULL), the one its
# callback row names: with the former, every statement of the receipt finds
# its rows by session as well as by token.
_SESSION_OF_TOKEN = (
    "coalesce(%(session_id)s::uuid, (SELECT session_id FROM callbacks WHERE token = %(token)s))"
)

LOCK_SESSION_OF_CALLBACK = f"""
SELECT id FROM sessions
WHERE id = {_SESSION_OF_TOKEN}
FOR NO KEY UPDATE
"""

LOCK_CALLBACK = f"""
SELECT c.token, c.session_id, c.topic, c.status AS callback_status,
       s.status AS session_status, s.step_seq, s.cursor
FROM callbacks c JOIN sessions s ON s.id = c.session_id
WHERE c.token = %(token)s AND c.session_id = {_SESSION_OF_TOKEN}
  AND s.id = {_SESSION_OF_TOKEN}
FOR UPDATE OF c
"""

CALLBACK_DELIVERY = f"""
SELECT id, dedupe_key, status, payload FROM deliveries
WHERE kind = 'callback' AND token = %(token)s AND session_id = {_SESSION_OF_TOKEN}
"""

INSERT_CALLBACK_DELIVERY = """
WITH d AS (
    INSERT INTO deliveries (session_id, kind, token, topic, dedupe_key, payload, status)
    VALUES (%(session_id)s, 'callback', %(token)s, %(topic)s, %(dedupe_key)s,
            %(payload)s::jsonb, 'pending')
    RETURNING id
), c AS (
    UPDATE callbacks SET status = 'received' WHERE token = %(token)s
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT %(session_id)s, %(step_seq)s, %(step)s, 'callback_received',
           jsonb_build_object('delivery_id', id, 'topic', %(topic)s::text,
                              'dedupe_key', %(dedupe_key)s::text)
    FROM d
)
SELECT id FROM d
"""

# The accepting half of a callback, sent in the same round trip as the locks
# and lookups above (the receiver cannot wait for their answers first): the
# delivery is stored only if the callback is still open, nothing was delivered
# for its token and the session is not over, the conditions the receiver reads
# back from LOCK_CALLBACK and CALLBACK_DELIVERY to name its verdict. Each
# statement of the transaction takes its snapshot after the locks were
# granted, so both see the same rows.
INSERT_OPEN_CALLBACK_DELIVERY = f"""
WITH t AS (
    SELECT c.token, c.session_id, c.topic, s.step_seq, s.cursor
    FROM callbacks c JOIN sessions s ON s.id = c.session_id
    WHERE c.token = %(token)s AND c.status <> 'closed'
      AND c.session_id = {_SESSION_OF_TOKEN} AND s.id = {_SESSION_OF_TOKEN}
      AND s.status <> ALL(%(terminal)s::text[])
      AND NOT EXISTS (SELECT 1 FROM deliveries d
                      WHERE d.kind = 'callback' AND d.token = c.token
                        AND d.session_id = {_SESSION_OF_TOKEN})
), d AS (
    INSERT INTO deliveries (session_id, kind, token, topic, dedupe_key, payload, status)
    SELECT session_id, 'callback', token, topic, %(dedupe_key)s, %(payload)s::jsonb, 'pending'
    FROM t
    RETURNING id
), c AS (
    UPDATE callbacks SET status = 'received'
    WHERE token = %(token)s AND session_id = {_SESSION_OF_TOKEN} AND EXISTS (SELECT 1 FROM d)
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT t.session_id, t.step_seq, t.cursor, 'callback_received',
           jsonb_build_object('delivery_id', d.id, 'topic', t.topic,
                              'dedupe_key', %(dedupe_key)s::text)
    FROM t, d
)
SELECT id FROM d
"""

# WAKE_FROM_DELIVERIES for the session a callback token belongs to.
WAKE_FROM_CALLBACK = WAKE_FROM_DELIVERIES.replace("%(id)s", _SESSION_OF_TOKEN)

LOCK_SESSION_FOR_SIGNAL = """
SELECT id, status, step_seq, cursor FROM sessions WHERE id = %(session_id)s FOR NO KEY UPDATE
"""

INSERT_SIGNAL_DELIVERY = """
WITH d AS (
    INSERT INTO deliveries (session_id, kind, topic, dedupe_key, payload, status)
    VALUES (%(session_id)s, 'signal', %(topic)s, %(dedupe_key)s, %(payload)s::jsonb, 'pending')
    ON CONFLICT (session_id, topic, dedupe_key)
        WHERE kind = 'signal' AND dedupe_key IS NOT NULL DO NOTHING
    RETURNING id
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT %(session_id)s, %(step_seq)s, %(step)s, 'signal_received',
           jsonb_build_object('delivery_id', id, 'topic', %(topic)s::text,
                              'dedupe_key', %(dedupe_key)s::text, 'by', %(actor)s::text)
    FROM d
)
SELECT id FROM d
"""

SIGNAL_DELIVERY = """
SELECT id, status, payload FROM deliveries
WHERE kind = 'signal' AND session_id = %(session_id)s AND topic = %(topic)s
  AND dedupe_key = %(dedupe_key)s
"""

REJECTED_DELIVERY = """
INSERT INTO audit_events (session_id, seq, step, event_type, payload)
VALUES (%(session_id)s, %(step_seq)s, %(step)s, %(event)s, %(payload)s::jsonb)
"""

# How long ago a delivery was stored, on the database's clock (the resume
# latency of a run a claim did not measure).
DELIVERY_AGE = """
SELECT kind, extract(epoch FROM clock_timestamp() - received_at)::float8 AS seconds
FROM deliveries WHERE id = %(id)s
"""

# -- reads -----------------------------------------------------------------------------

CALLBACK_COLUMNS = ", ".join(columns.CALLBACK_FIELDS)

CALLBACKS_BY_TOKEN = f"SELECT {CALLBACK_COLUMNS} FROM callbacks WHERE token = ANY(%(tokens)s)"
