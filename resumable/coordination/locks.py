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
from typing import Any

import dramatiq
import psycopg

from resumable.broker.messages import enqueue_after_commit
from resumable.coordination.shared import CoordinationError, check_name
from resumable.errors import LeaseLostError
from resumable.models import coordination_queries as queries
from resumable.models.database import Database
from resumable.settings import Settings

logger = logging.getLogger(__name__)


def bound_idle(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Have the server end this transaction if its client goes quiet inside
    it for longer than `seconds` (a worker paused or partitioned while it
    holds a lock row or a shared document's row), instead of every other
    writer of that row waiting for it indefinitely. Called before the
    transaction takes a contended row lock."""
    conn.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
        [f"{max(1, int(seconds * 1000))}ms"],
    )


def request(conn: psycopg.Connection[Any], session_id: uuid.UUID, name: str, permits: int) -> None:
    """Queue the session for `name`, inside the transaction that suspends it."""
    check_name(name, "lock")
    held = conn.execute(
        queries.HELD_AT_OR_AFTER, {"session_id": session_id, "name": name}
    ).fetchone()
    if held is not None:
        raise CoordinationError(
            f"cannot acquire lock {name!r} while holding {held['name']!r}: acquire locks "
            "in ascending name order (release first, or take them in order)"
        )
    conn.execute(queries.REQUEST_LOCK, {"name": name, "permits": permits, "session_id": session_id})


def release(conn: psycopg.Connection[Any], session_id: uuid.UUID, name: str) -> None:
    """Give `name` up, inside the transaction of the step that released it."""
    row = conn.execute(queries.RELEASE_LOCK, {"name": name, "session_id": session_id}).fetchone()
    if row is None:
        raise CoordinationError(f"this session does not hold lock {name!r}")


def grant(db: Database, name: str, idle_timeout: float) -> list[uuid.UUID]:
    """Hand free permits of `name` to the oldest waiters; the sessions woken
    (enqueue them after this returns: the grant is committed)."""
    with db.connection() as conn, conn.transaction():
        bound_idle(conn, idle_timeout)
        lock = conn.execute(queries.LOCK_ROW, {"name": name}).fetchone()
        if lock is None:
            return []
        conn.execute(queries.DROP_STALE_REQUESTS, {"name": name})
        held = conn.execute(queries.HELD_COUNT, {"name": name}).fetchone()
        free = int(str(lock["permits"])) - int(str(held["held"] if held else 0))
        if free <= 0:
            return []
        rows = conn.execute(
            queries.GRANT, {"name": name, "free": free, "fence": lock["fence"]}
        ).fetchall()
    return [uuid.UUID(str(row["id"])) for row in rows]


def grant_and_wake(
    db: Database, broker: dramatiq.Broker, settings: Settings, names: set[str]
) -> int:
    """Grant each lock and enqueue the sessions it woke, in one send (also
    those granted before a later grant failed); how many woke."""
    woken: list[uuid.UUID] = []
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
        names = {
            str(row["name"]) for row in conn.execute(queries.LOCKS_WITH_WAITERS, {"limit": 1000})
        }
    return grant_and_wake(db, broker, settings, names)


def fence(db: Database, session_id: uuid.UUID, epoch: int, name: str, idle_timeout: float) -> int:
    """The fencing token of the lock `name` that this run of the session holds."""
    check_name(name, "lock")
    with db.connection() as conn, conn.transaction():
        bound_idle(conn, idle_timeout)
        row = conn.execute(
            queries.HELD_BY, {"name": name, "session_id": session_id, "epoch": epoch}
        ).fetchone()
        if row is None:
            owner = conn.execute(
                "SELECT lease_epoch FROM sessions WHERE id = %(id)s", {"id": session_id}
            ).fetchone()
            if owner is None or owner["lease_epoch"] != epoch:
                raise LeaseLostError("lease lost: another worker owns the session")
            raise CoordinationError(f"this session does not hold lock {name!r}")
        if row["token_epoch"] is None or row["token_epoch"] == epoch:
            if row["token_epoch"] is None:
                conn.execute(queries.CLAIM_TOKEN, {"id": row["id"], "epoch": epoch})
            return int(str(row["token"]))
        reissued = conn.execute(
            queries.REISSUE_TOKEN, {"name": name, "id": row["id"], "epoch": epoch}
        ).fetchone()
        assert reissued is not None
        logger.info(
            "lock %r: new fencing token %s for lease epoch %s",
            name,
            reissued["token"],
            epoch,
            extra={"action": "lock_token_reissued"},
        )
        return int(str(reissued["token"]))
