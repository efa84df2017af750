"""The alert outbox: operator alerts written with their dead letter, POSTed later."""

from __future__ import annotations

# Alerts to POST: taken for a minute (so two schedulers do not both send one),
# then marked sent, or put back with a later attempt time.
TAKE_DUE_ALERTS = """
UPDATE alerts SET next_attempt_at = now() + interval '60 seconds', attempts = attempts + 1
WHERE id IN (
    SELECT id FROM alerts WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
RETURNING id, kind, session_id, payload, attempts, created_at
"""


ALERT_SENT = "UPDATE alerts SET status = 'sent', sent_at = now() WHERE id = %(id)s"

ALERT_FAILED = """
UPDATE alerts SET
    status = CASE WHEN %(give_up)s THEN 'failed' ELSE 'pending' END,
    last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => %(delay)s)
WHERE id = %(id)s
"""
