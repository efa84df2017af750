"""``resumable scheduler``: an APScheduler 3 BlockingScheduler running the
poller's jobs every interval.

The job store is in memory and per process (two processes sharing an
APScheduler SQL job store both run every job); safety against several
schedulers comes from the jobs' own SQL instead.

The scheduler starts, and keeps running, while PostgreSQL or Redis is down:
``Outages`` pauses the jobs, says once what is unreachable and why, probes
with capped exponential backoff and says when it answers again.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from datetime import UTC, datetime
from functools import partial
from types import FrameType

from apscheduler.events import EVENT_SCHEDULER_STARTED
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.blocking import BlockingScheduler

from resumable._internal.reachability import (
    PROBE_TIMEOUT,
    database_location,
    probe_database,
    probe_redis,
    redis_location,
)
from resumable._internal.startup_heap import freeze_startup_heap
from resumable._internal.stop_signals import StopSignals
from resumable.agent import AgentRegistry
from resumable.broker.redis import build_broker
from resumable.models.database import Database
from resumable.scheduler.jobs import SchedulerJobs
from resumable.scheduler.outages import Dependency, Outages
from resumable.settings import Settings

logger = logging.getLogger(__name__)

# The longest pause between probes of a server that is down, in intervals
# (and never more than this many seconds).
MAX_BACKOFF_INTERVALS = 30
MAX_BACKOFF_SECONDS = 30.0


class _RoutineNoise(logging.Filter):
    """APScheduler warns when a run is skipped because the previous one is
    still going, or ran late; a job waiting on a slow or absent server does
    both every interval. Outages reports the cause once instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            "maximum number of running instances reached" in message or "was missed by" in message
        )


def run_scheduler(
    settings: Settings,
    database_url: str,
    redis_url: str,
    registry: AgentRegistry | None = None,
) -> None:
    """Run until SIGTERM/SIGINT. `registry` (optional) lets retention compact
    event-sourced histories."""
    # The pool narrates each failed reconnection; Outages says it once.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    db = Database(database_url, pool_size=2)
    # A job waits this long for a pooled connection (the pool's default is
    # 30 s), so an outage is noticed and reported within seconds.
    db.pool.timeout = PROBE_TIMEOUT
    broker = build_broker(settings, redis_url)
    poller = SchedulerJobs(settings, db, broker, registry=registry)
    interval = settings.scheduler_interval_seconds
    outages = Outages(
        [
            Dependency(
                "database",
                database_location(database_url),
                partial(probe_database, database_url, "DATABASE_URL"),
            ),
            Dependency("redis", redis_location(redis_url), partial(probe_redis, redis_url)),
        ],
        first_delay=interval,
        max_delay=min(MAX_BACKOFF_SECONDS, interval * MAX_BACKOFF_INTERVALS),
    )
    noise = _RoutineNoise()
    for name in ("apscheduler.scheduler", "apscheduler.executors.default"):
        logging.getLogger(name).addFilter(noise)

    scheduler = BlockingScheduler(timezone=UTC)
    for job in poller.jobs:
        scheduler.add_job(
            outages.guard(job),
            "interval",
            seconds=interval,
            id=getattr(job, "__name__", repr(job)),
            next_run_time=datetime.now(UTC),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(interval * 5)),
        )

    stopping = threading.Event()

    signals = StopSignals()

    def _stop(signum: int, frame: FrameType | None) -> None:
        # APScheduler's blocking loop can only be stopped from here. A second
        # signal interrupts the first one's shutdown, holding the locks it
        # would take again: it only counts (see _internal/stop_signals.py).
        repeated = signals.first is not None
        signals.handle(signum, frame)
        if repeated:
            return
        logger.info("received %s; stopping", signal.Signals(signum).name)
        stopping.set()
        # Not running yet when the signal came as it was starting (a loaded
        # machine): it stops as soon as it has started, not as "a bug".
        with contextlib.suppress(SchedulerNotRunningError):
            scheduler.shutdown(wait=False)

    def _stop_if_asked(_event: object) -> None:
        if stopping.is_set():
            with contextlib.suppress(SchedulerNotRunningError):
                scheduler.shutdown(wait=False)

    scheduler.add_listener(_stop_if_asked, EVENT_SCHEDULER_STARTED)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    freeze_startup_heap()
    logger.info("scheduler started: every %.2f s", interval, extra={"action": "scheduler_started"})
    try:
        scheduler.start()
    finally:
        broker.close()
        db.close()
        logger.info("scheduler stopped", extra={"action": "scheduler_stopped"})
