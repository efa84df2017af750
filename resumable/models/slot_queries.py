"""Named SQL for concurrency slots (``resumable/limits.py``), each statement's
typed function after it.

A slot is not a row: a session holds one of its key's slots while it is
``running`` under a live lease (and its worker's heartbeat is live), so a
slot whose worker died frees with the lease, by itself. Who may take a slot
is decided under a transaction-scoped advisory lock on the key
(``LOCK_KEY``): the claim and the park that follows it, and each wake of
the key's waiters, take it first, so each sees the others' committed
decisions (a statement's snapshot is taken after the lock is granted).
Without it two claims could each see one free slot and both take it, or a
run could end between a claimant's count and its park and wake nobody.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from resumable.models import rows
from resumable.models.agent_queries import WORKER_OF_LEASE_OWNER
from resumable.models.step_queries import (
    CLAIMABLE,
    RUNNABLE_HERE,
    SLOT_SPEC,
    WORKER_DIED_IN_STEP,
    ClaimedSession,
    claim_statement,
    compact,
)
from resumable.priorities import Routed

# Serializes the decisions about one key's slots for the rest of the
# transaction (a hash collision only serializes two keys' decisions too).
# Transaction-scoped, so it works through PgBouncer's transaction pooling.
# The server ends the transaction if its client goes quiet in it for
# %(idle)s (a paused or partitioned process must not keep the key's lock;
# the transaction must then not be pipelined: the server starts that clock
# only at a sync), and a wait for the lock gives up after as long
# (``LockNotAvailable``: the caller tries again later).
LOCK_KEY = """SELECT set_config('idle_in_transaction_session_timeout', %(idle)s, true),
                     set_config('lock_timeout', %(idle)s, true),
                     pg_advisory_xact_lock(hashtextextended(%(key)s, 4242))"""

# The longest input value a key holds as it is; a longer one is held as its
# first 64 characters and its MD5 (an index entry holds at most 2.7 KB).
MAX_KEY_VALUE = 200

# The key of a session this worker runs and may claim now whose run is
# under a concurrency limit (``SLOT_SPEC``), with the limit: as a JSON
# array's text, the agent (or, for a step's own limit, [agent, step]) and
# the input's value at the key's path, if the limit has one: ``["support",
# "acme"]``, ``[["support", "call_llm"]]``; null where the input lacks it.
SLOT_NEEDED = f"""
SELECT (jsonb_build_array(CASE WHEN x.spec ? 'step'
                               THEN jsonb_build_array(sessions.agent, x.spec ->> 'step')
                               ELSE to_jsonb(sessions.agent) END)
        || CASE WHEN jsonb_array_length(x.spec -> 'key') = 0 THEN '[]'::jsonb
                WHEN length(v.value) > {MAX_KEY_VALUE}
                THEN jsonb_build_array(left(v.value, 64) || '...md5:' || md5(v.value))
                ELSE jsonb_build_array(v.value) END
       )::text AS key,
       (x.spec ->> 'limit')::int AS "limit",
       x.spec ->> 'step' AS step
FROM sessions
CROSS JOIN LATERAL (SELECT {SLOT_SPEC} AS spec) x
CROSS JOIN LATERAL (SELECT sessions.input #>> ARRAY(
                        SELECT jsonb_array_elements_text(x.spec -> 'key')) AS value) v
WHERE sessions.id = %(id)s AND x.spec IS NOT NULL AND sessions.status <> 'compensating'
  AND {RUNNABLE_HERE} AND {CLAIMABLE}
"""

# SLOT_NEEDED, and the key's lock taken (as LOCK_KEY) when there is one: one
# round trip where a read and a lock took two. The claim that follows is a
# statement of its own, its snapshot taken after the lock was granted.
SLOT_LOCKED = f"""
SELECT n.key, n."limit", n.step,
       set_config('idle_in_transaction_session_timeout', %(idle)s, true) AS idle,
       set_config('lock_timeout', %(idle)s, true) AS waits,
       pg_advisory_xact_lock(hashtextextended(n.key, 4242))::text AS locked
FROM ({SLOT_NEEDED}) n
"""

# A waiter that no live worker can run (none serves its version) stops
# waiting: it would stand ahead of its key's line for good. It stays a
# pending session no worker serves (listed, alerted on, and enqueued by the
# first worker that serves it, whose claim parks it again if need be).
STOP_WAITING = """
UPDATE sessions SET slot_wait_since = NULL
WHERE id = %(id)s AND status = 'pending' AND slot_wait_since IS NOT NULL
"""

# Whether a key has a session waiting for its slots (no lock: a run's end
# asks first, and takes the key's lock only to wake someone).
HAS_WAITERS = """
SELECT EXISTS (SELECT 1 FROM sessions
               WHERE concurrency_key = %(key)s AND slot_wait_since IS NOT NULL
                 AND status = 'pending')
