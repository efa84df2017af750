"""The typed functions that run ``coordination_queries``' statements (shared
documents, locks and semaphores, child sessions), one per statement, in its
order; that module holds the SQL and why it is written so. Those that run
inside a step's commit transaction (``write_shared``, ``request_lock``,
``release_lock``, ``spawn_children``) take the commit's connection and send
exactly the statements they always did."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from resumable._internal import serialization
from resumable.models import rows
from resumable.models.coordination_queries import (
    BOUND_IDLE,
    CLAIM_TOKEN,
    DROP_STALE_REQUESTS,
    ENSURE_SHARED,
    GRANT,
    HANDLED_BY_PARENT,
    HELD_AT_OR_AFTER,
    HELD_BY,
    HELD_COUNT,
    LEASE_EPOCH,
    LOCK_ROW,
    LOCK_SHARED,
    LOCKS_WITH_WAITERS,
    READ_SHARED,
    REISSUE_TOKEN,
    RELEASE_LOCK,
    REQUEST_LOCK,
    RETIRE_SHARED_VERSIONS,
    SESSION_FINISHED,
    SHARED_HISTORY,
    SPAWN_CHILDREN,
    STILL_WAITING_FOR_ALL,
    UNFINISHED_CHILDREN,
    WAITING_PARENTS,
    WAKE_PARENT,
    WRITE_SHARED,
    SharedDocument,
    SharedVersion,
)
from resumable.priorities import Priority, Routed

# -- shared documents ---------------------------------------------------------------


def read_shared(conn: psycopg.Connection[Any], name: str) -> SharedDocument | None:
    return rows.one(conn, SharedDocument, READ_SHARED, {"name": name})


def shared_history(
    conn: psycopg.Connection[Any], name: str, *, limit: int, before: int | None
) -> list[SharedVersion]:
    params = {"name": name, "limit": limit, "before": before}
    return rows.every(conn, SharedVersion, SHARED_HISTORY, params)


@dataclass(frozen=True)
class LockedShared:
    """A row of LOCK_SHARED: a document's committed value, its row locked."""

    name: str
    value: Any
    version: int


def lock_shared(conn: psycopg.Connection[Any], names: list[str]) -> dict[str, LockedShared]:
    """Make sure each document has a row (ENSURE_SHARED), then lock them all
    in name order (LOCK_SHARED); inside the step's commit transaction."""
    rows.run(conn, ENSURE_SHARED, {"names": names})
    return {row.name: row for row in rows.every(conn, LockedShared, LOCK_SHARED, {"names": names})}


def write_shared(
    conn: psycopg.Connection[Any],
    docs: list[dict[str, Any]],
    *,
    session_id: uuid.UUID,
    seq: int,
    step: str,
) -> None:
    """The new values (`docs`: name, value, version), their history rows and
    audit events; inside the step's commit transaction."""
    params = {
        "docs": serialization.dumps(docs, "shared documents"),
        "session_id": session_id,
        "seq": seq,
        "step": step,
    }
    rows.run(conn, WRITE_SHARED, params)


def retire_shared_versions(conn: psycopg.Connection[Any], *, age_seconds: float, limit: int) -> int:
    """Delete a batch of versions older than `age_seconds`; how many."""
    params = {"age_seconds": age_seconds, "limit": limit}
    return len(rows.values(conn, RETIRE_SHARED_VERSIONS, params))


# -- locks and semaphores -----------------------------------------------------------


