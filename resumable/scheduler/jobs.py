"""The scheduler's periodic jobs. Each is safe to run from several scheduler
processes at once: rows are claimed with ``FOR UPDATE SKIP LOCKED`` and every
wake-up is guarded by ``status = 'suspended'``, so a due session is resumed
once however many schedulers see it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import dramatiq

from resumable.alerts import AlertSender
from resumable.inbox import Inbox
from resumable.models import failure_queries, wait_queries
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

    def wake_due_retries(self) -> int:
        """Failed attempts whose retry time has come (if the delayed queue
        message was lost, this is what brings them back)."""
        woke = 0
        with self.db.connection() as conn:
            retries = conn.execute(
                failure_queries.WAKE_DUE_RETRIES, {"limit": self.batch}
            ).fetchall()
            compensations = conn.execute(
                failure_queries.WAKE_DUE_COMPENSATIONS, {"limit": self.batch}
            ).fetchall()
        for row in [*retries, *compensations]:
            enqueue_session(self.broker, self.settings, uuid.UUID(str(row["id"])))
            woke += 1
        return woke

    def deliver_alerts(self) -> int:
        return AlertSender(self.settings, self.db).deliver_due()

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

    @property
    def jobs(self) -> list[Callable[[], object]]:
        return [
            self.wake_due,
            self.wake_due_retries,
            self.wake_stranded,
            self.reconcile,
            self.deliver_alerts,
        ]

    def tick(self) -> None:
        """One pass of every job (the scheduler runs this every interval)."""
        for job in self.jobs:
            try:
                job()
            except Exception:
                logger.exception("scheduler job %s failed", job.__name__)
