"""The sessions that let their worker go to wait for a rate limit's turn.

Such a session is ``retrying`` with an error of code ``rate_limited`` naming
the limit (``queue/rate_turns.py``); the retrying sessions are few and
indexed by status, so the operators' view reads them without a scan of the
rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from resumable.models import rows

RATE_WAITERS = """
SELECT error ->> 'rate_limit' AS name,
       count(*) AS waiting,
       extract(epoch FROM now() - min(updated_at))::float8 AS oldest_wait_seconds
FROM sessions
WHERE status = 'retrying' AND error ->> 'code' = 'rate_limited'
GROUP BY 1
ORDER BY waiting DESC, name
LIMIT %(limit)s
"""


@dataclass(frozen=True)
class RateWaiters:
    """A row of RATE_WAITERS: the sessions waiting for a turn of one limit."""

    name: str
    waiting: int
    oldest_wait_seconds: float


def rate_waiters(conn: psycopg.Connection[Any], *, limit: int) -> list[RateWaiters]:
    return rows.every(conn, RateWaiters, RATE_WAITERS, {"limit": limit})
