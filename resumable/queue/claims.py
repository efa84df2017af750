"""Claiming a session for one run: its lease, or why the message is let go.

One message means "run this session for a while". The claim (``CLAIM_LEASE``,
one ``UPDATE … RETURNING``) takes a session that is pending, due for a retry
or whose lease expired (or whose worker's heartbeat did), of an agent and
version this worker serves: it sets ``running``, bumps the fencing epoch,
names this thread as the lease's owner and writes the audit event. When it
takes nothing, one more read says why: a duplicate message (ignored), a
session another live worker serves (passed on), one no live worker serves
(left to wait for one), or one of an older version this worker migrates
(taken over, ``takeover.py``). A worker that is stopping claims nothing: the
message goes straight back.

A session of an agent with a concurrency limit (``resumable/limits.py``) is
not the claim's: ``CLAIM_LEASE`` leaves it, and ``_claim_with_slot`` takes
its key's lock, claims it if a slot is free, or else parks it to wait for
one (holding no worker and no message) in the same transaction.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass

import psycopg

from resumable.agent import AgentRegistry, version_label
from resumable.broker.lanes import level_of
from resumable.broker.messages import enqueue_after_commit
from resumable.models import slot_queries, step_ops
from resumable.models.step_queries import ClaimedSession
from resumable.priorities import DEFAULT_PRIORITY, Routed
from resumable.queue.outcomes import RunOutcome
from resumable.queue.scope import WorkerScope
from resumable.queue.takeover import take_over
from resumable.services.slots import LOCK_IDLE_SECONDS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerIdentity:
    """This worker process as the ``workers`` table and its lease owners name it."""

    worker_id: str
    agents: list[str]
    #: The version of each agent served here, and the older ones it migrates.
    versions: dict[str, int]
    takes_over: list[str]
    #: Each agent's fingerprint (``Agent.fingerprint``): which code this is.
    fingerprints: dict[str, str]

    @classmethod
    def of(cls, registry: AgentRegistry) -> WorkerIdentity:
        return cls(
            worker_id=f"{socket.gethostname()}:{os.getpid()}",
            agents=sorted(agent.name for agent in registry),
            versions={agent.name: agent.version for agent in registry},
            takes_over=sorted(
                f"{agent.name}@{old}" for agent in registry for old in agent.takes_over
            ),
            fingerprints={agent.name: agent.fingerprint for agent in registry},
        )


def as_delivered(session_id: uuid.UUID) -> Routed:
    """The session, to send on the lane its message came in on (before a
    claim has read its priority)."""
    from dramatiq.middleware import CurrentMessage

    message = CurrentMessage.get_current_message()
    level = level_of(message.queue_name) if message is not None else DEFAULT_PRIORITY
    return Routed(session_id, level)


# How long after a held session's lease ends its message delivered again
# comes back (``Claims._when_lease_ends``).
_AFTER_LEASE_SECONDS = 0.2


def _delivered_again() -> bool:
    """Whether the message being run was delivered before and not acked
    (RabbitMQ's ``redelivered`` flag: its consumer's connection dropped)."""
    from dramatiq.middleware import CurrentMessage

    message = CurrentMessage.get_current_message()
    return bool(getattr(message, "redelivered", False))


class Claims:
    """Claims sessions for the runs of one worker process (from any thread)."""

    def __init__(self, scope: WorkerScope, identity: WorkerIdentity) -> None:
        self._scope = scope
        self._identity = identity
        self._versions_json = json.dumps(identity.versions, sort_keys=True)
        #: Each agent's first step and its time limit, for the claim to stamp,
        #: and its fingerprint, for the claim's audit event to record which
        #: code ran the session (an unversioned agent's workers may differ).
        self._starts_json = json.dumps(
            {
                agent.name: {
                    "step": agent.start_step,
                    "limit": agent.policy(agent.start_step).time_limit,
                    "code": agent.fingerprint,
                }
                for agent in scope.registry
            },
            sort_keys=True,
        )
        #: The limited agents' ``Concurrency.spec()`` (``resumable/limits.py``).
        specs = {agent.name: agent.limits_spec() for agent in scope.registry}
        limits = {name: spec for name, spec in specs.items() if spec is not None}
        self._limited = bool(limits)
        self._limits_json = json.dumps(limits, sort_keys=True)

    def _owner(self) -> str:
        return f"{self._identity.worker_id}:{threading.get_ident()}"

    def claim(self, session_id: uuid.UUID) -> ClaimedSession | RunOutcome:
        """The claimed session, or how the message was let go."""
        scope = self._scope
        if scope.shutdown.stopping:
            # Taken off the queue as the worker stops: straight back, unclaimed.
            enqueue_after_commit(
                scope.broker,
                scope.settings,
                [as_delivered(session_id)],
                why="returned unclaimed (stopping)",
            )
            return RunOutcome.NOT_CLAIMED
        with scope.db.connection() as conn:
            claim = step_ops.claim(
                conn,
                session_id,
                owner=self._owner(),
                versions=self._versions_json,
                starts=self._starts_json,
                lease_seconds=scope.settings.lease_seconds,
                limits=self._limits_json,
            )
        if claim is not None:
            return claim
        if self._limited:
            slotted = self._claim_with_slot(session_id)
            if slotted is not None:
                return slotted
        return self._not_claimed(session_id)

    def _claim_with_slot(self, session_id: uuid.UUID) -> ClaimedSession | RunOutcome | None:
        """A limited agent's session: claimed with a free slot of its key, or
        parked to wait for one; None if it is not such a session (then it is
        one the plain claim let go for another reason)."""
        owner = self._owner()
        try:
            return self._slot_transaction(session_id, owner)
        except psycopg.errors.LockNotAvailable:
            # The key's lock stayed taken (a claimant paused or cut off in its
            # transaction, until the server ends it): try again in a moment.
            return self._again_soon(session_id, "its concurrency key's lock is busy")

    def _lease_left(self, session_id: uuid.UUID) -> float | None:
        with self._scope.db.connection() as conn:
            return step_ops.lease_left(conn, session_id)

    def _when_lease_ends(self, session_id: uuid.UUID, left: float) -> RunOutcome:
        """A message RabbitMQ delivered again while another worker holds its
        session: that worker most likely died with it (RabbitMQ gives a dead
        consumer's messages back at once, Redis only after a heartbeat
        timeout, when the lease has run out). Dropped as a duplicate, the
        session would wait for the scheduler to find its worker dead; sent
        again for when the lease ends, it is claimed then if nobody renewed
        it, and ignored as the duplicate it is if somebody did."""
        scope = self._scope
        enqueue_after_commit(
            scope.broker,
            scope.settings,
            [as_delivered(session_id)],
            why="delivered again while its lease runs",
            delay=left + _AFTER_LEASE_SECONDS,
        )
        return RunOutcome.YIELDED

    def _again_soon(self, session_id: uuid.UUID, why: str) -> RunOutcome:
        """The message goes back to the queue for a second (any worker's)."""
        scope = self._scope
        enqueue_after_commit(
            scope.broker, scope.settings, [as_delivered(session_id)], why=why, delay=1.0
        )
        return RunOutcome.YIELDED

    def _slot_transaction(
        self, session_id: uuid.UUID, owner: str
    ) -> ClaimedSession | RunOutcome | None:
        scope = self._scope
        # Not pipelined: the server ends a transaction whose client idles in
        # it only once a sync has told it so, and a paused worker must not
        # keep the key's lock (every claim of the key waits for it).
        with scope.db.connection() as conn, conn.transaction():
            slot = slot_queries.slot_locked(
                conn,
                session_id,
                limits=self._limits_json,
                versions=self._versions_json,
                starts=self._starts_json,
                idle_seconds=LOCK_IDLE_SECONDS,
            )
            if slot is None:
                return None
            claim = slot_queries.claim_with_slot(
                conn,
                session_id,
                slot,
                owner=owner,
                versions=self._versions_json,
                starts=self._starts_json,
                limits=self._limits_json,
                lease_seconds=scope.settings.lease_seconds,
            )
            parked = claim is None and slot_queries.park_for_slot(
                conn,
                session_id,
                slot,
                owner=owner,
                versions=self._versions_json,
                starts=self._starts_json,
                limits=self._limits_json,
            )
        if claim is not None:
            return claim
        if parked:
            logger.debug(
                "no free slot of %s (limit %d): the session waits for one",
                slot.key,
                slot.limit,
                extra={"action": "slot_waiting"},
            )
            return RunOutcome.WAITING_FOR_SLOT
        return RunOutcome.NOT_CLAIMED

    def _not_claimed(self, session_id: uuid.UUID) -> ClaimedSession | RunOutcome:
        """A message this worker cannot simply claim: a duplicate, a session
        of an agent or version it does not serve (passed on when a live
        worker serves it; left to wait, untouched, when none does: a worker
        that serves it enqueues it when it starts), or one of an older
        version this worker migrates and no live worker serves (taken over:
        the claim it returns)."""
        scope, identity = self._scope, self._identity
        with scope.db.connection() as conn:
            row = step_ops.claimable_elsewhere(
                conn, session_id, versions=self._versions_json, takes_over=identity.takes_over
            )
        if row is None:
            if _delivered_again():
                left = self._lease_left(session_id)
                if left is not None:
                    return self._when_lease_ends(session_id, left)
            # Finished, owned by a live worker, or unknown: a duplicate message.
            logger.debug("session not claimable; message ignored", extra={"action": "skip"})
            return RunOutcome.NOT_CLAIMED
        label = version_label(row.agent, row.version)
        if row.take_over:
            return take_over(
                scope.settings,
                scope.db,
                scope.registry,
                session_id,
                self._owner(),
                identity.takes_over,
            )
        if row.served:
            logger.debug(
                "%s is not served here; message passed on",
                label,
                extra={"action": "agent_not_loaded"},
            )
            return self._again_soon(session_id, "passed on to a worker serving it")
        with scope.db.connection() as conn:  # if it waited for a slot, no longer
            slot_queries.stop_waiting(conn, session_id)
        if row.agent in identity.versions:
            logger.info(
                "no live worker serves %s (this one runs %s); the session waits for one",
                label,
                version_label(row.agent, identity.versions[row.agent]),
                extra={"action": "version_not_served"},
            )
        else:
            logger.info(
                "no live worker loads agent %r; the session waits for one",
                row.agent,
                extra={"action": "agent_not_served"},
            )
        return RunOutcome.NOT_CLAIMED
