"""Fenced locks and semaphores that sessions wait for durably.

A step asks with ``return ctx.lock(name, then=...)`` (or
``ctx.semaphore(name, permits, then=...)``): the session suspends, its request
joins the lock's FIFO queue in the same transaction, and no worker is held
while it waits. A grant (when a holder releases, finishes, fails, is
cancelled or dead-lettered) wakes the oldest waiters, each with the next
fencing token; the ``then`` step runs with ``ctx.wake.kind == "lock"``.

The lock belongs to the *session*, not to a worker. Losing the lease
(a worker paused or partitioned past its lease) does not release it: the
session's next run still holds it, but ``ctx.fence(name)`` in a new lease
epoch issues a new, larger token, so the old worker's token is stale the
moment the new run uses the lock, and an external system that rejects
tokens below the highest it has seen rejects the zombie's late write.
Pass the token to every write the lock protects.

Deadlocks: a session may acquire locks only in ascending name order (asking
for ``b`` while holding ``c`` fails the step with a ``CoordinationError``), and
``Lock(timeout=...)`` bounds any wait (``ctx.wake.kind == "timeout"``).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import psycopg

from resumable.broker.messages import enqueue_after_commit
from resumable.coordination.shared import CoordinationError, check_name
from resumable.errors import LeaseLostError
from resumable.models import coordination_ops
from resumable.models.database import Database
from resumable.priorities import Routed
from resumable.settings import Settings

if TYPE_CHECKING:
    import dramatiq

logger = logging.getLogger(__name__)


def bound_idle(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Have the server end this transaction if its client goes quiet inside
    it for longer than `seconds` (a worker paused or partitioned while it
    holds a lock row or a shared document's row), instead of every other
    writer of that row waiting for it indefinitely. Called before the
    transaction takes a contended row lock."""
    coordination_ops.bound_idle(conn, seconds)


def request(conn: psycopg.Connection[Any], session_id: uuid.UUID, name: str, permits: int) -> None:
    """Queue the session for `name`, inside the transaction that suspends it."""
    check_name(name, "lock")
    held = coordination_ops.held_at_or_after(conn, session_id, name)
    if held is not None:
        raise CoordinationError(
            f"cannot acquire lock {name!r} while holding {held!r}: acquire locks "
            "in ascending name order (release first, or take them in order)"
        )
    coordination_ops.request_lock(conn, session_id, name, permits)


def release(conn: psycopg.Connection[Any], session_id: uuid.UUID, name: str) -> None:
    """Give `name` up, inside the transaction of the step that released it."""
    if not coordination_ops.release_lock(conn, session_id, name):
        raise CoordinationError(f"this session does not hold lock {name!r}")


def grant(db: Database, name: str, idle_timeout: float) -> list[Routed]:
    """Hand free permits of `name` to the oldest waiters; the sessions woken
    (enqueue them after this returns: the grant is committed)."""
    with db.connection() as conn, conn.transaction():
        bound_idle(conn, idle_timeout)
        lock = coordination_ops.lock_row(conn, name)
        if lock is None:
            return []
        coordination_ops.drop_stale_requests(conn, name)
        free = lock.permits - coordination_ops.held_count(conn, name)
        if free <= 0:
            return []
        return coordination_ops.grant(conn, name, free=free, fence=lock.fence)


def grant_and_wake(
    db: Database, broker: dramatiq.Broker, settings: Settings, names: set[str]
) -> int:
    """Grant each lock and enqueue the sessions it woke, in one send (also
    those granted before a later grant failed); how many woke."""
    woken: list[Routed] = []
    try:
        for name in sorted(names):
            woken += grant(db, name, settings.lease_seconds)
    finally:
        enqueue_after_commit(broker, settings, woken, why="lock granted")
    return len(woken)


def grant_waiting(db: Database, broker: dramatiq.Broker, settings: Settings) -> int:
    """The scheduler's backstop: grant every lock that has waiters (a worker
    that died between a release and its grant left them waiting)."""
    with db.connection() as conn:
        names = coordination_ops.locks_with_waiters(conn, limit=1000)
    return grant_and_wake(db, broker, settings, names)


def fence(db: Database, session_id: uuid.UUID, epoch: int, name: str, idle_timeout: float) -> int:
    """The fencing token of the lock `name` that this run of the session holds."""
    check_name(name, "lock")
    with db.connection() as conn, conn.transaction():
        bound_idle(conn, idle_timeout)
        held = coordination_ops.held_by(conn, session_id, epoch, name)
        if held is None:
            if coordination_ops.lease_epoch(conn, session_id) != epoch:
                raise LeaseLostError("lease lost: another worker owns the session")
            raise CoordinationError(f"this session does not hold lock {name!r}")
        if held.token_epoch is None or held.token_epoch == epoch:
            if held.token_epoch is None:
                coordination_ops.claim_token(conn, held.id, epoch)
            return held.token
        token = coordination_ops.reissue_token(conn, name, held.id, epoch)
        logger.info(
            "lock %r: new fencing token %s for lease epoch %s",
            name,
            token,
            epoch,
            extra={"action": "lock_token_reissued"},
        )
        return token
