"""Runs that reached an ``async def`` step go on as tasks on the event loop.

A worker thread claims the session as for any run (the lease, the epoch, the
wake, a due poll check) and runs its sync steps. At the first async step it
takes an in-flight permit (one of ``RESUMABLE_MAX_INFLIGHT``), hands the run
to the worker's event loop and goes back to the queue for another message.
The task goes on from the same position: async steps are awaited on the
loop, sync steps run on the sync-step threads, and every database write (a
step's commit, a retry, a hand-back) is the same fenced statement the
threads use, handed to the loop's database threads
(``database_threads.py``). A step's failure is handled on the sync-step
threads instead: it may run the saga's compensations, and an async
compensation blocks its thread until the loop has run it; on a database
thread, more sagas than database threads at once would leave no thread for
the writes (and, were those threads the loop's default executor, for the
compensations' own ``asyncio.to_thread``). When the run ends the task drops
the lease from the keeper and gives the permit back.

Backpressure: a thread with no free permit waits (renewing nothing new: the
session it holds is already in the keeper), so a worker takes no more
messages than it can run; the rest stay in Redis for other workers.

PostgreSQL stays the only record. A SIGKILL loses the tasks, not a session:
their leases lapse and the reconciler re-enqueues them, as for a crashed
thread. A SIGTERM sets the stopping flag; each task finishes its step,
commits it with the lease released, and the session is re-enqueued.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from resumable.agent import Agent
from resumable.errors import StepTimeoutError
from resumable.models.step_queries import ClaimedSession
from resumable.queue.database_threads import on_database_thread
from resumable.queue.event_loop import EventLoopThread
from resumable.queue.observing import observe_step
from resumable.queue.outcomes import RunOutcome
from resumable.queue.positions import RunPosition
from resumable.queue.shutdown import ActiveRun
from resumable.queue.tool_calls import recorded_calls

if TYPE_CHECKING:
    from resumable.queue.runner import SessionRunner, StepRun

logger = logging.getLogger(__name__)

# How often a thread waiting for a permit looks at the stopping flag.
_PERMIT_POLL_SECONDS = 0.2


def database_threads(pool_size: int, worker_threads: int) -> int:
    """Threads the event loop hands its writes to: the pool's connections
    the worker threads, lease keeper and heartbeat leave (at least 2)."""
    return max(2, pool_size - worker_threads - 2)


class AsyncRuns:
    """The runs of one worker process that are on its event loop."""

    def __init__(self, runner: SessionRunner) -> None:
        settings = runner.settings
        self.runner = runner
        self.limit = settings.max_inflight
        self._permits = threading.BoundedSemaphore(self.limit)
        self._tasks: dict[asyncio.Task[Any], ActiveRun] = {}
        self.events = EventLoopThread(
            # The database threads share the process's pool with the worker
            # threads, the lease keeper and the heartbeat: sized to what is left,
            # so that a write never waits for a connection.
            db_threads=database_threads(settings.db_pool_size, settings.worker_threads),
            step_threads=settings.worker_threads,
            lag_warning_seconds=settings.loop_lag_warning_seconds,
            describe_task=self._describe,
        )

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def hand_off(
        self, claim: ClaimedSession, agent: Agent, position: RunPosition, active: ActiveRun
    ) -> RunOutcome:
        """On a worker thread: wait for a permit, then let the loop go on with
        the run (which now owns the lease and the tracking of `active`)."""
        shutdown = self.runner.shutdown
        while not self._permits.acquire(timeout=_PERMIT_POLL_SECONDS):
            if shutdown.stopping.is_set():
                return self.runner.failures.hand_back(position.held(), "worker stopping")
        active.detached = True
        try:
            self.events.submit(self._run(claim, agent, position, active))
        except BaseException:
            active.detached = False
            self._permits.release()
            raise
        return RunOutcome.ON_LOOP

    async def _run(
        self, claim: ClaimedSession, agent: Agent, position: RunPosition, active: ActiveRun
    ) -> None:
        runner = self.runner
        task = asyncio.current_task()
        assert task is not None
        self._tasks[task] = active
        active.thread = f"event loop ({task.get_name()})"
        try:
            outcome = await self._steps(claim, agent, position, active)
            if outcome is RunOutcome.HANDED_BACK and runner.shutdown.stopping.is_set():
                runner.shutdown.handed_back()
        except asyncio.CancelledError:
            # The worker is exiting without this run (it outlived the shutdown
            # wait): its lease was released for another worker, or will lapse.
            logger.warning("async run cancelled at step %s", position.cursor)
            raise
        except Exception:
            # A bug in the runner itself, not a step's failure (those are
            # handled): the lease lapses and the reconciler brings the session back.
            logger.exception(
                "async run crashed at step %s", position.cursor, extra={"action": "run_crashed"}
            )
        finally:
            runner.keeper.drop(claim.session_id, claim.epoch)
            runner.shutdown.finish(active)
            del self._tasks[task]
            self._permits.release()

    async def _steps(
        self, claim: ClaimedSession, agent: Agent, position: RunPosition, active: ActiveRun
    ) -> RunOutcome:
        """The runner's step loop, on the event loop: the same decisions and
        the same fenced writes, each write on a database thread."""
        runner = self.runner
        while True:
            if runner.shutdown.stopping.is_set():
                return await on_database_thread(
                    runner.failures.hand_back, position.held(), "worker stopping"
                )
            active.at_step(position.cursor)
            try:
                if agent.is_async_step(position.cursor):
                    step = await self._execute(claim, agent, position)
                else:
                    step = await self.events.in_step_thread(
                        runner.execute_limited, claim, agent, position
                    )
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit too: it must not stop the loop
                # Not a database thread: a permanent failure runs the saga (see above).
                return await self.events.in_step_thread(
                    runner.step_error, claim, agent, position, exc
                )
            outcome = await on_database_thread(runner.after_step, claim, agent, step, position)
            if outcome is not None:
                return outcome

    async def _execute(self, claim: ClaimedSession, agent: Agent, position: RunPosition) -> StepRun:
        """Await an async step under its time limit. Past the limit its task
        is cancelled (at its current ``await``), and the step fails with
        ``StepTimeoutError``, retried per its policy like a sync step's."""
        runner = self.runner
        ctx = runner.step_context(
            claim,
            agent,
            position.cursor,
            position.seq,
            position.state,
            position.wake,
            position.writer,
        )
        seconds = agent.policy(position.cursor).time_limit
        started = time.monotonic()
        limit = asyncio.timeout(seconds)
        observed = observe_step(
            claim, position.cursor, position.seq + 1, position.attempts, position.wake
        )
        tools = recorded_calls(ctx)
        try:
            try:
                async with limit:
                    with observed:
                        outcome = await agent.get_step(position.cursor)(ctx)  # type: ignore[misc]
            except TimeoutError as exc:
                if not limit.expired():
                    raise  # the step's own time-out (an HTTP client's), not its limit
                raise StepTimeoutError(
                    f"the step ran longer than its {seconds:g} s time limit"
                ).with_traceback(exc.__traceback__) from None
            step = runner.step_run(agent, ctx, outcome, started, position.writer)
        except asyncio.CancelledError:
            raise  # the worker is exiting: queued records still run on their threads
        except BaseException:
            await tools.flush()  # recorded before the failure is handled
            raise
        # Results not recorded yet go with the commit (or are awaited).
        await tools.settle_for_commit()
        return step

    def _describe(self, task: asyncio.Task[Any]) -> str | None:
        """Which session and step a task is running (for the loop watchdog)."""
        run = self._tasks.get(task)
        if run is None:
            return None
        return f"step {run.step!r} of session {run.session_id}"