"""

# A session of `alias` holds a slot of its key: running under a live lease,
# its worker not dead in its step (a crashed worker's slots free seconds
# after the crash, as its sessions become claimable).
_HOLDS_SLOT = (
    """({a}.status = 'running' AND {a}.lease_expires_at > now()
    AND NOT EXISTS (SELECT 1 FROM workers hb WHERE hb.id = {owner} AND """
    + WORKER_DIED_IN_STEP.format(w="hb", s="{a}")
    + "))"
)


def _holders(key: str, *, but: str | None = None) -> str:
    """How many sessions hold a slot of the key `key` (an SQL expression),
    other than `but` (``ix_sessions_slot_holders``)."""
    holds = _HOLDS_SLOT.format(a="o", owner=WORKER_OF_LEASE_OWNER.format(owner="o.lease_owner"))
    other = "" if but is None else f" AND o.id <> {but}"
    return f"""(SELECT count(*) FROM sessions o
     WHERE o.concurrency_key = {key} AND o.status = 'running'{other} AND {holds})"""


# The session, on its locked row, is still under the limit whose key was
# locked (a duplicate message's run may have moved it on to another step
# since SLOT_LOCKED read it): its spec names the same step, or none.
SAME_LIMIT = f"""({SLOT_SPEC} IS NOT NULL
    AND ({SLOT_SPEC}) ->> 'step' IS NOT DISTINCT FROM %(step)s)"""

# A slot is free for this session when the key's holders and the waiters
# ahead of it (all of them, for a session that was not waiting) leave one:
# a key's sessions start in the order they began to wait, and a new
# arrival does not overtake a waiter just woken for a freed slot. The
# waiters are counted up to the limit only (``ix_sessions_slot_waiters``).
HAS_FREE_SLOT = f"""(
    {_holders("%(key)s", but="sessions.id")}
    + (SELECT count(*) FROM (
        SELECT 1 FROM sessions w
        WHERE w.concurrency_key = %(key)s AND w.slot_wait_since IS NOT NULL
          AND w.status = 'pending' AND w.id <> sessions.id
          AND (w.slot_wait_since, w.id)
              < (coalesce(sessions.slot_wait_since, 'infinity'), sessions.id)
        LIMIT %(limit)s) ahead)
    < %(limit)s
)"""

# Beside the claim: the key's running sessions that no longer hold their
# slot (their lease ran out, or their worker's heartbeat did) are fenced
# off: a new epoch and back to pending, where the reconciler finds them. A
# paused holder that came back and renewed its lease before anyone claimed
# its session would otherwise run beside the session its slot went to.
FENCE_LAPSED = f"""lapsed AS (
    UPDATE sessions f SET status = 'pending', lease_epoch = f.lease_epoch + 1,
        lease_owner = NULL, lease_expires_at = NULL
    WHERE f.concurrency_key = %(key)s AND f.status = 'running' AND f.id <> %(id)s
      AND NOT {_HOLDS_SLOT.format(a="f", owner=WORKER_OF_LEASE_OWNER.format(owner="f.lease_owner"))}
    RETURNING f.id, f.step_seq, f.cursor, f.lease_epoch
), lapsed_e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT id, step_seq, cursor, 'slot_lapsed',
           jsonb_build_object('key', %(key)s::text, 'epoch', lease_epoch)
    FROM lapsed
),"""

# The claim of a limited agent's session, after LOCK_KEY: CLAIM_LEASE's,
# taken only with a free slot, stamping the key and ending the wait.
CLAIM_WITH_SLOT = compact(
    claim_statement(
        f"""{RUNNABLE_HERE} AND sessions.status <> 'compensating' AND {HAS_FREE_SLOT}
            AND {SAME_LIMIT}""",
        also_set="""concurrency_key = %(key)s, concurrency_limit = %(limit)s,
                    slot_wait_since = NULL,""",
        slot=True,
        first=FENCE_LAPSED,
    )
)

# No free slot: the session waits for one, pending with no queue message
# (the reconciler leaves such sessions alone), since the first time it
# found none: the moment it parks, under the key's lock (clock_timestamp,
# not the transaction's start, which came before the wait for the lock), so
# the line's order is the order of parks. A session whose lease had expired
# is fenced off its old owner. The first park of a wait writes its audit
# event.
PARK_FOR_SLOT = f"""
WITH prev AS (
    SELECT id, slot_wait_since FROM sessions WHERE id = %(id)s
), s AS (
    UPDATE sessions SET
        status = 'pending',
        wake_at = NULL,
        lease_epoch = CASE WHEN sessions.status = 'running'
                           THEN sessions.lease_epoch + 1 ELSE sessions.lease_epoch END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        concurrency_key = %(key)s,
        concurrency_limit = %(limit)s,
        slot_wait_since = coalesce(sessions.slot_wait_since, clock_timestamp()),
        updated_at = now()
    WHERE sessions.id = %(id)s AND sessions.status <> 'compensating'
      AND {RUNNABLE_HERE} AND {CLAIMABLE} AND {SAME_LIMIT}
    RETURNING sessions.id, sessions.step_seq, sessions.cursor
), e AS (
    INSERT INTO audit_events (session_id, seq, step, event_type, payload)
    SELECT s.id, s.step_seq, s.cursor, 'slot_waiting',
           jsonb_build_object('key', %(key)s::text, 'limit', %(limit)s::int,
                              'worker', %(owner)s::text)
    FROM s JOIN prev ON prev.id = s.id
    WHERE prev.slot_wait_since IS NULL
)
SELECT count(*) AS parked FROM s
"""

# After LOCK_KEY: the key's oldest waiters, as many as it has free slots,
# for a queue message each; `updated_at` says when a waiter was last
# woken, and one woken less than %(grace)s seconds ago is not woken again
# (its message is on its way).
WAKE_WAITERS = f"""
WITH next AS (
    SELECT w.id, w.updated_at FROM sessions w
    WHERE w.concurrency_key = %(key)s AND w.slot_wait_since IS NOT NULL
      AND w.status = 'pending'
    ORDER BY w.slot_wait_since, w.id
    LIMIT greatest(%(limit)s - {_holders("%(key)s")}, 0)
), woken AS (
    UPDATE sessions SET updated_at = now()
    FROM next
    WHERE sessions.id = next.id
      AND next.updated_at <= now() - make_interval(secs => %(grace)s)
    RETURNING sessions.id, sessions.priority
)
SELECT id, priority FROM woken
"""

# Keys whose waiters a wake missed (a worker died holding the slot, or
# between its run's end and the wake; or a woken waiter's message was lost,
# or the waiter was cancelled before it ran): each key with a waiter, a
# free slot and an oldest waiter not woken in the last %(grace)s seconds,
# with the limit its waiters were parked under. The keys are found by a
# skip scan of ``ix_sessions_slot_waiters`` (one probe a key, not a row a
# waiter).
KEYS_TO_WAKE = f"""
WITH RECURSIVE k AS (
    (SELECT concurrency_key AS key FROM sessions
     WHERE slot_wait_since IS NOT NULL AND status = 'pending'
     ORDER BY concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT s.concurrency_key FROM sessions s
            WHERE s.slot_wait_since IS NOT NULL AND s.status = 'pending'
              AND s.concurrency_key > k.key
            ORDER BY s.concurrency_key LIMIT 1)
    FROM k WHERE k.key IS NOT NULL
), oldest AS (
    SELECT k.key, w.concurrency_limit AS "limit", w.updated_at
    FROM k CROSS JOIN LATERAL (
        SELECT concurrency_limit, updated_at FROM sessions
        WHERE concurrency_key = k.key AND slot_wait_since IS NOT NULL AND status = 'pending'
        ORDER BY slot_wait_since, id LIMIT 1) w
    WHERE k.key IS NOT NULL
)
SELECT key, "limit" FROM oldest
WHERE updated_at <= now() - make_interval(secs => %(grace)s)
  AND {_holders("oldest.key")} < "limit"
LIMIT %(max_keys)s
"""

# Per key with a holder or a waiter: how many run and how many wait, the
# longest waits first (the console, the CLI and /metrics; bounded).
SLOT_USAGE = """
SELECT concurrency_key AS key,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status = 'pending' AND slot_wait_since IS NOT NULL) AS waiting,
       max(concurrency_limit) AS "limit",
       extract(epoch FROM now() - min(slot_wait_since)
                              FILTER (WHERE status = 'pending'))::float8 AS oldest_wait_seconds
