"""A worker process: the session actor on a dramatiq Worker, in-process.

``resumable worker`` builds everything here explicitly (settings, database,
broker, agent registry) instead of relying on dramatiq's global broker, and
stops cleanly on SIGTERM/SIGINT: dramatiq finishes the messages in flight, so
the sessions they run commit their current step and the rest stay pending in
PostgreSQL for any other worker.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from dataclasses import dataclass
from types import FrameType

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from resumable.agent import AgentRegistry
from resumable.models import agent_queries
from resumable.models.database import Database
from resumable.queue.broker import SESSION_ACTOR, build_broker
from resumable.queue.lease import LeaseKeeper
from resumable.queue.runner import SessionRunner
from resumable.settings import Settings

logger = logging.getLogger(__name__)

# dramatiq's TimeLimit injects an exception into a running step; per-step
# limits belong to the retry policy, so the message-level limit is a day.
_MESSAGE_TIME_LIMIT_MS = 24 * 3600 * 1000


@dataclass
class WorkerRuntime:
    """Everything a worker process needs, built once in its entry point."""

    settings: Settings
    db: Database
    broker: RedisBroker
    runner: SessionRunner
    keeper: LeaseKeeper
    actor: dramatiq.Actor[[str], None]

    def close(self) -> None:
        self.keeper.stop()
        self.broker.close()
        self.db.close()


def build_runtime(
    settings: Settings, database_url: str, redis_url: str, registry: AgentRegistry
) -> WorkerRuntime:
    db = Database(database_url, pool_size=settings.db_pool_size)
    broker = build_broker(settings, redis_url)
    keeper = LeaseKeeper(db, settings.lease_seconds)
    runner = SessionRunner(settings, db, broker, registry, keeper)

    def run_session(session_id: str) -> None:
        # The outcome is in PostgreSQL; returning it would make dramatiq warn
        # about results on every message.
        runner.run(session_id)

    actor: dramatiq.Actor[[str], None] = dramatiq.actor(
        broker=broker,
        actor_name=SESSION_ACTOR,
        queue_name=settings.queue_name,
        # Sessions have their own retry policy; a failed message is never retried
        # by dramatiq. A message whose run crashed (e.g. the database dropped) is
        # recovered from PostgreSQL by the reconciler once the lease expires.
        max_retries=0,
        time_limit=_MESSAGE_TIME_LIMIT_MS,
    )(run_session)
    return WorkerRuntime(settings, db, broker, runner, keeper, actor)


def announce_agents(runtime: WorkerRuntime) -> None:
    """Record this worker's agents so the web process can validate agent names."""
    with runtime.db.connection() as conn:
        for agent in runtime.runner.registry:
            conn.execute(
                agent_queries.REGISTER_AGENT,
                {
                    "name": agent.name,
                    "steps": json.dumps(agent.step_names),
                    "checks": json.dumps(agent.check_names),
                },
            )


def run_worker(runtime: WorkerRuntime, stop_event: threading.Event | None = None) -> None:
    """Consume until SIGTERM/SIGINT (or `stop_event`), then shut down cleanly."""
    settings = runtime.settings
    stop = stop_event or threading.Event()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        logger.info("received %s; finishing messages in flight", signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)

    worker = dramatiq.Worker(
        runtime.broker,
        queues={settings.queue_name},
        worker_threads=settings.worker_threads,
        # How long an idle consumer blocks before it looks at its delay queue and
        # shutdown flag; wake-ups themselves arrive at once (see wakeup.py).
        worker_timeout=1000,
    )
    if settings.worker_prefetch:
        worker.queue_prefetch = settings.worker_prefetch
    announce_agents(runtime)
    runtime.keeper.start()
    worker.start()
    logger.info(
        "worker started: %d threads on queue %r",
        settings.worker_threads,
        settings.queue_name,
        extra={"action": "worker_started"},
    )
    try:
        stop.wait()
    finally:
        worker.stop(timeout=int(settings.lease_seconds * 1000))
        runtime.close()
        logger.info("worker stopped", extra={"action": "worker_stopped"})
