"""The step path's statements: claim a session's lease, renew it, commit a step,
release it. Each is a single statement so that, on an autocommit connection, it
is exactly one transaction: data-modifying CTEs let a step's state, cursor,
status, checkpoint and audit events commit together, and every write is fenced
by the lease epoch (as procrastinate keeps its ``queries.sql``). The typed
functions that run them are in ``step_ops.py``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from resumable.models import live_state
from resumable.models.agent_queries import (
    SERVED_ELSEWHERE,
    VERSION_SERVED,
    WORKER_OF_LEASE_OWNER,
)
from resumable.models.status import SessionStatus
from resumable.models.tool_call_queries import answers_cte
from resumable.priorities import Priority


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
    # The agent version that serves the session, and the one it started on.
    version: int = 0
    started_version: int = 0
    # Not yet folded into `state` (see resumable/models/live_state.py); applied here,
    # so `state` is the live state.
    state_patch: list[Any] | None = None
    # One past the highest call index recorded (not failed, not superseded)
    # for the step about to run: a replay that makes fewer calls diverged.
    recorded_calls: int = 0
    # It has a parent or holds (or waits for) a lock: finishing it has
    # something to release or wake. False spares every plain session's end a
    # round trip.
    coordinated: bool = True
    # The claim stamped the session's first step and its deadline (a new
    # session of an agent loaded here), so the run need not.
    started: bool = False
    # Seconds since the delivery that woke the session was stored (None: no
    # delivery woke it, or it was woken before the wake recorded that time).
    waited: float | None = None
    # The concurrency key whose slot this run holds (None: not limited); its
    # end wakes the key's oldest waiters (``queue/slots.py``).
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    # The lane the run's own messages go on (a yield, a retry, a hand-back).
    priority: Priority = "normal"

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", SessionStatus(self.status))
        if self.state_patch:
            object.__setattr__(self, "state", live_state.apply(self.state, self.state_patch))


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


# A worker whose heartbeat row expired while it ran this session's step (the
# step began before the row expired): `w` its row, `s` the session. A step
# begun after the row expired says the worker is alive (a host cut off and
# back, whose heartbeat has not got through yet): its lease alone decides.
WORKER_DIED_IN_STEP = (
    "({w}.expires_at < now() AND {w}.expires_at > coalesce({s}.step_started_at, '-infinity'))"
)

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
                          AND {WORKER_DIED_IN_STEP.format(w="w", s="sessions")})))
    OR (sessions.status = 'compensating' AND sessions.lease_owner IS NULL
        AND (sessions.wake_at IS NULL OR sessions.wake_at <= now()))
)"""

# This worker's version of the session's agent (-1: it does not load it);
# %(versions)s is the worker's {"agent": version} as JSON.
_MINE = "coalesce((%(versions)s::jsonb ->> sessions.agent)::int, -1)"

# A session this worker may run: one of its agents at the version it serves;
# or a session that never ran a step (no cursor yet) of an older or equal
# version when no live worker serves a newer one (it starts on the newest
# code deployed, and is stamped with that version). Sessions of older
# versions this worker migrates are taken over by TAKE_OVER, not here. A
# session of an agent this worker does not load is never claimed here, even
# one no worker ever announced: an application may start sessions of a new
# agent before the workers that load it are deployed, and they wait, pending
# (listed and alerted on as unserved), for the first of those to start.
RUNNABLE_HERE = f"""(
    (sessions.cursor IS NOT NULL AND sessions.agent_version = {_MINE})
    OR (sessions.cursor IS NULL AND sessions.agent_version <= {_MINE}
        AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.expires_at > now()
                        AND (w.versions ->> sessions.agent)::int > {_MINE}))
)"""

# Of the versions this worker migrates (%(takes_over)s: ["agent@version"]),
# a session whose own version no live worker serves any more.
TAKEN_OVER_HERE = f"""(
    sessions.cursor IS NOT NULL
    AND (sessions.agent || '@' || sessions.agent_version) = ANY(%(takes_over)s)
    AND NOT {VERSION_SERVED}
)"""


# A new session's first step and that step's deadline, stamped by the claim
# itself (what START_STEP would otherwise do in a second statement):
# %(starts)s is the worker's {"agent": {"step": first step, "limit": seconds
# or null}}, looked up once per claim. A compensating session, or one of an
# agent this worker does not load, gets none (NULL: left as it is).
_START = """CASE WHEN cursor IS NULL AND status <> 'compensating'
                  THEN %(starts)s::jsonb -> agent END"""


