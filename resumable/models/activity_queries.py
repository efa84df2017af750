"""Named SQL for the activity samples behind the console's charts, with the
typed functions that run them.

One row a minute: the live sessions by status (from the partial index of
live sessions, as ``/metrics`` counts them) and PostgreSQL's running counts
of rows inserted into ``checkpoints`` (one per committed step) and
``dead_letters``. Those counts are cumulative and cost nothing to read; a
chart plots their differences. The statement is safe from several
schedulers at once: the minute is the key, the first one in writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from resumable.models import rows
from resumable.models.metrics_queries import TERMINAL

# The live sessions' predicate is the partial index's, word for word.
SAMPLE_ACTIVITY = f"""
INSERT INTO activity_samples (at, pending, running, suspended, retrying, blocked, steps, failures)
SELECT date_trunc('minute', now()),
       count(*) FILTER (WHERE status = 'pending'),
       count(*) FILTER (WHERE status IN ('running', 'compensating')),
       count(*) FILTER (WHERE status = 'suspended'),
       count(*) FILTER (WHERE status = 'retrying'),
       count(*) FILTER (WHERE status = 'blocked'),
       coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'checkpoints'
                   AND schemaname = current_schema()), 0),
       coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'dead_letters'
                   AND schemaname = current_schema()), 0)
FROM sessions WHERE status NOT IN ({TERMINAL})
ON CONFLICT (at) DO NOTHING
"""

FORGET_OLD_SAMPLES = "DELETE FROM activity_samples WHERE at < now() - interval '2 days'"

SAMPLES_SINCE = """
SELECT at, pending, running, suspended, retrying, blocked, steps, failures
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


def sample(conn: psycopg.Connection[Any]) -> None:
    """Write this minute's sample (if no scheduler has) and forget old ones."""
    rows.run(conn, SAMPLE_ACTIVITY)
    rows.run(conn, FORGET_OLD_SAMPLES)


def since(conn: psycopg.Connection[Any], moment: datetime) -> list[ActivitySample]:
    return rows.every(conn, ActivitySample, SAMPLES_SINCE, {"since": moment})
