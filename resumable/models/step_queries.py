"""The step path's statements: claim a session's lease, renew it, commit a step,
release it. Each is a single statement so that, on an autocommit connection, it
is exactly one transaction: data-modifying CTEs let a step's state, cursor,
status, checkpoint and audit events commit together, and every write is fenced
by the lease epoch (as procrastinate keeps its ``queries.sql``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from resumable import live_state
from resumable.models.agent_queries import AGENT_SERVED, WORKER_OF_LEASE_OWNER
from resumable.models.status import SessionStatus


@dataclass(frozen=True)
class ClaimedSession:
    """A row of CLAIM_LEASE: everything the runner needs to run the next step."""

    session_id: uuid.UUID
    agent: str
    cursor: str | None
    state: dict[str, Any]
    input: Any
    step_seq: int
    epoch: int
    wait: dict[str, Any] | None
    wake: dict[str, Any] | None
    status: SessionStatus
    attempts: int
    error: dict[str, Any] | None
    history_rebase: bool
    # Not yet folded into `state` (see resumable/live_state.py); applied here,
    # so `state` is the live state.
    state_patch: list[Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", SessionStatus(self.status))
        if self.state_patch:
            object.__setattr__(self, "state", live_state.apply(self.state, self.state_patch))


@dataclass(frozen=True)
class CommittedStep:
    """A row of COMMIT_STEP: the sequence number the step was committed as."""

    step_seq: int


@dataclass(frozen=True)
class Renewal:
    """A row of RENEW_LEASE: whether the lease was renewed and, if not, where
    the session stands now (so the keeper can say who took it)."""

    renewed: bool
    status: SessionStatus
    epoch: int
    owner: str | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", SessionStatus(self.status))


@dataclass(frozen=True)
class HungSession:
    """A row of HUNG_SESSIONS: a running session whose current step has run
    past its time limit, or longer than the caller's bound."""

    session_id: uuid.UUID
    agent: str
    step: str | None
    lease_owner: str | None
    step_started_at: datetime
    step_deadline: datetime | None
    running_seconds: float


# When a session may be claimed: pending, due for a retry, a compensation due,
# or held by a worker that let its lease expire or whose process is dead (its
# heartbeat in `workers` expired, which a claimer sees seconds after a crash,
# before the lease runs out).
CLAIMABLE = f"""(
    sessions.status = 'pending'
    OR (sessions.status = 'retrying' AND sessions.wake_at <= now())
    OR (sessions.status IN ('running', 'compensating')
        AND (sessions.lease_expires_at < now()
             OR EXISTS (SELECT 1 FROM workers w
                        WHERE w.id = {WORKER_OF_LEASE_OWNER.format(owner="sessions.lease_owner")}
                          AND w.expires_at < now())))
    OR (sessions.status = 'compensating' AND sessions.lease_owner IS NULL
        AND (sessions.wake_at IS NULL OR sessions.wake_at <= now()))
)"""

# A session's agent is one this worker loads, or one no worker ever announced
# (the runner then fails the session: unknown agent).
RUNNABLE_HERE = """(
    sessions.agent = ANY(%(agents)s)
    OR NOT EXISTS (SELECT 1 FROM agents a WHERE a.name = sessions.agent)
)"""