def compact(sql: str) -> str:
    """The statement without its comments and with single spaces. psycopg
    caches the conversion of a query's ``%(name)s`` placeholders only for
    queries up to 4 KB; above that it parses the text again at every call
    (a claim, readable with its comments, is 4.8 KB). Only for statements
    whose string literals hold neither ``--`` nor runs of spaces."""
    without_comments = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"\s+", " ", without_comments).strip()


def claim_statement(
    runnable: str,
    *,
    stamp_start: bool = True,
    also_set: str = "concurrency_key = NULL, slot_wait_since = NULL,",
    slot: bool = False,
    first: str = "",
) -> str:
    """Take the lease of a claimable session that `runnable` lets this worker
    run, bumping the epoch (which fences out the previous owner), with its
    audit event; a session that never ran is stamped with this worker's version
    (and, with `stamp_start`, with its first step and that step's deadline).
    The row returned carries the cursor as it was before the claim.

    The row is locked before it is judged, whatever its status: a claim
    that meets a transaction still holding the row (a receiver that sent the
    queue message before committing its wake, see ``inbox``) waits for it
    and judges the row as committed. Filtered in the locking SELECT itself,
    a row that its snapshot saw suspended would be skipped without a wait,
    and the wake lost until the reconciler.

    `also_set` adds assignments to the UPDATE: by default, that the run
    holds no concurrency slot (the agent is not limited here, or it is a
    saga's or a takeover's run) and waits for none; ``slot_queries`` sets
    the slot's key instead, with `slot` (the row returned names the slot,
    and the session's wait for one is read for `runnable`). `first` is a
    statement's CTEs run beside the claim (ending in a comma)."""
    start = _START if stamp_start else "NULL::jsonb"
    slot_wait = ", slot_wait_since" if slot else ""
    returned_slot = ", sessions.concurrency_key, sessions.concurrency_limit" if slot else ""
    selected_slot = ", concurrency_key, concurrency_limit" if slot else ""
    return f"""
WITH {first} locked AS (
    SELECT id, status, lease_owner, lease_epoch, lease_expires_at, cursor, agent,
           agent_version, wake_at, step_started_at{slot_wait}
    FROM sessions WHERE id = %(id)s
    FOR UPDATE
), old AS (
    SELECT id, status, lease_owner, lease_epoch, cursor, {start} AS start
    FROM locked AS sessions
    WHERE {runnable} AND {CLAIMABLE}
), s AS (
    UPDATE sessions SET
        status = CASE WHEN old.status = 'compensating' THEN 'compensating' ELSE 'running' END,
        wake_at = NULL,
        lease_epoch = sessions.lease_epoch + 1,
        lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
        step_started_at = now(),
        cursor = coalesce(old.start ->> 'step', sessions.cursor),
        step_deadline = now() + make_interval(secs => (old.start ->> 'limit')::float8),
        agent_version = CASE WHEN old.cursor IS NULL THEN coalesce(
            (%(versions)s::jsonb ->> sessions.agent)::int, sessions.agent_version)
            ELSE sessions.agent_version END,
        started_version = CASE WHEN old.cursor IS NULL THEN coalesce(
            (%(versions)s::jsonb ->> sessions.agent)::int, sessions.started_version)
            ELSE sessions.started_version END,
        {also_set}
        updated_at = now()
    FROM old
    -- The session named as well as joined: a planner prunes a partitioned
    -- (or distributed) sessions table on it (tests/integration/test_partition_plan.py).
    WHERE sessions.id = %(id)s AND sessions.id = old.id
    -- Unqualified where `old` has no column of that name (the claim must
    -- stay within psycopg's 4 KB query cache, see ``compact``).
    RETURNING sessions.id, agent, sessions.cursor, state, input, step_seq,
              sessions.lease_epoch, wait, wake, sessions.status, attempts, error,
              history_rebase, agent_version, started_version, state_patch, priority{returned_slot},
              old.status AS was, old.lease_owner AS previous_owner,
              old.cursor AS claimed_cursor, old.start ->> 'step' IS NOT NULL AS started,
              -- Since the delivery that woke it was stored (the resume latency).
              extract(epoch FROM clock_timestamp()
                                 - (sessions.wake ->> 'received_at')::timestamptz)::float8
                  AS waited,
              -- The calls recorded for the step about to run (a replay must make
              -- as many, see RECORDED_BEYOND): one probe of an index.
              (SELECT coalesce(max(t.call_index) + 1, 0) FROM tool_execution_cache t
               WHERE t.session_id = %(id)s AND t.step_seq = sessions.step_seq + 1
                 AND t.superseded_at IS NULL AND t.status <> 'failed') AS recorded_calls,
              -- Whether finishing must release locks or wake a parent (a lock is
              -- always granted while the session waits, so before this run).
              (sessions.parent_id IS NOT NULL
               OR EXISTS (SELECT 1 FROM coordination_lock_requests r
                          WHERE r.session_id = %(id)s)) AS coordinated
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, claimed_cursor,
           CASE WHEN was = 'running' THEN 'lease_recovered'
                WHEN was = 'compensating' THEN 'compensation_resumed'
                WHEN was = 'retrying' THEN 'retry_started'
                ELSE 'run_started' END,
           jsonb_build_object('worker', %(owner)s, 'epoch', lease_epoch,
                              'previous_owner', previous_owner, 'attempt', attempts + 1,
                              'version', agent_version,
                              -- Which code ran it (the agent's fingerprint).
                              'code', %(starts)s::jsonb -> agent ->> 'code')
           -- A resume by a delivery: how long since it arrived (the charts).
           || CASE WHEN waited IS NULL OR was <> 'pending' THEN '{{}}'::jsonb
                   ELSE jsonb_build_object('waited_ms', round((waited * 1000)::numeric, 2))
              END
    FROM s
)
SELECT id AS session_id, agent, claimed_cursor AS cursor, state, input, step_seq,
       lease_epoch AS epoch, wait, wake, status, attempts, error, history_rebase,
       agent_version AS version, started_version, state_patch, recorded_calls, coordinated,
       started, waited, priority{selected_slot}
FROM s
"""


