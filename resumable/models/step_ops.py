"""The typed functions that run ``step_queries``' statements (claim, take
over, commit a step, renew and release a lease), one per statement, in its
order; that module holds the SQL and why it is written so.

The hot path's functions send what the worker always sent: the claim and the
commit prepared at their first execution on a connection, one statement
each, their rows read as the claim's dataclass and the commit's one number.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row, tuple_row

from resumable.models import rows
from resumable.models.status import SessionStatus
from resumable.models.step_queries import (
    CLAIM_LEASE,
    CLAIMABLE_ELSEWHERE,
    CLAIMABLE_OF_AGENTS,
    COMMIT_STEP,
    COMMIT_STEP_WITH_ANSWERS,
    COMMIT_STEP_WITH_RECORDS,
    COMMIT_STEP_WITH_RECORDS_AND_ANSWERS,
    HUNG_SESSIONS,
    LEASE_LEFT,
    MIGRATE_SESSION,
    ORPHANED_SESSIONS,
    RECORDED_BEYOND,
    RELEASE_LEASE,
    RENEW_LEASE,
    START_STEP,
    TAKE_OVER,
    ClaimableElsewhere,
    ClaimedSession,
    HungSession,
    Renewal,
)
from resumable.priorities import Routed


def claim(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    *,
    owner: str,
    versions: str,
    starts: str,
    lease_seconds: float,
    limits: str = "{}",
) -> ClaimedSession | None:
    """Take the session's lease if this worker may run it now (`versions`:
    the worker's {"agent": version} as JSON; `starts`: {"agent": {"step",
    "limit"}} as JSON; `limits`: {"agent": Concurrency.spec()} as JSON, whose
    sessions this statement leaves to ``slot_queries``); None if it may not.

    Prepared at its first execution on a connection, as COMMIT_STEP is:
    psycopg sends the first five unprepared, each parsed and planned anew (a
    new connection's 2nd to 6th claims: 0.93-1.28 ms, prepared 0.70-0.95,
    once on a generic plan 0.33; docs/performance.md, "The claim"), and every
    connection of a pool that grows, is recycled or starts after a deploy
    pays that."""
    return (
        conn.cursor(row_factory=class_row(ClaimedSession))
        .execute(
            CLAIM_LEASE,
            {
                "id": session_id,
                "owner": owner,
                "versions": versions,
                "starts": starts,
                "lease_seconds": lease_seconds,
                "limits": limits,
            },
            # Prepared from its first run, unless the connection prepares
            # nothing (prepare_threshold None: psycopg then ignores this).
            prepare=True,
        )
        .fetchone()
    )


def take_over(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    *,
    owner: str,
    versions: str,
    starts: str,
    takes_over: list[str],
    lease_seconds: float,
) -> ClaimedSession | None:
    """Claim a session of an older version this worker migrates (run in a
    transaction with ``migrate_session``); None if it may not. `starts`: the
    worker's {"agent": {"code": fingerprint}} as JSON, for the audit event."""
    params = {
        "id": session_id,
        "owner": owner,
        "versions": versions,
        "starts": starts,
        "takes_over": takes_over,
        "lease_seconds": lease_seconds,
    }
    return rows.one(conn, ClaimedSession, TAKE_OVER, params)


@dataclass(frozen=True)
class Migrated:
    """A row of MIGRATE_SESSION: the cursor the session goes on from."""

    cursor: str | None


def migrate_session(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    state: str,
    cursor: str | None,
    from_version: int,
    to_version: int,
    from_step: str | None,
    owner: str,
) -> Migrated | None:
    """Write the migrated state (JSON text) after ``take_over``, in its
    transaction; None if the epoch moved on."""
    params = {
        "id": session_id,
        "epoch": epoch,
        "state": state,
        "cursor": cursor,
        "from_version": from_version,
        "to_version": to_version,
        "from_step": from_step,
        "owner": owner,
    }
    return rows.one(conn, Migrated, MIGRATE_SESSION, params)


def claimable_elsewhere(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, versions: str, takes_over: list[str]
) -> ClaimableElsewhere | None:
    """Who else could run a session a claim found nothing in; None: a duplicate message."""
    params = {"id": session_id, "versions": versions, "takes_over": takes_over}
    return rows.one(conn, ClaimableElsewhere, CLAIMABLE_ELSEWHERE, params)