FROM sessions
WHERE concurrency_key IS NOT NULL
  AND ((status = 'running') OR (status = 'pending' AND slot_wait_since IS NOT NULL))
GROUP BY concurrency_key
ORDER BY waiting DESC, running DESC, concurrency_key
LIMIT %(limit)s
"""


@dataclass(frozen=True)
class SlotNeeded:
    """A row of SLOT_NEEDED: the key a session's claim must find a slot in."""

    key: str
    limit: int
    #: The step whose own limit it is (None: the agent's).
    step: str | None = None


@dataclass(frozen=True)
class KeyToWake:
    """A row of KEYS_TO_WAKE."""

    key: str
    limit: int


@dataclass(frozen=True)
class SlotUsage:
    """A row of SLOT_USAGE: one key's slots as they stand."""

    key: str
    running: int
    waiting: int
    limit: int | None
    oldest_wait_seconds: float | None


def lock_key(conn: psycopg.Connection[Any], key: str, *, idle_seconds: float) -> None:
    """Take the key's advisory lock until the transaction ends (which the
    server ends if the client idles in it for `idle_seconds`)."""
    conn.execute(LOCK_KEY, {"key": key, "idle": _ms(idle_seconds)})


def slot_locked(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    *,
    limits: str,
    versions: str,
    starts: str,
    idle_seconds: float,
) -> SlotNeeded | None:
    """In a transaction: ``slot_needed``, with its key's lock taken."""
    params = {
        "id": session_id,
        "limits": limits,
        "versions": versions,
        "starts": starts,
        "idle": _ms(idle_seconds),
    }
    row = conn.execute(SLOT_LOCKED, params).fetchone()
    return None if row is None else SlotNeeded(key=row["key"], limit=row["limit"], step=row["step"])


