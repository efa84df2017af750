"""``resumable scheduler``: an APScheduler 3 BackgroundScheduler running the
poller's jobs every interval, while the main thread waits for a stop signal.

The signal handler only records the signal (``StopSignals``); the main
thread then says so and shuts the scheduler down. A handler that logged or
shut APScheduler down itself ran in the middle of whatever the main thread
was doing: inside a write to stderr, its own log line raised "reentrant
call" and the process exited 1 instead of 0 (seen in test_dev under load).

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
import threading
from datetime import UTC, datetime
from functools import partial

from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.background import BackgroundScheduler

from resumable._internal.reachability import (
    PROBE_TIMEOUT,
    database_location,
    probe_database,
)
from resumable._internal.startup_heap import freeze_startup_heap
from resumable._internal.stop_signals import StopSignals
from resumable.agent import AgentRegistry
from resumable.broker.choice import broker_probe, build_broker
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
    db = Database(database_url, pool_size=2, prepared_statements=settings.db_prepared_statements)
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
            Dependency(
                "redis",
                *broker_probe(settings, redis_url)[1:],
                label="RabbitMQ" if settings.broker_url else "redis",
            ),
        ],
        first_delay=interval,
        max_delay=min(MAX_BACKOFF_SECONDS, interval * MAX_BACKOFF_INTERVALS),
    )
    noise = _RoutineNoise()
    for name in ("apscheduler.scheduler", "apscheduler.executors.default"):
        logging.getLogger(name).addFilter(noise)

    scheduler = BackgroundScheduler(timezone=UTC)
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

    signals = StopSignals()
    signals.install()
    freeze_startup_heap()
    try:
        if signals.first is None:  # a signal during start-up: not started at all
            scheduler.start()
            logger.info(
                "scheduler started: every %.2f s", interval, extra={"action": "scheduler_started"}
            )
        signals.wait(threading.Event())  # until SIGTERM or SIGINT
        logger.info("received %s; stopping", signals.first)
    finally:
        # Jobs in flight finish on their threads; none starts after this.
        with contextlib.suppress(SchedulerNotRunningError):
            scheduler.shutdown(wait=False)
        broker.close()
        db.close()
        logger.info("scheduler stopped", extra={"action": "scheduler_stopped"})