# Take the lease of a claimable session this worker can run. A worker never
# claims a known agent it does not load, so a session whose agent no live
# worker loads causes no claims and no audit rows. Bumping the epoch fences
# out the previous owner.
CLAIM_LEASE = f"""
WITH old AS (
    SELECT id, status, lease_owner, lease_epoch FROM sessions
    WHERE id = %(id)s AND {RUNNABLE_HERE} AND {CLAIMABLE}
    FOR UPDATE
), s AS (
    UPDATE sessions SET
        status = CASE WHEN old.status = 'compensating' THEN 'compensating' ELSE 'running' END,
        wake_at = NULL,
        lease_epoch = sessions.lease_epoch + 1,
        lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
        step_started_at = now(),
        step_deadline = NULL,
        updated_at = now()
    FROM old
    WHERE sessions.id = old.id
    RETURNING sessions.id, sessions.agent, sessions.cursor, sessions.state, sessions.input,
              sessions.step_seq, sessions.lease_epoch, sessions.wait, sessions.wake,
              sessions.status, sessions.attempts, sessions.error, sessions.history_rebase,
              sessions.state_patch,
              old.status AS previous_status, old.lease_owner AS previous_owner
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor,
           CASE WHEN previous_status = 'running' THEN 'lease_recovered'
                WHEN previous_status = 'compensating' THEN 'compensation_resumed'
                WHEN previous_status = 'retrying' THEN 'retry_started'
                ELSE 'run_started' END,
           jsonb_build_object('worker', %(owner)s, 'epoch', lease_epoch,
                              'previous_owner', previous_owner, 'attempt', attempts + 1)
    FROM s
)
SELECT id AS session_id, agent, cursor, state, input, step_seq, lease_epoch AS epoch, wait,
       wake, status, attempts, error, history_rebase, state_patch
FROM s
"""


# Asked when a claim found nothing: is the session claimable by a worker that
# loads its agent (then the message is passed on), or by none alive (then it
# waits, untouched, until one starts)? No row: a duplicate message.
CLAIMABLE_ELSEWHERE = f"""
SELECT agent, {AGENT_SERVED.format(agent="sessions.agent")} AS served
FROM sessions
WHERE id = %(id)s AND NOT {RUNNABLE_HERE} AND {CLAIMABLE}
"""


@dataclass(frozen=True)
class ClaimableElsewhere:
    """A row of CLAIMABLE_ELSEWHERE."""

    agent: str
    served: bool


# Sessions of these agents that can be claimed: what a worker enqueues when it
# starts serving agents no live worker served (their messages were dropped).
CLAIMABLE_OF_AGENTS = f"""
SELECT id FROM sessions
WHERE agent = ANY(%(agents)s) AND {CLAIMABLE}
ORDER BY updated_at
LIMIT %(limit)s
"""

# The sessions of workers whose heartbeat expired, once per dead worker: the
# reconciler enqueues them so a live worker claims them now rather than when
# their leases expire.
ORPHANED_SESSIONS = f"""
WITH dead AS (
    UPDATE workers SET reaped_at = now()
    WHERE expires_at < now() AND reaped_at IS NULL
    RETURNING id
)
SELECT sessions.id FROM sessions
JOIN dead ON dead.id = {WORKER_OF_LEASE_OWNER.format(owner="sessions.lease_owner")}
WHERE sessions.status IN ('running', 'compensating') AND sessions.lease_owner IS NOT NULL
"""


# Extend a held lease, in every status a live worker holds one. The outer
# SELECT sees the row as it was before the update: when nothing was renewed,
# it says where the session stands (cancelled, or another worker's epoch).
RENEW_LEASE = """
WITH r AS (
    UPDATE sessions SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
    WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status IN ('running', 'compensating')
      AND lease_owner IS NOT NULL
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM r) AS renewed, status, lease_epoch AS epoch, lease_owner AS owner
FROM sessions WHERE id = %(id)s
"""


# The step a run starts with, when the claim could not know it (it reads only
# the agent's name): a new session's first step (its cursor is NULL until
# now), and when that step's time limit passes. Later steps get both from
# COMMIT_STEP.
START_STEP = """
UPDATE sessions SET
    cursor = %(cursor)s,
    step_deadline = now() + make_interval(secs => %(time_limit)s)
WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status = 'running'
"""