def claimable_of_agents(
    conn: psycopg.Connection[Any],
    agents: list[str],
    *,
    versions: str,
    takes_over: list[str],
    worker: str,
    limit: int,
) -> list[uuid.UUID]:
    """Claimable sessions of these agents that only this worker serves."""
    params = {
        "agents": agents,
        "limit": limit,
        "versions": versions,
        "takes_over": takes_over,
        "worker": worker,
    }
    return [uuid.UUID(str(i)) for i in rows.values(conn, CLAIMABLE_OF_AGENTS, params)]


def orphaned_sessions(conn: psycopg.Connection[Any]) -> list[Routed]:
    """The sessions of workers whose heartbeat expired, once per dead worker."""
    return rows.routes(conn, ORPHANED_SESSIONS)


def lease_left(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> float | None:
    """Seconds the lease of a held session has yet to run; None: not held."""
    seconds = rows.value(conn, LEASE_LEFT, {"id": session_id})
    return None if seconds is None else float(seconds)


def renew_lease(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, epoch: int, *, lease_seconds: float
) -> Renewal | None:
    """Extend the lease; whether it was, and where the session stands (None:
    no such session)."""
    params = {"id": session_id, "epoch": epoch, "lease_seconds": lease_seconds}
    return rows.one(conn, Renewal, RENEW_LEASE, params)


def start_step(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    cursor: str,
    time_limit: float | None,
) -> None:
    """Record the run's first step and when its time limit passes."""
    params = {"id": session_id, "epoch": epoch, "cursor": cursor, "time_limit": time_limit}
    rows.run(conn, START_STEP, params)


@dataclass(frozen=True)
class RecordedCall:
    """A row of RECORDED_BEYOND."""

    idempotency_key: str
    call_index: int
    tool: str
    args_hash: str | None
    request: Any
    status: str


def recorded_beyond(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, step_seq: int, calls_made: int
) -> list[RecordedCall]:
    """The step's recorded calls beyond the `calls_made` its replay made."""
    params = {"id": session_id, "step_seq": step_seq, "calls_made": calls_made}
    return rows.every(conn, RecordedCall, RECORDED_BEYOND, params)


def commit_step(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    expected_seq: int,
    state: str | None,
    state_patch: str | None,
    cursor: str | None,
    status: SessionStatus,
    result: str | None,
    release: bool,
    wait: str | None,
    wake_at: Any,
    delivery_id: int | None,
    after_wake: bool,
    lease_seconds: float,
    next_time_limit: float | None,
    step: str,
    events: str,
    kind: str,
    history_state: str | None,
    patch: str | None,
    step_events: str | None,
    records: str | None = None,
    record_keys: list[str] | None = None,
    answers: str | None = None,
) -> int | None:
    """Commit a step's outcome (JSON as text) in one statement, prepared;
    the new sequence number, or None if fenced out. With `records` ({key:
    response} as JSON, and their `record_keys`) the async tool calls' results
    ride with it (COMMIT_STEP_WITH_RECORDS); with `answers` (a JSON array of
    rows), the answers of calls without side effects not written yet."""
    params: dict[str, Any] = {
        "id": session_id,
        "epoch": epoch,
        "expected_seq": expected_seq,
        "state": state,
        "state_patch": state_patch,
        "cursor": cursor,
        "status": status,
        "result": result,
        "release": release,
        "wait": wait,
        "wake_at": wake_at,
        "delivery_id": delivery_id,
        "after_wake": after_wake,
        "lease_seconds": lease_seconds,
        "next_time_limit": next_time_limit,
        "step": step,
        "events": events,
        "kind": kind,
        "history_state": history_state,
        "patch": patch,
        "step_events": step_events,
    }
    statement = COMMIT_STEP
    if records is not None:
        statement = COMMIT_STEP_WITH_RECORDS
        params["records"], params["record_keys"] = records, record_keys
    if answers is not None:
        with_records = records is not None
        statement = (
            COMMIT_STEP_WITH_RECORDS_AND_ANSWERS if with_records else COMMIT_STEP_WITH_ANSWERS
        )
        params["answers"] = answers
    committed = conn.cursor(row_factory=tuple_row).execute(statement, params, prepare=True)
    row = committed.fetchone()
    return None if row is None else int(row[0])


def release_lease(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, epoch: int, *, reason: str
) -> bool:
    """Hand the session back without finishing it; False if this epoch no
    longer held it."""
    return rows.found(conn, RELEASE_LEASE, {"id": session_id, "epoch": epoch, "reason": reason})


def hung_sessions(
    conn: psycopg.Connection[Any], *, after_seconds: float, limit: int
) -> list[HungSession]:
    """Running sessions past their step's time limit or running longer than
    `after_seconds`, longest-running first."""
    params = {"after": after_seconds, "limit": limit}
    return rows.every(conn, HungSession, HUNG_SESSIONS, params)