def stop_waiting(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> None:
    """The session no longer waits for a slot (see STOP_WAITING)."""
    rows.run(conn, STOP_WAITING, {"id": session_id})


def has_waiters(conn: psycopg.Connection[Any], key: str) -> bool:
    """Whether a session waits for a slot of `key` (read without the lock)."""
    return bool(rows.value(conn, HAS_WAITERS, {"key": key}))


def _ms(seconds: float) -> str:
    return f"{max(1, int(seconds * 1000))}ms"


def claim_with_slot(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    slot: SlotNeeded,
    *,
    owner: str,
    versions: str,
    starts: str,
    limits: str,
    lease_seconds: float,
) -> ClaimedSession | None:
    """After ``slot_locked``: the claim, if the key has a slot free for this session."""
    params = _slot_params(session_id, slot, owner, versions, starts, limits)
    return rows.one(
        conn, ClaimedSession, CLAIM_WITH_SLOT, {**params, "lease_seconds": lease_seconds}
    )


def park_for_slot(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    slot: SlotNeeded,
    *,
    owner: str,
    versions: str,
    starts: str,
    limits: str,
) -> bool:
    """After a claim found no free slot, in its transaction: wait for one."""
    params = _slot_params(session_id, slot, owner, versions, starts, limits)
    return bool(rows.value(conn, PARK_FOR_SLOT, params))


def _slot_params(
    session_id: uuid.UUID, slot: SlotNeeded, owner: str, versions: str, starts: str, limits: str
) -> dict[str, Any]:
    """What the claim and the park under a slot's lock both name."""
    return {
        "id": session_id,
        "key": slot.key,
        "limit": slot.limit,
        "step": slot.step,
        "owner": owner,
        "versions": versions,
        "starts": starts,
        "limits": limits,
    }


def wake_waiters(
    conn: psycopg.Connection[Any], key: str, limit: int, *, grace: float = 0.0
) -> list[Routed]:
    """After ``lock_key``: the waiters to send a message to, oldest first."""
    return rows.routes(conn, WAKE_WAITERS, {"key": key, "limit": limit, "grace": grace})


def keys_to_wake(conn: psycopg.Connection[Any], *, grace: float, max_keys: int) -> list[KeyToWake]:
    """Keys with a free slot whose oldest waiter nobody woke lately."""
    return rows.every(conn, KeyToWake, KEYS_TO_WAKE, {"grace": grace, "max_keys": max_keys})


def slot_usage(conn: psycopg.Connection[Any], *, limit: int = 50) -> list[SlotUsage]:
    """The busiest keys: how many sessions of each run and wait."""
    return rows.every(conn, SlotUsage, SLOT_USAGE, {"limit": limit})
