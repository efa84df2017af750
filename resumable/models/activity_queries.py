"""Named SQL for the activity samples behind the console's charts, with the
typed functions that run them.

One row a minute: the live sessions by status (from the partial index of
live sessions, as ``/metrics`` counts them) and PostgreSQL's running counts
of rows inserted into ``checkpoints`` (one per committed step) and
``dead_letters``; and the latency of the resumes claimed since the previous
sample (``waited_ms`` in their claims' audit events). The counts are
cumulative and cost nothing to read; a chart plots their differences. The
statement is safe from several schedulers at once: the minute is the key,
the first one in writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from resumable.models import rows
from resumable.models.metrics_queries import ACTIVE_WHERE

# The most audit events one sample reads for its resumes (a scheduler down
# for a day does not make its first sample read a day of the log).
MAX_EVENTS_SCANNED = 1_000_000

# The active sessions' predicate is the partial index's, word for word; the
# suspended and blocked ones are read from their kept counts (migration 0023:
# a minute's sample would otherwise count every session in a long wait). The
# resumes are the claims since the previous sample's last audit event that
# record a resume's latency (`waited_ms`, from the delivery's arrival to the
# claim): a range of the audit log's primary key, at most MAX_EVENTS_SCANNED
# rows however long no scheduler sampled.
SAMPLE_ACTIVITY = f"""
WITH previous AS (
    SELECT last_event_id FROM activity_samples ORDER BY at DESC LIMIT 1
), newest AS (
    SELECT coalesce(max(id), 0) AS id FROM audit_events
), resumes AS (
    SELECT (payload ->> 'waited_ms')::float8 AS ms FROM audit_events
    WHERE id > greatest((SELECT last_event_id FROM previous),
                        (SELECT id FROM newest) - {MAX_EVENTS_SCANNED})
      AND id <= (SELECT id FROM newest)
      AND event_type = 'run_started' AND payload ? 'waited_ms'
), latency AS (
    SELECT count(*)::int AS n,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95
    FROM resumes
), active AS (
    SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
           count(*) FILTER (WHERE status IN ('running', 'compensating')) AS running,
           count(*) FILTER (WHERE status = 'retrying') AS retrying
    FROM sessions WHERE {ACTIVE_WHERE}
), resting AS (
    SELECT coalesce(sum(n) FILTER (WHERE status = 'suspended'), 0) AS suspended,
           coalesce(sum(n) FILTER (WHERE status = 'blocked'), 0) AS blocked
    FROM resting_session_counts
), live AS (
    SELECT active.pending, active.running, resting.suspended, active.retrying, resting.blocked
    FROM active, resting
)
INSERT INTO activity_samples (at, pending, running, suspended, retrying, blocked, steps,
                              failures, last_event_id, resumes, resume_p50_ms, resume_p95_ms)
SELECT date_trunc('minute', now()), live.pending, live.running, live.suspended, live.retrying,
       live.blocked,
       coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'checkpoints'
                   AND schemaname = current_schema()), 0),
       coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'dead_letters'
                   AND schemaname = current_schema()), 0),
       (SELECT id FROM newest),
       -- The first sample has no previous one to count from: unknown.
       CASE WHEN EXISTS (SELECT 1 FROM previous) THEN latency.n END,
       latency.p50, latency.p95
FROM live, latency
ON CONFLICT (at) DO NOTHING
"""

FORGET_OLD_SAMPLES = "DELETE FROM activity_samples WHERE at < now() - interval '2 days'"

SAMPLES_SINCE = """
SELECT at, pending, running, suspended, retrying, blocked, steps, failures, resumes,
       resume_p50_ms, resume_p95_ms
FROM activity_samples WHERE at >= %(since)s ORDER BY at
"""


@dataclass(frozen=True)
class ActivitySample:
    """A row of SAMPLES_SINCE."""

    at: datetime
    pending: int
    running: int
    suspended: int
    retrying: int
    blocked: int
    steps: int
    failures: int
    resumes: int | None = None
    resume_p50_ms: float | None = None
    resume_p95_ms: float | None = None


def sample(conn: psycopg.Connection[Any]) -> None:
    """Write this minute's sample (if no scheduler has) and forget old ones."""
    rows.run(conn, SAMPLE_ACTIVITY)
    rows.run(conn, FORGET_OLD_SAMPLES)


def since(conn: psycopg.Connection[Any], moment: datetime) -> list[ActivitySample]:
    return rows.every(conn, ActivitySample, SAMPLES_SINCE, {"since": moment})
