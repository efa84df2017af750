"""A worker process: the session actor on a dramatiq Worker, in-process.

``resumable worker`` builds everything here explicitly (settings, database,
broker, agent registry) instead of relying on dramatiq's global broker.

Each message is a run of the step loop (``runner.py``), driven on the
dramatiq thread that took it (``thread_driver.py``) and, from its first
``async def`` step on, as a task on the process's event loop
(``loop_driver.py``). Everything those share is built here once and handed
down (``scope.py``).

SIGTERM/SIGINT is a hand-back (invariant 9): the consumers stop fetching and
return what they prefetched to the queue; each thread, and each run on the
event loop, finishes the step it is running, commits it, releases the lease
and re-enqueues the session at once.
The worker waits for those steps up to ``RESUMABLE_MAX_SECONDS_PER_RUN``
(how long one run may take anyway). A thread still blocked after that (a step
stuck in C) is left behind with a line saying so, after its session's lease is
released for another worker; then the process exits 0, saying how many
sessions it handed back.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import dramatiq

from resumable._internal.redaction import Redactor
from resumable._internal.startup_heap import freeze_startup_heap
from resumable._internal.stop_signals import StopSignals
from resumable.agent import AgentRegistry
from resumable.broker.choice import AnyBroker, build_broker
from resumable.broker.lanes import lanes
from resumable.broker.messages import SESSION_ACTOR, enqueue_after_commit
from resumable.broker.rate_limiter import RateLimiter
from resumable.broker.redis import NAMESPACE
from resumable.models import agent_queries, session_queries, step_ops
from resumable.models.database import Database
from resumable.priorities import Routed
from resumable.queue.claims import Claims, WorkerIdentity
from resumable.queue.database_threads import threads_for_pool
from resumable.queue.event_loop import EventLoopThread
from resumable.queue.heartbeat import MAX_TTL_SECONDS, WorkerHeartbeat
from resumable.queue.lane_order import LaneOrder
from resumable.queue.lease import LeaseKeeper
from resumable.queue.loop_driver import LoopDriver
from resumable.queue.rate_turns import RateTurns
from resumable.queue.scope import WorkerScope
from resumable.queue.shutdown import ActiveRun, Shutdown
from resumable.queue.startup_check import (
    announce_versions,
    warn_of_other_code,
    warn_unserved_positions,
)
from resumable.queue.thread_driver import ThreadDriver
from resumable.queue.vitals import Vital, VitalSigns
from resumable.queue.worker_metrics import watch as serve_health_from
from resumable.services.schedules import Schedules
from resumable.settings import Settings

logger = logging.getLogger(__name__)

# Sessions enqueued at start for agents no worker served (the reconciler,
# which now includes this worker's agents, finds any beyond that).
_WAITING_BATCH = 10_000

#: The exit status of a worker that stopped because it could not do its job
#: (a vital thread died or hung, see ``vitals.py``): 70, EX_SOFTWARE.
UNHEALTHY_EXIT_STATUS = 70

# A consumer goes round its loop at least once a worker timeout (1 s), or
# once a Redis call fails (at most its 5 s timeouts, connecting and reading):
# silent for this long, it is stuck.
_CONSUMER_SILENT_AFTER_SECONDS = 30.0


@dataclass
class WorkerRuntime:
    """Everything a worker process needs, built once in its entry point."""

    settings: Settings
    db: Database
    broker: AnyBroker
    registry: AgentRegistry
    identity: WorkerIdentity
    keeper: LeaseKeeper
    #: The stopping flag and the runs in flight.
    shutdown: Shutdown
    loop: EventLoopThread
    heartbeat: WorkerHeartbeat
    actor: dramatiq.Actor[[str], None]

    def close(self) -> None:
        self.keeper.stop()
        self.heartbeat.stop()
        self.broker.close()
        self.db.close()


def build_runtime(
    settings: Settings, database_url: str, redis_url: str, registry: AgentRegistry
) -> WorkerRuntime:
    db = Database(
        database_url,
        pool_size=settings.db_pool_size,
        prepared_statements=settings.db_prepared_statements,
    )
    broker = build_broker(settings, redis_url)
    keeper = LeaseKeeper(db, settings.lease_seconds)
    shutdown = Shutdown()
    loop = EventLoopThread(
        # The database threads share the process's pool with the worker
        # threads, the lease keeper and the heartbeat: sized to what is left.
        db_threads=threads_for_pool(settings.db_pool_size, settings.worker_threads),
        step_threads=settings.worker_threads,
        lag_warning_seconds=settings.loop_lag_warning_seconds,
        describe_task=shutdown.describe_task,
    )
    scope = WorkerScope(
        settings=settings,
        db=db,
        broker=broker,
        registry=registry,
        keeper=keeper,
        shutdown=shutdown,
        loop=loop,
        redactor=Redactor(settings.redact_keys),
        turns=RateTurns(
            RateLimiter(broker.rate_store, NAMESPACE, settings.queue_name),
            stopping=lambda: shutdown.stopping,
        ),
    )
    identity = WorkerIdentity.of(registry)
    threads = ThreadDriver(
        scope,
        Claims(scope, identity),
        to_loop=LoopDriver(loop, shutdown, settings.max_inflight).take,
    )

    def run_session(session_id: str) -> None:
        # The outcome is in PostgreSQL; returning it would make dramatiq warn
        # about results on every message.
        threads.run(session_id)

    actor: dramatiq.Actor[[str], None] = dramatiq.actor(
        broker=broker,
        actor_name=SESSION_ACTOR,
        queue_name=settings.queue_name,
        # No retries and no message time limit: the broker has no middleware
        # (see ``build_broker``). A message whose run crashed (e.g. the database
        # dropped) is recovered from PostgreSQL by the reconciler once the
        # lease expires.
    )(run_session)
    heartbeat = WorkerHeartbeat(
        db,
        identity.worker_id,
        identity.agents,
        ttl=min(settings.lease_seconds, MAX_TTL_SECONDS),
        versions=identity.versions,
        takes_over=identity.takes_over,
        fingerprints=identity.fingerprints,
    )
    return WorkerRuntime(
        settings, db, broker, registry, identity, keeper, shutdown, loop, heartbeat, actor
    )


def announce_agents(runtime: WorkerRuntime) -> list[str]:
    """Record this worker's heartbeat row and its agents (the catalog the web
    process validates names against); return the agents whose sessions
    waited because no live worker served them until now."""
    unserved = runtime.heartbeat.announce()  # before the catalog: it asks what was known
    with runtime.db.connection() as conn:
        for agent in runtime.registry:
            agent_queries.register_agent(
                conn, agent.name, steps=agent.step_names, checks=agent.check_names
            )
    announce_versions(runtime.db, runtime.registry)
    warn_of_other_code(runtime.db, runtime.identity.worker_id, runtime.registry)
    # The schedules its agents define in code (new or changed ones only).
    Schedules(runtime.settings, runtime.db, None).sync_from_code(
        list(runtime.registry), worker=runtime.identity.worker_id
    )
    return unserved


def enqueue_waiting(runtime: WorkerRuntime, agents: list[str]) -> int:
    """Enqueue the claimable sessions of agents no worker served: nobody
    claimed them, and their messages were dropped."""
    if not agents:
        return 0
    identity = runtime.identity
    with runtime.db.connection() as conn:
        waiting = step_ops.claimable_of_agents(
            conn,
            agents,
            versions=json.dumps(identity.versions),
            takes_over=identity.takes_over,
            worker=identity.worker_id,
            limit=_WAITING_BATCH,
        )
        routes = session_queries.routes_of(conn, waiting)
    # One Redis round trip per few hundred (a backlog of thousands is common).
    sent = enqueue_after_commit(
        runtime.broker,
        runtime.settings,
        routes,
        why="sessions that waited for a worker",
    )
    if waiting and sent:
        logger.info(
            "enqueued %d session(s) that waited for a worker loading %s",
            len(waiting),
            ", ".join(agents),
            extra={"action": "enqueued_waiting"},
        )
    return len(waiting)


def watch_vitals(
    runtime: WorkerRuntime, worker: dramatiq.Worker, on_failure: Callable[[str], None]
) -> VitalSigns:
    """Every thread this process cannot work without, watched (``vitals.py``)."""
    vitals = VitalSigns(on_failure)
    for queue_name in list(worker.consumers):
        vitals.watch(
            Vital(
                f"consumer (queue {queue_name!r})",
                lambda name=queue_name: worker.consumers.get(name),  # type: ignore[misc]
                pulse=runtime.broker.pulse(queue_name),
                silent_after=_CONSUMER_SILENT_AFTER_SECONDS,
            )
        )
    for index, thread in enumerate(list(worker.workers)):
        vitals.watch(Vital(f"worker {index}", lambda t=thread: t))  # type: ignore[misc]
    vitals.watch(Vital("lease keeper", lambda: runtime.keeper.thread))
    vitals.watch(Vital("heartbeat", lambda: runtime.heartbeat.thread))
    vitals.watch(Vital("event loop", lambda: runtime.loop.thread))
    return vitals


def run_worker(
    runtime: WorkerRuntime,
    stop_event: threading.Event | None = None,
    ready: Callable[[], None] | None = None,
    slot: str | None = None,
) -> int:
    """Consume until SIGTERM/SIGINT (or `stop_event`), then shut down cleanly;
    the exit status: 0, or ``UNHEALTHY_EXIT_STATUS`` after it stopped because
    a vital thread died (its sessions handed back all the same).

    `ready` is called once consuming (a supervising parent's signal, see
    ``supervisor.py``); `slot` names this process among its parent's children."""
    settings = runtime.settings
    stop = stop_event or threading.Event()
    signals = StopSignals()  # a handler that takes no lock (see _internal/stop_signals.py)
    if threading.current_thread() is threading.main_thread():
        signals.install()

    runtime.broker.declare_lanes(settings.queue_name)
    worker = dramatiq.Worker(
        runtime.broker,
        queues=set(lanes(settings.queue_name)),
        worker_threads=settings.worker_threads,
        # How long an idle consumer blocks before it looks at its delay queue and
        # shutdown flag; wake-ups themselves arrive at once (see broker/redis.py).
        worker_timeout=1000,
    )
    if settings.worker_prefetch:
        worker.queue_prefetch = settings.worker_prefetch
    # Of the messages its lanes' consumers hold, the threads take the earliest
    # sent, less its priority's head start (before the threads exist).
    worker.work_queue = LaneOrder(settings.priority_aging_seconds)
    runtime.broker.worker_threads = settings.worker_threads  # before the consumers start
    unserved = announce_agents(runtime)
    warn_unserved_positions(runtime.db, runtime.registry, runtime.identity.worker_id)
    runtime.heartbeat.start()
    runtime.keeper.start()
    worker.start()

    def unhealthy(problem: str) -> None:
        runtime.heartbeat.report()
        stop.set()

    vitals = watch_vitals(runtime, worker, on_failure=unhealthy)
    runtime.heartbeat.problem = lambda: vitals.problem
    vitals.start()
    serve_health_from(vitals)
    enqueue_waiting(runtime, unserved)
    freeze_startup_heap()
    logger.info(
        "worker started: %s%d threads on queue %r, up to %d async runs in flight",
        "" if slot is None else f"process {slot}, ",
        settings.worker_threads,
        settings.queue_name,
        settings.max_inflight,
        extra={"action": "worker_started"},
    )
    if ready is not None:
        ready()
    try:
        signals.wait(stop)
        if signals.first is not None:
            logger.info(
                "received %s; finishing the steps in flight and handing their sessions back",
                signals.first,
            )
        stop.set()
    finally:
        vitals.stop()
        hand_back_and_stop(runtime, worker)
    return 0 if vitals.healthy else UNHEALTHY_EXIT_STATUS


