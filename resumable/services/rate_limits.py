"""How each rate limit stands, for the operators' views (CLI, HTTP, console,
metrics): its line in Redis (``broker/rate_limiter.py``) beside the sessions
in PostgreSQL that let their worker go to wait for a turn.

A limit shows while its Redis line lives (one period after its last turn)
or while a session waits for it; a Redis that cannot be reached shows the
waiting sessions alone.
"""

from __future__ import annotations

import logging

import redis

from resumable.broker.rate_limiter import LimitUsage, usage
from resumable.models import rate_wait_queries
from resumable.models.database import Database
from resumable.schemas import RateLimitInfo

logger = logging.getLogger(__name__)


def rate_limits(
    db: Database, client: redis.Redis, namespace: str, queue: str, *, limit: int = 50
) -> list[RateLimitInfo]:
    """The limits in use, the most sessions waiting first, then the furthest next turn."""
    with db.connection() as conn:
        waiters = {w.name: w for w in rate_wait_queries.rate_waiters(conn, limit=limit)}
    try:
        lines = {u.name: u for u in usage(client, namespace, queue, top=limit)}
    except redis.RedisError as exc:
        logger.warning("rate limits: Redis unreachable (%s); showing waiting sessions only", exc)
        lines = {}
    infos = []
    for name in lines.keys() | waiters.keys():
        line = lines.get(name) or LimitUsage(name, "", 0.0, 0.0, 0.0, 0, 0, 0)
        waiting = waiters.get(name)
        infos.append(
            RateLimitInfo(
                name=name,
                description=line.description,
                next_turn_in_seconds=max(line.next_free_in, 0.0),
                reserved_ahead_seconds=max(line.reserved_ahead, 0.0),
                held_back_seconds=max(line.held_for, 0.0),
                turns=line.granted,
                waited_in_place=line.queued,
                refused=line.refused,
                sessions_waiting=waiting.waiting if waiting else 0,
                oldest_wait_seconds=waiting.oldest_wait_seconds if waiting else None,
            )
        )
    infos.sort(key=lambda i: (-i.sessions_waiting, -i.next_turn_in_seconds, i.name))
    return infos[:limit]