# A step's outcome: new state, cursor and status, the wait it suspends on (if
# any), a checkpoint row, the audit events, and the consumption of the delivery
# that woke it, in one statement. With a NULL state the step appends its patch
# instead (resumable/live_state.py): the stored state is left as it is, and
# PostgreSQL does not rewrite an unchanged TOASTed value. No row back means the
# epoch moved on (another worker owns the session) or the step was already
# committed; nothing was written. (Keep the SET list short: a test finds the
# checkpoint insert in pg_stat_activity, which cuts a query at 1024 bytes.)
COMMIT_STEP = """
WITH s AS (
    UPDATE sessions SET
        state = coalesce(%(state)s::jsonb, state),
        state_patch = CASE WHEN %(state)s IS NULL
                           THEN coalesce(state_patch, '[]') || %(state_patch)s::jsonb END,
        cursor = %(cursor)s, status = %(status)s, result = %(result)s::jsonb,
        step_seq = step_seq + 1, attempts = 0, error = NULL, history_rebase = false,
        wait = %(wait)s::jsonb, wake = NULL, wake_at = %(wake_at)s::timestamptz,
        lease_owner = CASE WHEN NOT %(release)s THEN lease_owner END,
        lease_expires_at = CASE WHEN NOT %(release)s
                                THEN now() + make_interval(secs => %(lease_seconds)s) END,
        step_started_at = CASE WHEN NOT %(release)s THEN now() END,
        step_deadline = CASE WHEN NOT %(release)s
                             THEN now() + make_interval(secs => %(next_time_limit)s) END,
        finished_at = CASE WHEN %(status)s = 'completed' THEN now() END,
        updated_at = now()
    WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status = 'running'
      AND step_seq = %(expected_seq)s
    RETURNING id, step_seq, state
), c AS (
    INSERT INTO checkpoints (session_id, seq, step, next_step, state, kind, patch, events)
    SELECT id, step_seq, %(step)s, %(cursor)s,
           CASE WHEN %(kind)s = 'snapshot' THEN coalesce(%(history_state)s::jsonb, state) END,
           %(kind)s, %(patch)s::jsonb, %(step_events)s::jsonb
    FROM s
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT s.id, s.step_seq, ev.step, ev.type, ev.payload
    FROM s, jsonb_to_recordset(%(events)s::jsonb) AS ev(step text, type text, payload jsonb)
), d AS (
    UPDATE deliveries SET status = 'consumed', consumed_at = now(), consumed_seq = s.step_seq
    FROM s WHERE deliveries.id = %(delivery_id)s AND deliveries.status = 'pending'
), k AS (
    -- The first step after a wake closes what is left of the wait it ended.
    UPDATE callbacks SET status = 'closed', closed_at = now()
    FROM s WHERE %(after_wake)s AND callbacks.session_id = s.id AND callbacks.status = 'open'
                 AND callbacks.step_seq < s.step_seq
)
SELECT step_seq FROM s
"""


# Hand the session back without finishing it (the agent is not loaded here, the
# worker is stopping): a running session becomes pending, a compensating one
# stays compensating, and either can be claimed again at once.
RELEASE_LEASE = """
WITH s AS (
    UPDATE sessions SET
        status = CASE WHEN status = 'compensating' THEN 'compensating' ELSE 'pending' END,
        step_started_at = NULL, step_deadline = NULL,
        lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status IN ('running', 'compensating')
      AND lease_owner IS NOT NULL
    RETURNING id, step_seq, cursor
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'lease_released', jsonb_build_object('reason', %(reason)s::text)
    FROM s
)
SELECT id FROM s
"""


# Running sessions whose current step has run past its time limit, or longer
# than %(after)s seconds: a step blocked where the time limit cannot reach it
# (C code, a socket without a timeout) keeps its session until it returns.
HUNG_SESSIONS = """
SELECT id AS session_id, agent, cursor AS step, lease_owner, step_started_at, step_deadline,
       extract(epoch FROM now() - step_started_at)::float8 AS running_seconds
FROM sessions
WHERE status = 'running' AND step_started_at IS NOT NULL
  AND (step_deadline < now() OR step_started_at < now() - make_interval(secs => %(after)s))
ORDER BY step_started_at
LIMIT %(limit)s
"""