def hand_back_and_stop(runtime: WorkerRuntime, worker: dramatiq.Worker) -> None:
    """Stop as a hand-back: nothing this process holds waits for a lease to expire."""
    shutdown, keeper = runtime.shutdown, runtime.keeper
    runtime.broker.stop_fetching()
    shutdown.stop()
    returned = _return_unstarted(runtime.broker, worker)

    def still_held(run: ActiveRun) -> bool:
        return keeper.holds(run.session_id, run.epoch)

    _say_what_the_stop_waits_for(
        [run for run in shutdown.runs() if still_held(run)],
        runtime.settings.max_seconds_per_run,
    )
    left = shutdown.wait(still_held, runtime.settings.max_seconds_per_run)
    for run in left:
        _leave_behind(runtime, run, still_held(run))
    # Threads that handed back exit within a worker timeout; blocked ones are left.
    worker.stop(timeout=2000)
    # Async runs still on the loop were released above (or let go on their own).
    runtime.loop.stop()
    runtime.close()
    logger.info(
        "worker stopped: %d session(s) handed back mid-run, %d queued message(s) returned, "
        "%d thread(s) left blocked",
        shutdown.handed_back_count,
        returned,
        len(left),
        extra={"action": "worker_stopped", "handed_back": shutdown.handed_back_count},
    )


