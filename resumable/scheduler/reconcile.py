"""Re-enqueue sessions that should be running but may have no queue message.

PostgreSQL is the only source of truth; Redis can lose every key (flushed,
restarted without persistence, a failed send) and this brings the work back:
pending sessions untouched for a grace period (no grace when a marker key
shows Redis lost everything), running sessions whose worker let the lease
expire, and sessions of a worker whose heartbeat expired (dead or paused).
Rows are claimed with SKIP LOCKED, so several schedulers may call this at
once; a session enqueued twice is harmless, as the lease claim lets only one
run go ahead.

Every other "enqueue after commit" leaves a failed send to this function
(``enqueue_after_commit``: one line, and the caller succeeds). This one has
no one to leave it to, and commits nothing: its send raises, so the
scheduler's outage guard (``outages.py``) reports Redis unreachable once,
pauses the jobs and probes until it answers, and the next pass sends again.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass, field

import dramatiq

from resumable.broker.messages import enqueue_sessions
from resumable.models import session_queries, step_ops
from resumable.models.database import Database
from resumable.models.status import SessionStatus
from resumable.priorities import Routed
from resumable.settings import Settings

logger = logging.getLogger(__name__)


# How many pending sessions one pass brings back after Redis lost its keys
# (a normal pass takes `limit`; the grace period spreads the rest).
RESET_LIMIT = 100_000


@dataclass
class ReconcileReport:
    pending: list[uuid.UUID] = field(default_factory=list)
    expired: list[uuid.UUID] = field(default_factory=list)
    orphaned: list[uuid.UUID] = field(default_factory=list)  # held by a dead worker
    broker_reset: bool = False
    #: All of them, each with its lane: what was sent.
    sent: list[Routed] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.pending) + len(self.expired) + len(self.orphaned)


def broker_was_reset(broker: dramatiq.Broker) -> bool:
    """Whether Redis lost its keys since the last call (also true on the first
    call against a fresh Redis). Atomic, so of several schedulers one sees it."""
    lost = getattr(broker, "messages_lost", None)
    return bool(lost()) if lost is not None else False


def forget_marker(broker: dramatiq.Broker) -> None:
    forget = getattr(broker, "forget_marker", None)
    if forget is not None:
        forget()


def reconcile(
    settings: Settings,
    db: Database,
    broker: dramatiq.Broker,
    *,
    grace_seconds: float | None = None,
    limit: int = 500,
) -> ReconcileReport:
    """Enqueue a message for every session found stranded; return what was found.

    A pending session untouched for the grace period lost its message; when
    the marker key says Redis itself lost every key, no grace is waited for.
    Sessions held by a worker whose heartbeat expired are enqueued at once,
    so a live worker claims them before their leases run out."""
    grace = settings.reconcile_grace_seconds if grace_seconds is None else grace_seconds
    report = ReconcileReport(broker_reset=broker_was_reset(broker))
    if report.broker_reset:
        # Every message went with the keys: bring back every pending session now.
        grace, limit = 0, max(limit, RESET_LIMIT)
    try:
        with db.connection() as conn:
            stranded = session_queries.reconcile(conn, grace=grace, limit=limit)
            orphaned = step_ops.orphaned_sessions(conn)
        report.orphaned = [uuid.UUID(str(route.session_id)) for route in orphaned]
        for row in stranded:
            found = report.pending if row.status == SessionStatus.PENDING else report.expired
            found.append(row.id)
        report.sent = [*(Routed(row.id, row.priority) for row in stranded), *orphaned]
        # One Redis round trip per few hundred sessions (a Redis that lost its
        # keys can mean a hundred thousand of them).
        enqueue_sessions(broker, settings, report.sent)
    except BaseException:
        if report.broker_reset:
            # Not done: let the next pass see the reset again (the database may be
            # down), or the pending sessions would wait out the grace period.
            with contextlib.suppress(Exception):
                forget_marker(broker)
        raise
    if report.broker_reset:
        logger.info(
            "the broker had lost its keys (or this is its first start): re-enqueued"
            " %d pending sessions without a grace period",
            len(report.pending),
            extra={"action": "broker_reset"},
        )
    if report.total:
        logger.info(
            "reconciler re-enqueued %d pending, %d expired-lease and %d dead-worker sessions",
            len(report.pending),
            len(report.expired),
            len(report.orphaned),
            extra={"action": "reconciled"},
        )
    return report