# The concurrency limit a run of the session at its cursor is under
# (``resumable/limits.py``): %(limits)s is the worker's {"agent":
# Agent.limits_spec()}, an agent's own limit ({"*": {"limit", "key"}}) or
# its steps' ({step: {"limit", "key", "step"}}); a new session is at its
# first step (%(starts)s). NULL: none.
SLOT_SPEC = """coalesce(%(limits)s::jsonb -> sessions.agent -> '*',
         %(limits)s::jsonb -> sessions.agent
         -> coalesce(sessions.cursor, %(starts)s::jsonb -> sessions.agent ->> 'step'))"""

# A session whose run is under no concurrency limit here (SLOT_SPEC is
# NULL; written shorter, and unqualified, to keep CLAIM_LEASE within
# psycopg's 4 KB query cache), or a saga's compensations, which finish what
# a run began and take no slot. A limited run is claimed by
# ``slot_queries.CLAIM_WITH_SLOT`` instead.
UNLIMITED_HERE = """(status = 'compensating' OR NOT coalesce(%(limits)s::jsonb -> agent
    ?| ARRAY['*', coalesce(cursor, %(starts)s::jsonb -> agent ->> 'step')], false))"""

# The hot path: one statement. A worker never claims a known agent it does
# not load, nor a version it does not serve, so a session no live worker
# serves causes no claims and no audit rows.
CLAIM_LEASE = compact(claim_statement(f"{RUNNABLE_HERE} AND {UNLIMITED_HERE}"))

# The same for a session of an older version this worker migrates; run in a
# transaction with the migration (resumable/queue/takeover.py).
TAKE_OVER = compact(claim_statement(TAKEN_OVER_HERE, stamp_start=False))


# After TAKE_OVER, in its transaction: the state an older version's session
# recorded, migrated; the cursor renamed through the step's aliases unless
# the step already made calls at this position (their idempotency keys name
# the step as recorded, so it keeps that name until it commits); the version
# that serves it now; and the audit event. The next checkpoint is a snapshot.
MIGRATE_SESSION = """
WITH s AS (
    UPDATE sessions SET
        state = %(state)s::jsonb,
        state_patch = NULL,  -- the migrated state is the whole live state
        cursor = CASE WHEN EXISTS (
                          SELECT 1 FROM tool_execution_cache t
                          WHERE t.session_id = sessions.id AND t.step_seq = sessions.step_seq + 1
                            AND t.superseded_at IS NULL)
                      THEN sessions.cursor ELSE %(cursor)s END,
        agent_version = %(to_version)s,
        history_rebase = true,
        updated_at = now()
    WHERE id = %(id)s AND lease_epoch = %(epoch)s
    RETURNING id, step_seq, cursor
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'session_migrated',
           jsonb_build_object('from_version', %(from_version)s::int,
                              'to_version', %(to_version)s::int,
                              'from_step', %(from_step)s::text, 'worker', %(owner)s::text)
    FROM s
)
SELECT cursor FROM s
"""