# The runs a stop's line names one by one; beyond, only their count.
_RUNS_NAMED = 5


def _say_what_the_stop_waits_for(held: list[ActiveRun], limit: float) -> None:
    """One line before a stop waits on steps in flight: a stop that takes
    seconds (up to RESUMABLE_MAX_SECONDS_PER_RUN) says which sessions and steps
    it is waiting for, rather than looking hung until it ends."""
    if not held:
        return
    now = time.monotonic()
    named = ", ".join(
        f"session {run.session_id} in step {run.step} for {now - run.step_started:.1f} s"
        for run in held[:_RUNS_NAMED]
    )
    more = len(held) - _RUNS_NAMED
    logger.info(
        "stopping: waiting up to %g s for %d step(s) in flight to commit and hand back: %s%s",
        limit,
        len(held),
        named,
        f" and {more} more" if more > 0 else "",
        extra={"action": "worker_stop_waiting", "runs": len(held)},
    )


def _return_unstarted(broker: AnyBroker, worker: dramatiq.Worker) -> int:
    """Return messages dramatiq had queued in memory for this process's threads
    (what ``Worker.stop`` does at its very end, done first so that other
    workers start them now rather than after this one's steps finish)."""
    items = []
    while True:
        try:
            items.append(worker.work_queue.get_nowait())
        except queue.Empty:
            break
    by_queue: dict[str, list[dramatiq.MessageProxy]] = {}
    for item in items:
        by_queue.setdefault(item.message.queue_name, []).append(item.message)
    for queue_name, messages in by_queue.items():
        try:
            broker.requeue(queue_name, messages)
        except Exception:
            logger.warning("could not return %d queued message(s)", len(messages), exc_info=True)
    return len(items)


def _leave_behind(runtime: WorkerRuntime, run: ActiveRun, held: bool) -> None:
    """A thread still in a step at exit: say so, and release what it holds."""
    blocked_for = time.monotonic() - run.step_started
    if held and runtime.keeper.release(run.session_id, run.epoch, "worker stopped"):
        enqueue_after_commit(
            runtime.broker,
            runtime.settings,
            [Routed(run.session_id, run.priority)],
            why="handed back",
        )
        runtime.shutdown.handed_back()
        fate = "its lease is released and the session re-enqueued; the step runs again elsewhere"
    else:
        fate = "the session is no longer this worker's (cancelled or taken over)"
    logger.warning(
        "thread %s is still blocked in step %s of session %s after %.1f s; exiting without it: %s",
        run.thread,
        run.step,
        run.session_id,
        blocked_for,
        fate,
        extra={"action": "thread_left_blocked", "session_id": str(run.session_id)},
    )
