"""Renewing every lease a worker holds in one statement.

A worker with hundreds of async runs in flight holds hundreds of leases; one
statement per lease (``step_queries.RENEW_LEASE``) makes a renewal pass take
longer than the lease itself on a busy machine, and a live worker then loses
its own sessions. ``RENEW_LEASES`` renews them all at once, each only under
the epoch it was claimed with, and says, for each lease it could not renew,
where the session stands now (for the keeper's "taken over" line). Rows are
locked in id order, so two workers' passes over overlapping sessions (a
paused worker and its successor) cannot deadlock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from resumable.models import rows
from resumable.models.status import SessionStatus

RENEW_LEASES = """
WITH held AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[]) AS h(id, epoch)
), locked AS (
    SELECT s.id FROM sessions s JOIN held ON s.id = held.id AND s.lease_epoch = held.epoch
    WHERE s.status IN ('running', 'compensating') AND s.lease_owner IS NOT NULL
    ORDER BY s.id
    FOR UPDATE OF s
), r AS (
    UPDATE sessions s SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
    FROM locked WHERE s.id = locked.id
    RETURNING s.id
)
SELECT held.id, held.epoch AS held_epoch, s.status, s.lease_epoch AS epoch,
       s.lease_owner AS owner
FROM held
LEFT JOIN sessions s ON s.id = held.id
WHERE NOT EXISTS (SELECT 1 FROM r WHERE r.id = held.id)
"""


@dataclass(frozen=True)
class NotRenewed:
    """A lease RENEW_LEASES could not renew, and where its session stands now
    (status None: the session no longer exists)."""

    id: uuid.UUID
    held_epoch: int
    status: SessionStatus | None
    epoch: int | None
    owner: str | None


# RENEW_LEASES reports each lost lease as its statement's snapshot saw it: a
# renewal that waited on the row lock of a concurrent cancel (or takeover)
# sees the row as it was before that commit, still held at its own epoch.
# Those are read again here, in a statement (a snapshot) of their own.
NOT_RENEWED_NOW = """
SELECT held.id, held.epoch AS held_epoch, s.status, s.lease_epoch AS epoch,
       s.lease_owner AS owner
FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[]) AS held(id, epoch)
LEFT JOIN sessions s ON s.id = held.id
"""


def renew_leases(
    conn: psycopg.Connection[Any], held: list[tuple[uuid.UUID, int]], *, lease_seconds: float
) -> list[NotRenewed]:
    """Renew every lease in `held` (session, epoch) in one statement; the
    ones it could not renew, as its snapshot saw them."""
    return rows.every(conn, NotRenewed, RENEW_LEASES, _held(held, lease_seconds))


def not_renewed_now(
    conn: psycopg.Connection[Any], held: list[tuple[uuid.UUID, int]]
) -> list[NotRenewed]:
    """Where the sessions of these leases stand now, in a snapshot of its own."""
    return rows.every(conn, NotRenewed, NOT_RENEWED_NOW, _held(held, None))


def _held(held: list[tuple[uuid.UUID, int]], lease_seconds: float | None) -> dict[str, Any]:
    return {
        "ids": [session_id for session_id, _ in held],
        "epochs": [epoch for _, epoch in held],
        "lease_seconds": lease_seconds,
    }
