"""Re-enqueue sessions that should be running but may have no queue message.

PostgreSQL is the only source of truth; Redis can lose every key (flushed,
restarted without persistence, a failed send) and this brings the work back:
pending sessions untouched for a grace period, and running sessions whose
worker let the lease expire. Rows are claimed with SKIP LOCKED, so several
schedulers may call this at once; a session enqueued twice is harmless, as
the lease claim lets only one run go ahead.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

import dramatiq

from resumable.models import session_queries
from resumable.models.database import Database
from resumable.models.status import SessionStatus
from resumable.queue.broker import enqueue_session
from resumable.settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    pending: list[uuid.UUID] = field(default_factory=list)
    expired: list[uuid.UUID] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.pending) + len(self.expired)


def reconcile(
    settings: Settings,
    db: Database,
    broker: dramatiq.Broker,
    *,
    grace_seconds: float | None = None,
    limit: int = 500,
) -> ReconcileReport:
    """Enqueue a message for every session found stranded; return what was found."""
    grace = settings.reconcile_grace_seconds if grace_seconds is None else grace_seconds
    report = ReconcileReport()
    with db.connection() as conn:
        rows = conn.execute(session_queries.RECONCILE, {"grace": grace, "limit": limit}).fetchall()
    for row in rows:
        session_id = uuid.UUID(str(row["id"]))
        enqueue_session(broker, settings, session_id)
        found = report.pending if row["status"] == SessionStatus.PENDING else report.expired
        found.append(session_id)
    if report.total:
        logger.info(
            "reconciler re-enqueued %d pending and %d expired-lease sessions",
            len(report.pending),
            len(report.expired),
            extra={"action": "reconciled"},
        )
    return report
