"""Named SQL for the operator's dead-letter actions. Each is guarded by the
dead letter's status, so retrying or discarding twice changes nothing."""

from __future__ import annotations

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
    RETURNING sessions.id, sessions.step_seq, sessions.cursor, d.id AS dead_letter_id
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'dead_letter_retried',
           jsonb_build_object('dead_letter_id', dead_letter_id, 'by', %(actor)s::text,
                              'reason', %(reason)s::text, 'state_patch', %(patch)s::jsonb)
    FROM s
)
SELECT id AS session_id FROM s
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
