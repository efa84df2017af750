"""The event-loop driver: runs that reached an ``async def`` step go on as tasks.

A worker thread claims the session and runs its sync steps
(``thread_driver.py``). At the first async step it takes an in-flight permit
(one of ``RESUMABLE_MAX_INFLIGHT``), hands the run here and goes back to the
queue for another message. The task goes on with the same ``Run``: async
steps are awaited on the loop under ``asyncio.timeout``, sync steps met later
are called on the sync-step threads, and every write (a step's commit, a
hand-back) is handed to the loop's database threads (``database_threads.py``).
A step's failure is handled on the sync-step threads instead: it may run the
saga, and an async compensation blocks its thread until the loop has run it;
on a database thread, more sagas than database threads at once would leave
no thread for the writes. When the run ends the task ends it (its lease no
longer renewed, it leaves the runs in flight) and gives the permit back.

Backpressure: a thread with no free permit waits (the session it holds is
already in the lease keeper), so a worker takes no more messages than it can
run; the rest stay in Redis for other workers. A stopping worker's thread
waiting for a permit hands its session back.

PostgreSQL stays the only record. A SIGKILL loses the tasks, not a session:
their leases lapse and the reconciler re-enqueues them, as for a crashed
thread. A SIGTERM sets the stopping flag; each task finishes its step,
commits it with the lease released, and the session is re-enqueued.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from resumable.errors import StepTimeoutError
from resumable.queue.database_threads import on_database_thread
from resumable.queue.decisions import StepRun
from resumable.queue.event_loop import EventLoopThread
from resumable.queue.outcomes import RunOutcome
from resumable.queue.runner import Action, Run
from resumable.queue.shutdown import Shutdown
from resumable.queue.thread_driver import call_step
from resumable.queue.tool_calls import recorded_calls

logger = logging.getLogger(__name__)

# How often a thread waiting for a permit looks at the stopping flag.
_PERMIT_POLL_SECONDS = 0.2


class LoopDriver:
    """The runs of one worker process that are on its event loop."""

    def __init__(self, loop: EventLoopThread, shutdown: Shutdown, limit: int) -> None:
        self._loop = loop
        self._shutdown = shutdown
        self._permits = threading.BoundedSemaphore(limit)

    def take(self, run: Run) -> RunOutcome:
        """On a worker thread: wait for a permit, then let the loop go on with
        the run (which then owns it and ends it)."""
        while not self._permits.acquire(timeout=_PERMIT_POLL_SECONDS):
            if self._shutdown.stopping:
                return run.hand_back()
        try:
            self._loop.submit(self._run(run))
        except BaseException:
            self._permits.release()
            raise
        return RunOutcome.ON_LOOP

    async def _run(self, run: Run) -> None:
        task = asyncio.current_task()
        assert task is not None
        run.moved_to(task)
        outcome: RunOutcome | None = None
        try:
            outcome = await self._steps(run)
            run.end(outcome)
            if run.holds_slot:
                await on_database_thread(run.free_slot)
        except asyncio.CancelledError:
            # The worker is exiting without this run (it outlived the shutdown
            # wait): its lease was released for another worker, or will lapse.
            logger.warning("async run cancelled at step %s", run.cursor)
            raise
        except BaseException:
            # A bug in the run itself, not a step's failure (those are
            # handled), or the database lost under it: the lease lapses and
            # the reconciler brings the session back.
            logger.exception(
                "async run crashed at step %s", run.cursor, extra={"action": "run_crashed"}
            )
        finally:
            if outcome is None:  # crashed or cancelled: ended here
                run.end(outcome)
            self._permits.release()

    async def _steps(self, run: Run) -> RunOutcome:
        """The step loop on the event loop: the run's decisions, each write
        on a database thread."""
        while True:
            action = run.next_action()
            if action is Action.HAND_BACK:
                return await on_database_thread(run.hand_back)
            try:
                if action is Action.AWAIT:
                    step = await self._await_step(run)
                else:
                    step = await self._loop.in_step_thread(call_step, run)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit too: it must not stop the loop
                # Not a database thread: a permanent failure runs the saga (see above).
                return await self._loop.in_step_thread(run.fail, exc)
            outcome = await on_database_thread(run.commit, step)
            if outcome is not None:
                return outcome

    @staticmethod
    async def _await_step(run: Run) -> StepRun:
        """Await an async step under its time limit. Past the limit its task
        is cancelled (at its current ``await``), and the step fails with
        ``StepTimeoutError``, retried per its policy like a sync step's."""
        ctx = run.context()
        seconds = run.time_limit
        limit = asyncio.timeout(seconds)
        observed = run.observed_step()
        tools = recorded_calls(ctx)
        try:
            try:
                async with limit:
                    with observed:
                        outcome = await run.call(ctx)
            except TimeoutError as exc:
                if not limit.expired():
                    raise  # the step's own time-out (an HTTP client's), not its limit
                raise StepTimeoutError(
                    f"the step ran longer than its {seconds:g} s time limit"
                ).with_traceback(exc.__traceback__) from None
            step = run.record(ctx, outcome)
        except asyncio.CancelledError:
            raise  # the worker is exiting: queued records still run on their threads
        except BaseException:
            await tools.flush()  # recorded before the failure is handled
            raise
        # Results not recorded yet go with the commit (or are awaited).
        await tools.settle_for_commit()
        return step
