"""The thread driver: a message's run, on the dramatiq worker thread that took it.

The thread claims the session, then drives its ``Run`` (``runner.py``): it
calls each sync step on itself under the step's time limit, and makes every
write (the commit, a retry, the saga, a hand-back) on itself too. At an
``async def`` step it hands the run to the event-loop driver
(``loop_driver.py``) and goes back for another message.

A time limit is enforced as dramatiq's is (``time_limits.py``): past it,
``StepTimeoutError`` is raised in this thread, and the failure is handled
here, in the session's log context.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import nullcontext

from resumable._internal.logs import session_context
from resumable.errors import StepTimeoutError
from resumable.models.database import Database
from resumable.queue.claims import Claims
from resumable.queue.decisions import StepRun
from resumable.queue.outcomes import RunOutcome
from resumable.queue.runner import Action, Run
from resumable.queue.scope import WorkerScope
from resumable.queue.time_limits import TimeLimit


def call_step(run: Run) -> StepRun:
    """Call the run's sync step on this thread, under its time limit."""
    limit = TimeLimit(run.time_limit)
    try:
        with limit, run.observed_step():
            ctx = run.context()
            return run.record(ctx, run.call(ctx))
    except StepTimeoutError as exc:
        # Raised into this thread by the time limit: handled by the caller,
        # on the thread where the step ran and its session's log context is set.
        raise StepTimeoutError(limit.message).with_traceback(exc.__traceback__) from None


class ThreadDriver:
    """Runs sessions on the worker threads of one process (one call per message)."""

    def __init__(
        self,
        scope: WorkerScope,
        claims: Claims,
        to_loop: Callable[[Run], RunOutcome],
    ) -> None:
        self._scope = scope
        self._db: Database = scope.db
        self._claims = claims
        self._to_loop = to_loop
        settings = scope.settings
        # A run keeps one connection (``Database.pinned``) only when the pool has
        # one for every worker thread besides the lease keeper's and the
        # heartbeat's; a smaller pool is shared statement by statement.
        self._pin = settings.db_pool_size >= settings.worker_threads + 2

    def run(self, session_id: uuid.UUID | str) -> RunOutcome:
        """Run the session until it finishes, waits, loses its lease, uses its
        budget or the worker stops (or until it goes on on the event loop)."""
        session_id = uuid.UUID(str(session_id))
        # One connection for the run's statements, when the pool has enough.
        with self._db.pinned() if self._pin else nullcontext(), session_context(session_id):
            claim = self._claims.claim(session_id)
            if isinstance(claim, RunOutcome):
                return claim
            run = Run(self._scope, claim)
            outcome: RunOutcome | None = None
            try:
                with run.observed():
                    outcome = self._drive(run)
                return outcome
            finally:
                if outcome is not RunOutcome.ON_LOOP:  # else its task ends it
                    run.end(outcome)
                    if run.holds_slot:
                        run.free_slot()

    def _drive(self, run: Run) -> RunOutcome:
        """Steps one after the other, each committed before the next starts."""
        outcome = run.begin()
        while outcome is None:
            action = run.next_action()
            if action is Action.HAND_BACK:
                return run.hand_back()
            if action is Action.AWAIT:
                return self._to_loop(run)
            try:
                step = call_step(run)
            except BaseException as exc:  # a step's SystemExit is its failure, too
                return run.fail(exc)
            outcome = run.commit(step)
        return outcome