# Asked when a claim found nothing: who else could run the session? A live
# worker serving its version (or, for a session that never ran, a newer
# one), or migrating it (then the message is passed on); this worker, by
# migrating it (`take_over`); or nobody alive (then it waits, untouched,
# until such a worker starts). No row: a duplicate message.
CLAIMABLE_ELSEWHERE = f"""
SELECT agent, agent_version AS version, {SERVED_ELSEWHERE} AS served,
       {TAKEN_OVER_HERE} AS take_over
FROM sessions
WHERE id = %(id)s AND NOT {RUNNABLE_HERE} AND {CLAIMABLE}
"""


@dataclass(frozen=True)
class ClaimableElsewhere:
    """A row of CLAIMABLE_ELSEWHERE."""

    agent: str
    served: bool
    version: int = 0
    take_over: bool = False


# Claimable sessions of these agents that this worker can run (its version,
# one it migrates, or never run) and no other live worker serves: what a
# worker enqueues when it starts (their messages were passed over and dropped).
CLAIMABLE_OF_AGENTS = f"""
SELECT id FROM sessions
WHERE agent = ANY(%(agents)s) AND {CLAIMABLE}
  AND ({RUNNABLE_HERE}
       OR (sessions.agent || '@' || sessions.agent_version) = ANY(%(takes_over)s))
  AND NOT EXISTS (SELECT 1 FROM workers w
                  WHERE w.expires_at > now() AND w.id <> %(worker)s
                    AND ((w.versions ->> sessions.agent)::int = sessions.agent_version
                         OR (sessions.cursor IS NULL
                             AND (w.versions ->> sessions.agent)::int >= {_MINE})))
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
SELECT sessions.id, sessions.priority FROM sessions
JOIN dead ON dead.id = {WORKER_OF_LEASE_OWNER.format(owner="sessions.lease_owner")}
WHERE sessions.status IN ('running', 'compensating') AND sessions.lease_owner IS NOT NULL
"""


# Extend a held lease, in every status a live worker holds one. The outer
# SELECT sees the row as it was before the update: when nothing was renewed,
# it says where the session stands (cancelled, or another worker's epoch).
# How long the lease of a session some worker holds has yet to run (no row:
# nobody holds it). A claim that finds a session held asks this of a message
# RabbitMQ delivered again: the worker holding it died with it, and RabbitMQ
# gives a dead consumer's messages back at once, before the lease runs out.
LEASE_LEFT = """
SELECT extract(epoch FROM lease_expires_at - now())::float8 AS seconds
FROM sessions
WHERE id = %(id)s AND status IN ('running', 'compensating') AND lease_owner IS NOT NULL
  AND lease_expires_at > now()
"""


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


# The recorded calls of a step beyond the ones its replay made (a replay that
# made fewer calls than recorded; failed calls, which the tool reported as
# not done, and superseded ones do not count): the reason a session is
# parked when the first step of a run made fewer calls than the claim saw.
RECORDED_BEYOND = """
SELECT idempotency_key, call_index, tool, args_hash, request, status FROM tool_execution_cache
WHERE session_id = %(id)s AND step_seq = %(step_seq)s AND call_index >= %(calls_made)s
  AND superseded_at IS NULL AND status <> 'failed'
ORDER BY call_index
"""


# How often a running session's `step_seq_mark` catches up with its
# `step_seq` (every stop sets it exactly): the one step in this many that
# updates an index entry, so that compaction finds a running session at most
# this many checkpoints late.
STEP_SEQ_MARK_EVERY = 32


