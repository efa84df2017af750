"""``resumable scheduler``: an APScheduler 3 BlockingScheduler running the
poller's jobs every interval.

The job store is in memory and per process (two processes sharing an
APScheduler SQL job store both run every job); safety against several
schedulers comes from the jobs' own SQL instead.
"""

from __future__ import annotations

import logging
import signal
from datetime import UTC, datetime
from types import FrameType

from apscheduler.schedulers.blocking import BlockingScheduler

from resumable.agent import AgentRegistry
from resumable.models.database import Database
from resumable.queue.broker import build_broker
from resumable.scheduler.jobs import SchedulerJobs
from resumable.settings import Settings

logger = logging.getLogger(__name__)


def run_scheduler(settings: Settings, database_url: str, redis_url: str) -> None:
    db = Database(database_url, pool_size=2)
    broker = build_broker(settings, redis_url)
    # Agents are optional here: only compacting event-sourced histories needs them.
    registry = AgentRegistry.from_modules(settings.agents) if settings.agents else None
    poller = SchedulerJobs(settings, db, broker, registry=registry)
    scheduler = BlockingScheduler(timezone=UTC)
    interval = settings.scheduler_interval_seconds
    for job in poller.jobs:
        scheduler.add_job(
            job,
            "interval",
            seconds=interval,
            id=getattr(job, "__name__", repr(job)),
            next_run_time=datetime.now(UTC),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(interval * 5)),
        )

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logger.info("received %s; stopping", signal.Signals(signum).name)
        scheduler.shutdown(wait=False)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    logger.info("scheduler started: every %.2f s", interval, extra={"action": "scheduler_started"})
    try:
        scheduler.start()
    finally:
        broker.close()
        db.close()
        logger.info("scheduler stopped", extra={"action": "scheduler_stopped"})
