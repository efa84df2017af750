"""The scheduler's periodic jobs. Each is safe to run from several scheduler
processes at once: rows are claimed with ``FOR UPDATE SKIP LOCKED`` and every
wake-up is guarded by ``status = 'suspended'``, so a due session is resumed
once however many schedulers see it.

Each batch of woken sessions is committed first and then enqueued in one
Redis round trip (``enqueue_after_commit``), so a burst of due timers reaches
the workers as fast as they can run it; a batch whose enqueue fails is left to
the reconciler, as every "enqueue after commit" is, and the job wakes no more
this pass (the reconciler's own send then reports the outage, see
``reconcile``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import dramatiq

from resumable import tracing
from resumable.agent import AgentRegistry
from resumable.broker.messages import enqueue_after_commit
from resumable.coordination import children, locks
from resumable.models import activity_queries, failure_queries, wait_ops
from resumable.models.database import Database
from resumable.priorities import Routed
from resumable.scheduler.alerts import AlertSender, sync_lingering
from resumable.scheduler.reconcile import reconcile
from resumable.scheduler.retention import compact_histories, retire_old_sessions
from resumable.services import slots
from resumable.services.inbox import Inbox
from resumable.services.schedules import Schedules
from resumable.settings import Settings

logger = logging.getLogger(__name__)

# How often a scheduler tries to write the activity sample (one row a
# minute is kept: a try in a minute already sampled writes nothing).
SAMPLE_SECONDS = 20.0


@dataclass
class SchedulerJobs:
    settings: Settings
    db: Database
    broker: dramatiq.Broker
    batch: int = 500
    registry: AgentRegistry | None = None
    retention_interval: float = 60.0
    _last_retention: float = field(default=float("-inf"), init=False)
    _last_sample: float = field(default=float("-inf"), init=False)

    def wake_due(self) -> dict[str, int]:
        """Resume sessions whose timer, deadline or next poll check has come."""
        counts: dict[str, int] = {}
        began = time.monotonic()
        sending = 0.0
        while True:
            began_ns = time.time_ns()
            with self.db.connection() as conn:
                rows = wait_ops.wake_due(conn, limit=self.batch)
            sent = time.monotonic()
            reached = enqueue_after_commit(
                self.broker,
                self.settings,
                [Routed(row.id, row.priority) for row in rows],
                why="due wake-ups",
            )
            sending += time.monotonic() - sent
            for row in rows:
                counts[row.kind] = counts.get(row.kind, 0) + 1
            woken = [{"id": row.id, "kind": row.kind} for row in rows]  # tracing's rows
            tracing.woken(self.db, woken, began_ns=began_ns)
            if len(rows) < self.batch or not reached:
                break
        if counts:
            elapsed = time.monotonic() - began
            logger.info(
                "woke due sessions: %s in %.3f s (%.3f s sending)",
                counts,
                elapsed,
                sending,
                extra={"action": "wake_due"},
            )
        return counts

    def wake_due_retries(self) -> int:
        """Failed attempts whose retry time has come (if the delayed queue
        message was lost, this is what brings them back)."""
        woke = 0
        while True:
            with self.db.connection() as conn:
                retries = failure_queries.wake_due_retries(conn, limit=self.batch)
                compensations = failure_queries.wake_due_compensations(conn, limit=self.batch)
            due = [*retries, *compensations]
            reached = enqueue_after_commit(self.broker, self.settings, due, why="due retries")
            woke += len(due)
            if not reached or (len(retries) < self.batch and len(compensations) < self.batch):
                return woke

    def retention(self) -> int:
        """Housekeeping, at most once a `retention_interval` (it scans sessions)."""
        now = time.monotonic()
        if now - self._last_retention < self.retention_interval:
            return 0
        self._last_retention = now
        return retire_old_sessions(self.settings, self.db) + compact_histories(
            self.settings, self.db, self.registry
        )

    def sample_activity(self) -> bool:
        """This minute's activity sample for the console's charts, at most
        once every SAMPLE_SECONDS (several schedulers write one row a minute)."""
        now = time.monotonic()
        if now - self._last_sample < SAMPLE_SECONDS:
            return False
        self._last_sample = now
        with self.db.connection() as conn:
            activity_queries.sample(conn)
        return True

    def deliver_alerts(self) -> int:
        return AlertSender(self.settings, self.db).deliver_due()

    def lingering(self) -> dict[str, int]:
        """Alert on sessions lingering past a threshold, and when they stop."""
        return sync_lingering(self.settings, self.db)

    def wake_stranded(self) -> int:
        """Suspended sessions with a matching delivery that no one woke (the
        receiver died between storing it and waking the session)."""
        with self.db.connection() as conn:
            stranded = wait_ops.stranded_deliveries(conn, limit=self.batch)
        inbox = Inbox(self.settings, self.db, self.broker)
        woke = sum(inbox.wake(session_id) for session_id in stranded)
        if woke:
            logger.warning("woke %d sessions with stranded deliveries", woke)
        return woke

    def reconcile(self) -> int:
        began_ns = time.time_ns()
        report = reconcile(self.settings, self.db, self.broker)
        tracing.recovered(
            self.db,
            began_ns,
            pending=report.pending,
            expired=report.expired,
            orphaned=report.orphaned,
        )
        return report.total

    def grant_locks(self) -> int:
        """Locks with waiters whose grant was missed (a worker died between
        a release and the grant) or whose holder finished without releasing."""
        return locks.grant_waiting(self.db, self.broker, self.settings)

    def start_schedules(self) -> int:
        """Start the sessions of due schedules (``services/schedules.py``)."""
        return len(Schedules(self.settings, self.db, self.broker).start_due().started)

    def wake_slot_waiters(self) -> int:
        """Sessions waiting for a concurrency slot that is free and that no
        run's end woke them for (its worker died holding the slot, or the
        message was lost): ``services/slots.py``."""
        grace = max(1.0, 2 * self.settings.scheduler_interval_seconds)
        return len(slots.wake_missed(self.settings, self.db, self.broker, grace=grace))

    def wake_parents(self) -> int:
        """Parents whose children finished but whose wake-up was missed."""
        return children.wake_waiting_parents(self.db, self.broker, self.settings)

    @property
    def jobs(self) -> list[Callable[[], object]]:
        return [
            self.wake_due,
            self.start_schedules,
            self.wake_due_retries,
            self.wake_stranded,
            self.reconcile,
            self.lingering,
            self.grant_locks,
            self.wake_slot_waiters,
            self.wake_parents,
            self.deliver_alerts,
            self.retention,
            self.sample_activity,
        ]