def bound_idle(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Have the server end this transaction if its client goes quiet inside
    it for longer than `seconds` (see BOUND_IDLE)."""
    rows.run(conn, BOUND_IDLE, [f"{max(1, int(seconds * 1000))}ms"])


def held_at_or_after(conn: psycopg.Connection[Any], session_id: uuid.UUID, name: str) -> str | None:
    """A lock this session holds at or after `name` in name order, if any."""
    held = rows.value(conn, HELD_AT_OR_AFTER, {"session_id": session_id, "name": name})
    return None if held is None else str(held)


def request_lock(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, name: str, permits: int
) -> None:
    """Queue the session for the lock (created with `permits` at first use)."""
    rows.run(conn, REQUEST_LOCK, {"name": name, "permits": permits, "session_id": session_id})


def release_lock(conn: psycopg.Connection[Any], session_id: uuid.UUID, name: str) -> bool:
    """Give the lock up; False if the session did not hold it."""
    return rows.found(conn, RELEASE_LOCK, {"name": name, "session_id": session_id})


@dataclass(frozen=True)
class LockRow:
    """A row of LOCK_ROW: the lock's permits and last fencing token."""

    permits: int
    fence: int


def lock_row(conn: psycopg.Connection[Any], name: str) -> LockRow | None:
    """The lock's row, locked; None if no one ever asked for the lock."""
    return rows.one(conn, LockRow, LOCK_ROW, {"name": name})


def drop_stale_requests(conn: psycopg.Connection[Any], name: str) -> None:
    rows.run(conn, DROP_STALE_REQUESTS, {"name": name})


def held_count(conn: psycopg.Connection[Any], name: str) -> int:
    """How many permits of the lock are held."""
    return int(rows.value(conn, HELD_COUNT, {"name": name}) or 0)


def grant(conn: psycopg.Connection[Any], name: str, *, free: int, fence: int) -> list[Routed]:
    """Grant up to `free` permits to the oldest waiters; the sessions woken,
    each with its lane."""
    return rows.routes(conn, GRANT, {"name": name, "free": free, "fence": fence})


@dataclass(frozen=True)
class HeldRequest:
    """A row of HELD_BY: the holder's request, locked."""

    id: int
    token: int
    token_epoch: int | None


def held_by(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, epoch: int, name: str
) -> HeldRequest | None:
    """The request by which this epoch of the session holds the lock; None
    if it does not (or no longer owns the session)."""
    params = {"name": name, "session_id": session_id, "epoch": epoch}
    return rows.one(conn, HeldRequest, HELD_BY, params)


def lease_epoch(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> int | None:
    """The session's lease epoch; None if there is no such session."""
    epoch = rows.value(conn, LEASE_EPOCH, {"id": session_id})
    return None if epoch is None else int(epoch)


def reissue_token(conn: psycopg.Connection[Any], name: str, request_id: int, epoch: int) -> int:
    """A new, larger fencing token for the holder's request, for this epoch."""
    token = rows.value(conn, REISSUE_TOKEN, {"name": name, "id": request_id, "epoch": epoch})
    assert token is not None  # the request is locked (HELD_BY)
    return int(token)


def claim_token(conn: psycopg.Connection[Any], request_id: int, epoch: int) -> None:
    """Mark the request's token as this epoch's."""
    rows.run(conn, CLAIM_TOKEN, {"id": request_id, "epoch": epoch})


def locks_with_waiters(conn: psycopg.Connection[Any], *, limit: int) -> set[str]:
    return {str(name) for name in rows.values(conn, LOCKS_WITH_WAITERS, {"limit": limit})}


# -- child sessions -----------------------------------------------------------------


def spawn_children(
    conn: psycopg.Connection[Any], parent_id: uuid.UUID, children: list[dict[str, Any]]
) -> None:
    """Create the children (id, agent, input); inside the parent step's commit."""
    params = {"parent_id": parent_id, "children": serialization.dumps(children, "children")}
    rows.run(conn, SPAWN_CHILDREN, params)


@dataclass(frozen=True)
class WokenParent:
    """A row of WAKE_PARENT: the parent woken, and the dead letters of its
    failed children it handles (``on_failure="inform"``)."""

    id: uuid.UUID
    handled: list[int] | None
    priority: Priority = "normal"  # the lane its message goes on


def wake_parent(
    conn: psycopg.Connection[Any],
    *,
    parent_id: uuid.UUID | None = None,
    child_id: uuid.UUID | None = None,
) -> WokenParent | None:
    """Wake the parent (named, or of `child_id`) if enough of its children
    finished; None if it did not wake."""
    params = {"parent_id": parent_id, "child_id": child_id, "handled": HANDLED_BY_PARENT}
    return rows.one(conn, WokenParent, WAKE_PARENT, params)


def still_waiting_for_all(conn: psycopg.Connection[Any], parent_id: uuid.UUID) -> bool:
    """Whether the parent waits for all its children and one still runs."""
    return bool(rows.value(conn, STILL_WAITING_FOR_ALL, {"parent_id": parent_id}))


def waiting_parents(conn: psycopg.Connection[Any], *, limit: int) -> list[uuid.UUID]:
    return [uuid.UUID(str(i)) for i in rows.values(conn, WAITING_PARENTS, {"limit": limit})]


def unfinished_children(conn: psycopg.Connection[Any], parent_id: uuid.UUID) -> list[uuid.UUID]:
    ids = rows.values(conn, UNFINISHED_CHILDREN, {"parent_id": parent_id})
    return [uuid.UUID(str(i)) for i in ids]


@dataclass(frozen=True)
class Finished:
    """A row of SESSION_FINISHED: the locks it let go of, and its parent."""

    names: list[str] | None
    parent_id: uuid.UUID | None


def session_finished(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> Finished | None:
    return rows.one(conn, Finished, SESSION_FINISHED, {"id": session_id})
