"""The scheduler's periodic jobs. Each is safe to run from several scheduler
processes at once: rows are claimed with ``FOR UPDATE SKIP LOCKED`` and every
wake-up is guarded by ``status = 'suspended'``, so a due session is resumed
once however many schedulers see it."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import dramatiq

from resumable.inbox import Inbox
from resumable.models import wait_queries
from resumable.models.database import Database
from resumable.queue.broker import enqueue_session
from resumable.reconcile import reconcile
from resumable.settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class Poller:
    settings: Settings
    db: Database
    broker: dramatiq.Broker
    batch: int = 500

    def wake_due(self) -> dict[str, int]:
        """Resume sessions whose timer, deadline or next poll check has come."""
        counts: dict[str, int] = {}
        while True:
            with self.db.connection() as conn:
                rows = conn.execute(wait_queries.WAKE_DUE, {"limit": self.batch}).fetchall()
            for row in rows:
                enqueue_session(self.broker, self.settings, uuid.UUID(str(row["id"])))
                kind = str(row["kind"])
                counts[kind] = counts.get(kind, 0) + 1
            if len(rows) < self.batch:
                break
        if counts:
            logger.info("woke due sessions: %s", counts, extra={"action": "wake_due"})
        return counts

    def wake_stranded(self) -> int:
        """Suspended sessions with a matching delivery that no one woke (the
        receiver died between storing it and waking the session)."""
        with self.db.connection() as conn:
            rows = conn.execute(wait_queries.STRANDED_DELIVERIES, {"limit": self.batch}).fetchall()
        inbox = Inbox(self.settings, self.db, self.broker)
        woke = sum(inbox.wake(uuid.UUID(str(row["id"]))) for row in rows)
        if woke:
            logger.warning("woke %d sessions with stranded deliveries", woke)
        return woke

    def reconcile(self) -> int:
        return reconcile(self.settings, self.db, self.broker).total

    def tick(self) -> None:
        """One pass of every job (the scheduler runs this every interval)."""
        for job in (self.wake_due, self.wake_stranded, self.reconcile):
            try:
                job()
            except Exception:
                logger.exception("scheduler job %s failed", job.__name__)