# A step's outcome: new state, cursor and status, the wait it suspends on (if
# any), a checkpoint row, the audit events, and the consumption of the delivery
# that woke it, in one statement. With a NULL state the step appends its patch
# instead (resumable/models/live_state.py): the stored state is left as it is, and
# PostgreSQL does not rewrite an unchanged TOASTed value. No row back means the
# epoch moved on (another worker owns the session) or the step was already
# committed; nothing was written. An event is at the new position unless it
# names its own `seq` (a poll check's `resumed`, at the one it woke from).
# (Compacted, so that the checkpoint insert is within the first 1024 bytes,
# all pg_stat_activity shows of a query: a test looks for it there.)
_COMMIT_STEP = """
WITH s AS (
    UPDATE sessions SET
        state = coalesce(%(state)s::jsonb, state),
        state_patch = CASE WHEN %(state)s IS NULL
                           THEN coalesce(state_patch, '[]') || %(state_patch)s::jsonb END,
        cursor = %(cursor)s, status = %(status)s, result = %(result)s::jsonb,
        step_seq = step_seq + 1, attempts = 0, error = NULL, history_rebase = false,
        step_seq_mark = CASE WHEN %(status)s <> 'running' OR mod(step_seq + 1, MARK_EVERY) = 0
                             THEN step_seq + 1 ELSE step_seq_mark END,
        wait = %(wait)s::jsonb, wake = NULL, wake_at = %(wake_at)s::timestamptz,
        lease_owner = CASE WHEN NOT %(release)s THEN lease_owner END,
        lease_expires_at = CASE WHEN NOT %(release)s
                                THEN now() + make_interval(secs => %(lease_seconds)s) END,
        step_started_at = CASE WHEN NOT %(release)s THEN now() END,
        step_deadline = CASE WHEN NOT %(release)s
                             THEN now() + make_interval(secs => %(next_time_limit)s) END,
        finished_at = CASE WHEN %(status)s = 'completed' THEN now() END,
        -- A step that continues the run leaves updated_at (indexed) alone, so
        -- that its update writes no index entry (HOT); step_started_at says
        -- when it committed (SessionRecord.changed_at).
        updated_at = CASE WHEN %(status)s = 'running' AND NOT %(release)s
                          THEN updated_at ELSE now() END
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
    SELECT s.id, coalesce(ev.seq, s.step_seq), ev.step, ev.type, ev.payload
    FROM s, jsonb_to_recordset(%(events)s::jsonb)
            AS ev(step text, type text, payload jsonb, seq bigint)
), d AS (
    UPDATE deliveries SET status = 'consumed', consumed_at = now(), consumed_seq = s.step_seq
    FROM s WHERE deliveries.session_id = %(id)s AND deliveries.id = %(delivery_id)s
             AND deliveries.status = 'pending'
), k AS (
    -- The first step after a wake closes what is left of the wait it ended.
    UPDATE callbacks SET status = 'closed', closed_at = now()
    FROM s WHERE %(after_wake)s AND callbacks.session_id = %(id)s AND callbacks.status = 'open'
                 AND callbacks.step_seq < s.step_seq
)
SELECT step_seq FROM s
""".replace("MARK_EVERY", str(STEP_SEQ_MARK_EVERY))
COMMIT_STEP = compact(_COMMIT_STEP)

# COMMIT_STEP that also records the results of the step's async tool calls
# not recorded yet (queue/tool_calls.py), under COMPLETE_TOOL_CALL's fence:
# %(records)s is {key: response}, found by the primary key. A statement of
# its own: a data-modifying CTE costs every commit its set-up (0.17 ms a
# commit, measured) even when it touches no row.
_RECORDS = """, r AS (
    UPDATE tool_execution_cache AS t
    SET status = 'completed', response = %(records)s::jsonb -> t.idempotency_key,
        error = NULL, updated_at = now()
    FROM s
    WHERE t.idempotency_key = ANY(%(record_keys)s::text[]) AND t.session_id = %(id)s
      AND t.lease_epoch = %(epoch)s AND t.status = 'started'
)"""
_END = "\nSELECT step_seq FROM s\n"
COMMIT_STEP_WITH_RECORDS = compact(_COMMIT_STEP.replace(_END, _RECORDS + _END))
# ... and the answers of calls without side effects made since the step's
# last write (tool_call_queries.answers_cte), with the records or without.
COMMIT_STEP_WITH_ANSWERS = compact(_COMMIT_STEP.replace(_END, ", " + answers_cte("s") + _END))
COMMIT_STEP_WITH_RECORDS_AND_ANSWERS = compact(
    _COMMIT_STEP.replace(_END, _RECORDS + ", " + answers_cte("s") + _END)
)


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
