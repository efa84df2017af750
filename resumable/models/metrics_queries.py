"""What a /metrics scrape counts in PostgreSQL."""

from __future__ import annotations

SESSIONS_BY_AGENT_AND_STATUS = """
SELECT agent, status, count(*) AS n FROM sessions GROUP BY agent, status
"""

BACKLOG = """
SELECT (SELECT count(*) FROM dead_letters WHERE status = 'open') AS dead_letters,
       (SELECT count(*) FROM alerts WHERE status = 'pending') AS alerts,
       (SELECT coalesce(extract(epoch FROM now() - min(updated_at)), 0)
          FROM sessions WHERE status = 'pending') AS oldest_pending
"""
