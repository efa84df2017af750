"""Concurrency slots, as the worker and the scheduler share them: waking the
sessions that wait for a key's free slot, and reading how each key stands.

A run that held a slot wakes its key's oldest waiters as it ends (as many as
the key has free slots: ``wake_waiters``); the scheduler's pass wakes the
ones that wake missed (``wake_missed``: a worker that died holding a slot,
whose slot frees with its lease; a message lost on its way). Both commit
first and send after (``enqueue_after_commit``); a send that fails leaves
the waiter to the next pass, ``grace`` seconds later. See
``resumable/limits.py`` for the rules.
"""

from __future__ import annotations

import logging
import uuid

import psycopg

from resumable.broker.messages import BrokerSource, broker_of, enqueue_after_commit
from resumable.models import slot_queries
from resumable.models.database import Database
from resumable.models.slot_queries import SlotUsage
from resumable.priorities import Routed
from resumable.settings import Settings

logger = logging.getLogger(__name__)

# Keys one scheduler pass looks at.
MAX_KEYS_PER_PASS = 500
# How long a transaction holding a key's lock may sit idle (a paused or
# partitioned process) before the server ends it, freeing the key.
LOCK_IDLE_SECONDS = 5.0


def woken_for_free_slots(db: Database, key: str, limit: int, *, grace: float = 0.0) -> list[Routed]:
    """Under the key's lock, the waiters the key's free slots make room for
    (committed as woken: ``updated_at``); the caller sends their messages."""
    # Not pipelined: the server ends a transaction whose client idles in it
    # only once a sync has told it so (see ``slot_queries.LOCK_KEY``).
    with db.connection() as conn, conn.transaction():
        slot_queries.lock_key(conn, key, idle_seconds=LOCK_IDLE_SECONDS)
        return slot_queries.wake_waiters(conn, key, limit, grace=grace)


def wake_waiters(
    settings: Settings, db: Database, broker: BrokerSource, key: str, limit: int
) -> list[uuid.UUID]:
    """A run that held a slot of `key` ended: wake the oldest waiters.

    Asked first without the key's lock: most runs end with nobody waiting,
    and then this is one read. A claim that parks just after that read (its
    count taken before this run's end committed) is woken by the
    scheduler's pass instead (``wake_missed``), a pass or two later."""
    with db.connection() as conn:
        if not slot_queries.has_waiters(conn, key):
            return []
    woken = woken_for_free_slots(db, key, limit)
    if woken:
        enqueue_after_commit(broker_of(broker), settings, woken, why="a concurrency slot freed")
    return [uuid.UUID(str(route.session_id)) for route in woken]


def wake_missed(
    settings: Settings,
    db: Database,
    broker: BrokerSource,
    *,
    grace: float,
    max_keys: int = MAX_KEYS_PER_PASS,
) -> list[uuid.UUID]:
    """The scheduler's pass: every key with a free slot whose oldest waiter
    nobody woke in the last `grace` seconds."""
    with db.connection() as conn:
        keys = slot_queries.keys_to_wake(conn, grace=grace, max_keys=max_keys)
    woken: list[Routed] = []
    for key in keys:
        try:
            woken += woken_for_free_slots(db, key.key, key.limit, grace=grace)
        except psycopg.errors.LockNotAvailable:
            continue  # its lock is held by a stalled claimant: the next pass

    if woken:
        logger.info(
            "woke %d sessions waiting for a concurrency slot that no run's end had woken",
            len(woken),
            extra={"action": "slot_waiters_woken"},
        )
        enqueue_after_commit(broker_of(broker), settings, woken, why="a concurrency slot was free")
    return [uuid.UUID(str(route.session_id)) for route in woken]


def usage(db: Database, *, limit: int = 50) -> list[SlotUsage]:
    """The busiest keys: running and waiting sessions of each."""
    with db.connection() as conn:
        return slot_queries.slot_usage(conn, limit=limit)
