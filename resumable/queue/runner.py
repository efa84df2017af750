"""The step loop, written once: one run of a claimed session, and every decision in it.

A ``Run`` starts from a claim (``claims.py``: the lease, with its fencing
epoch, or why a message is let go). It holds that run's state (the claim,
the agent, the step it is at, the state, the sequence number, the attempts,
the wake, the checkpoint writer, the step count and the budget) and decides
each of its stages:

1. ``begin``: the agent, a saga to go on with, a step or check the deployed
   code no longer has, the wake (a due poll check runs here), the first
   step's stamp;
2. ``next_action``: hand the session back (the worker is stopping), or call
   a sync step, or await an ``async def`` one;
3. ``context``: what the step is handed (its tool calls and callbacks fenced
   by the lease epoch);
4. ``record``: the step's return value validated, its state encoded;
5. ``commit``: the outcome in one fenced statement, then complete, suspend,
   yield, hand back, or go on with the next step;
6. ``fail``: a step that raised is retried, compensated and dead-lettered,
   or parked (its replay diverged), or let go (the lease was lost).

A run does not know which thread it is on. The drivers do: ``thread_driver.py``
calls its sync steps on a worker thread and makes every write there, and
``loop_driver.py`` goes on with a run that reached an ``async def`` step as a
task on the event loop, handing each write to the loop's database threads.
Each method of a run is a plain call that a driver makes in the order above.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from enum import Enum
from typing import Any

import psycopg

from resumable._internal import serialization
from resumable._internal.logs import log_context
from resumable.agent import Agent
from resumable.broker.messages import enqueue_after_commit
from resumable.checkpoints import EventSourced
from resumable.context import StepContext
from resumable.coordination.shared import CoordinationError
from resumable.errors import (
    LeaseLostError,
    NotSerializableError,
    ReplayDivergedError,
    ResumableError,
)
from resumable.models import step_ops
from resumable.models.status import SagaOutcome, SessionStatus
from resumable.models.step_queries import ClaimedSession
from resumable.priorities import Routed
from resumable.queue.checkpoint_writer import CheckpointWriter
from resumable.queue.dead_lettering import dead_letter
from resumable.queue.decisions import StepRun, transition
from resumable.queue.failing import (
    HeldLease,
    RecordsUnavailable,
    error_record,
    not_recorded,
    records_unavailable_in,
)
from resumable.queue.hand_back import hand_back
from resumable.queue.observing import observe_divergence, observe_run, observe_step
from resumable.queue.outcomes import RunOutcome
from resumable.queue.parking import check_code_has, fewer_calls, park
from resumable.queue.rate_turns import rate_wait_in
from resumable.queue.retrying import schedule_retry, wait_for_rate
from resumable.queue.saga import compensate, has_compensations, start_saga
from resumable.queue.scope import WorkerScope
from resumable.queue.step_commit import commit_step
from resumable.queue.step_context import step_context
from resumable.queue.tool_calls import ToolCalls, recorded_calls
from resumable.queue.wakes import resolve_wake, resumed_event, wake_if_delivered
from resumable.retries import DEFAULT_POLICY
from resumable.services import slots
from resumable.waits import Wake

logger = logging.getLogger(__name__)


class Action(Enum):
    """What a run does next, as ``Run.next_action`` says."""

    HAND_BACK = "hand_back"  # the worker is stopping: the session goes back before the step
    CALL = "call"  # a sync step: called on a thread
    AWAIT = "await"  # an ``async def`` step: awaited on the event loop


class Run:
    """One run of one claimed session, from its claim to how it ends."""

    def __init__(self, scope: WorkerScope, claim: ClaimedSession) -> None:
        self._scope = scope
        self._claim = claim
        self._agent: Agent | None = None
        # Where the run stands between two steps (set by `begin`, moved on by `commit`).
        self._cursor: str | None = claim.cursor
        self._state = claim.state
        self._seq = claim.step_seq
        self._attempts = claim.attempts
        self._wake: Wake | None = None
        self._slot_scope: str | None = None
        self._writer: CheckpointWriter | None = None
        self._steps_run = 0
        self._started = time.monotonic()
        self._step_started = 0.0
        #: Audit events that ride with the next step's commit (a poll check's ``resumed``).
        self._events: list[dict[str, Any]] = []
        #: The tool calls of the step in flight (set by `context`).
        self._tools: ToolCalls | None = None
        self._active = scope.shutdown.track(claim.session_id, claim.epoch, claim.priority)
        scope.keeper.hold(claim.session_id, claim.epoch)

    @property
    def cursor(self) -> str | None:
        """The step the run is at."""
        return self._cursor

    @contextlib.contextmanager
    def observed(self) -> Iterator[None]:
        """Around the run: its log context (agent, epoch) and span."""
        claim = self._claim
        with log_context(agent=claim.agent, epoch=claim.epoch), observe_run(self._scope.db, claim):
            yield

    # -- 1. begin -------------------------------------------------------------------------

    def begin(self) -> RunOutcome | None:
        """Everything before the first step; how the run ended already, or
        None to go on with the steps."""
        scope, claim = self._scope, self._claim
        try:
            agent = self._agent = scope.registry.get(claim.agent)
        except ResumableError as exc:  # not loaded here (a claim takes only those that are)
            return self._failed(None, exc, claim.cursor)
        if claim.status is SessionStatus.COMPENSATING:
            error = claim.error or {}
            self._active.at_step(error.get("step"))
            return compensate(scope, self._held(), agent, error, agent.policy(error.get("step")))
        needs_slot = agent.slot_scope(claim.cursor or agent.start_step) is not None
        if needs_slot and claim.concurrency_key is None:
            # Claimed without the concurrency slot its step needs (taken over
            # from an older version, which takes none): back to the queue,
            # for a claim under its limit (``resumable/limits.py``).
            return hand_back(
                scope,
                claim.session_id,
                claim.epoch,
                "its step needs a slot",
                priority=claim.priority,
            )
        try:
            # A renamed step's old name runs the step that has it as an alias.
            cursor = claim.cursor or agent.start_step
            check_code_has(claim, agent, cursor)
            wake = resolve_wake(scope, claim, agent)
        except LeaseLostError:
            return RunOutcome.LEASE_LOST
        except ReplayDivergedError as divergence:
            return self._park(divergence)
        except BaseException as exc:  # a poll check is user code, too
            return self._failed(agent, exc, claim.cursor)
        if wake is not None and wake.kind == "poll_check":
            return RunOutcome.SUSPENDED  # the check found nothing; suspended again
        time_limit = agent.policy(cursor).time_limit
        if not claim.started and (claim.cursor is None or time_limit is not None):
            self._start_step(cursor, time_limit)
        self._writer = CheckpointWriter(
            agent.checkpoints,
            scope.redactor,
            claim.state,
            rebase=claim.history_rebase,
            pending_patch=claim.state_patch,
        )
        self._cursor, self._wake, self._started = cursor, wake, time.monotonic()
        # The concurrency limit this run is under (the claim's slot): a step
        # under another one ends the run first (``_commit``).
        self._slot_scope = agent.slot_scope(cursor)
        resumed = resumed_event(claim, wake)
        if resumed is not None:
            self._events.append(resumed)
        return None

    # -- 2. the next action ---------------------------------------------------------------

    def next_action(self) -> Action:
        agent = self._agent
        assert agent is not None and self._cursor is not None
        if self._scope.shutdown.stopping:
            return Action.HAND_BACK
        self._active.at_step(self._cursor)
        return Action.AWAIT if agent.is_async_step(self._cursor) else Action.CALL

    def hand_back(self) -> RunOutcome:
        """The worker is stopping between two steps: the session goes back."""
        claim = self._claim
        return hand_back(
            self._scope, claim.session_id, claim.epoch, "worker stopping", priority=claim.priority
        )

    # -- 3. the step ----------------------------------------------------------------------

    @property
    def time_limit(self) -> float | None:
        """The limit of the step at the cursor (seconds; None: none)."""
        assert self._agent is not None
        return self._agent.policy(self._cursor).time_limit

    def observed_step(self) -> contextlib.AbstractContextManager[None]:
        """Around the step: its log field, duration and span."""
        assert self._cursor is not None
        return observe_step(self._claim, self._cursor, self._seq + 1, self._attempts, self._wake)

    def context(self) -> StepContext:
        """What the step at the cursor is handed (its tool calls fenced by the
        lease); its time is counted from here."""
        agent, writer, cursor = self._agent, self._writer, self._cursor
        assert agent is not None and writer is not None and cursor is not None
        claim = self._claim
        # A step this run goes on to after committing the one before is run
        # for the first time; so is the run's first when its claim found no
        # records of it.
        fresh = self._seq != claim.step_seq or claim.recorded_calls == 0
        ctx = step_context(
            self._scope, claim, agent, cursor, self._seq + 1, self._state, self._wake, writer,
            fresh=fresh,
        )  # fmt: skip
        self._tools = recorded_calls(ctx)
        self._step_started = time.monotonic()
        return ctx

    def call(self, ctx: StepContext) -> Any:
        """Call the step with `ctx`: what it returned, or, for an ``async def``
        step, the coroutine for the driver to await."""
        assert self._agent is not None and self._cursor is not None
        return self._agent.get_step(self._cursor)(ctx)

    # -- 4. record --------------------------------------------------------------------------

    def record(self, ctx: StepContext, outcome: object) -> StepRun:
        """The step's return value validated and its state encoded, ready to commit."""
        agent, writer = self._agent, self._writer
        assert agent is not None and writer is not None
        decision = agent.interpret(outcome)
        if not isinstance(ctx.state, dict):
            raise NotSerializableError("state must be a JSON object (a dict)")
        events = ctx.events if isinstance(agent.checkpoints, EventSourced) else None
        return StepRun(
            name=ctx.step,
            ctx=ctx,
            tools=recorded_calls(ctx),
            decision=decision,
            wake=ctx.wake,
            state=writer.record(ctx.seq, ctx.state, events, finishing=decision.done),
            # Most steps return no result (they go on): skip the walk and encoder.
            result="null"
            if decision.result is None
            else serialization.dumps(decision.result, "result"),
            ms=round((time.monotonic() - self._step_started) * 1000, 3),
        )

    # -- 5. commit --------------------------------------------------------------------------

    def commit(self, step: StepRun) -> RunOutcome | None:
        """Commit a step's outcome; how the run ends, or None to go on with
        the next step (the run moved on to it)."""
        try:
            return self._commit(step)
        finally:
            if step.tools.unwritten:  # the commit did not take them: recorded on their own
                try:
                    step.tools.record_riding()
                except RecordsUnavailable as exc:  # a replay makes them again, under their keys
                    logger.warning("tool call results not recorded: %s", exc)

    def _commit(self, step: StepRun) -> RunOutcome | None:
        scope, claim, agent, writer = self._scope, self._claim, self._agent, self._writer
        assert agent is not None and writer is not None
        settings, cursor = scope.settings, self._cursor
        self._steps_run += 1
        steps_run = self._steps_run
        out_of_budget = (
            steps_run >= settings.max_steps_per_run
            or time.monotonic() - self._started >= settings.max_seconds_per_run
        )
        stopping = scope.shutdown.stopping
        next_step = step.decision.next_step
        slot_changes = next_step is not None and agent.slot_scope(next_step) != self._slot_scope
        status, events = transition(
            step, out_of_budget, stopping, steps_run, writer, slot_changes=slot_changes
        )
        if self._events:  # committed with this step, or with nothing if it is not
            events, self._events = [*self._events, *events], []
        if status is not SessionStatus.RUNNING:
            scope.keeper.drop(claim.session_id, claim.epoch)  # this commit releases it
        next_limit = None
        if status is SessionStatus.RUNNING and step.decision.next_step is not None:
            next_limit = agent.policy(step.decision.next_step).time_limit
        try:
            if self._seq == claim.step_seq and step.tools.made < claim.recorded_calls:
                # A replay that made fewer calls than recorded: nothing committed.
                fewer = fewer_calls(
                    scope.db, claim.session_id, step.ctx.seq, step.name, step.tools.made
                )
                if fewer is not None:
                    unrecorded = self._record_riding(step)
                    return unrecorded if unrecorded is not None else self._park(fewer)
            committed = commit_step(
                scope.db, settings.lease_seconds, claim, step, status, events, next_limit
            )
        except CoordinationError as exc:  # rolled back: nothing of the step committed
            # Recorded before the saga, which may compensate them.
            unrecorded = self._record_riding(step)
            return unrecorded if unrecorded is not None else self._failed(agent, exc, cursor)
        if committed is None:
            logger.warning(
                "step %s not committed: another worker owns the session",
                cursor,
                extra={"action": "lease_lost"},
            )
            return RunOutcome.LEASE_LOST
        if step.ctx.coordination is not None:  # grants the commit made possible
            step.ctx.coordination.after_commit(scope.broker, settings, status, step.decision.wait)
        decision = step.decision
        if decision.done:
            logger.info("session completed after step %s", cursor, extra={"action": "completed"})
            return RunOutcome.COMPLETED
        if decision.wait is not None:
            wake_if_delivered(scope, claim.session_id, claim.priority)
            return RunOutcome.SUSPENDED
        if status is SessionStatus.PENDING:
            enqueue_after_commit(
                scope.broker,
                settings,
                [Routed(claim.session_id, claim.priority)],
                why="step committed, run yielded",
            )
            if stopping:
                logger.info(
                    "worker stopping: step %s committed, session handed back",
                    cursor,
                    extra={"action": "handed_back"},
                )
                return RunOutcome.HANDED_BACK
            return RunOutcome.YIELDED
        assert decision.next_step is not None
        self._cursor, self._state = decision.next_step, step.ctx.state
        self._seq, self._wake, self._attempts = committed, None, 0
        return None

    # -- 6. fail ----------------------------------------------------------------------------

    def fail(self, exc: BaseException) -> RunOutcome:
        """What a step that raised leaves the session in."""
        cursor = self._cursor
        if isinstance(exc, LeaseLostError):
            logger.info(
                "lease lost during step %s (%s); stopping",
                cursor,
                exc,
                extra={"action": "lease_lost"},
            )
            return RunOutcome.LEASE_LOST
        wait = rate_wait_in(exc)  # not a failure: the step runs again at its turn
        unavailable = records_unavailable_in(exc) if wait is None else None
        if unavailable is not None:  # ours, not the step's: replayed, no attempt
            return self._records_unavailable(unavailable)
        if self._tools is not None:
            # Answers and deferred results the step made that no write took
            # along: a replay returns them rather than making the calls again,
            # and the saga sees the effects (written before the park, the rate
            # wait, the retry or the saga).
            try:
                self._tools.write_answers()
            except RecordsUnavailable as lost:
                return self._records_unavailable(lost)
            except psycopg.Error as error:  # as if the worker died before writing them
                logger.warning("answers of calls without side effects not recorded: %s", error)
        if isinstance(exc, ReplayDivergedError):
            # The step's outcome is not committed; nothing more is called.
            return self._park(exc)
        if wait is not None:
            return wait_for_rate(self._scope, self._held(), wait, cursor)
        return self._failed(self._agent, exc, cursor)

    def _failed(self, agent: Agent | None, exc: BaseException, step: str | None) -> RunOutcome:
        """A failure of the run's step: retried while its policy says so;
        else, its attempts counted, the saga (when there are calls to undo)
        or straight to a dead letter."""
        held = self._held()
        policy = agent.policy(step) if agent is not None else DEFAULT_POLICY
        attempts = held.attempts + 1
        record = error_record(exc, step, held.secrets)
        if policy.should_retry(exc, attempts):
            return schedule_retry(self._scope, held, policy, exc, record, attempts, step)
        # From here on the failing attempt counts as made (dead letter included).
        held = HeldLease(held.session_id, held.epoch, attempts, held.secrets, held.priority)
        if agent is not None and has_compensations(self._scope, held):
            return start_saga(self._scope, held, agent, record, step, policy)
        outcome = dead_letter(
            self._scope, held, record, attempts, compensation=SagaOutcome.NONE, failed_for_good=True
        )
        if outcome is RunOutcome.LEASE_LOST:
            return not_recorded(step, record)
        return outcome

    def _records_unavailable(self, exc: RecordsUnavailable) -> RunOutcome:
        """The database failed under a call's records: nothing of the step is
        committed and no attempt is counted; the session goes back to the
        queue for a replay that makes the call again under its key (or, with
        the database still away, its lease lapses and the reconciler does)."""
        claim = self._claim
        step_error = exc.__context__  # the step's own failure it replaced, if any
        logger.warning(
            "step %s stopped: %s%s; the session is replayed, its calls under the same keys",
            self._cursor,
            exc,
            "" if step_error is None else f" (while it failed with {step_error!r})",
            extra={"action": "records_unavailable"},
        )
        try:
            return hand_back(
                self._scope,
                claim.session_id,
                claim.epoch,
                "records unavailable",
                priority=claim.priority,
            )
        except psycopg.OperationalError:
            self._scope.keeper.drop(claim.session_id, claim.epoch)  # its lease lapses
            return RunOutcome.LEASE_LOST

    def _record_riding(self, step: StepRun) -> RunOutcome | None:
        """Record the results the commit did not take; how the run ends if
        the database is lost meanwhile (None: recorded)."""
        try:
            step.tools.record_riding()
        except RecordsUnavailable as exc:
            return self._records_unavailable(exc)
        return None

    def _held(self) -> HeldLease:
        secrets: set[str] | frozenset[str] = frozenset()
        if self._writer is not None:
            secrets = self._writer.secrets
        claim = self._claim
        return HeldLease(claim.session_id, claim.epoch, self._attempts, secrets, claim.priority)

    def _park(self, divergence: ReplayDivergedError) -> RunOutcome:
        scope, claim = self._scope, self._claim
        observe_divergence(claim.agent)
        return park(
            scope.settings, scope.db, scope.keeper, claim.session_id, claim.epoch, divergence
        )

    def _start_step(self, cursor: str, time_limit: float | None) -> None:
        """Record the run's first step and its deadline, for `hung_sessions`."""
        claim = self._claim
        with self._scope.db.connection() as conn:
            step_ops.start_step(
                conn, claim.session_id, claim.epoch, cursor=cursor, time_limit=time_limit
            )

    # -- the end --------------------------------------------------------------------------

    def moved_to(self, task: asyncio.Task[Any]) -> None:
        """The run goes on as `task` on the event loop (named so by the
        registry of runs in flight and the loop's watchdog)."""
        self._active.moved_to(task)

    @property
    def holds_slot(self) -> bool:
        """Whether the run took a concurrency slot (``resumable/limits.py``)."""
        return self._claim.concurrency_key is not None

    def free_slot(self) -> None:
        """The run is over and held a slot: wake its key's oldest waiters
        (a database write: on a worker thread or a database thread). Best
        effort: a wake this misses, the scheduler's next pass makes."""
        scope, claim = self._scope, self._claim
        key, limit = claim.concurrency_key, claim.concurrency_limit
        if key is None or limit is None:
            return
        try:
            slots.wake_waiters(scope.settings, scope.db, scope.broker, key, limit)
        except Exception as exc:  # the database went away: the scheduler's pass wakes them
            logger.warning(
                "could not wake the sessions waiting for a slot of %s (%s); the scheduler will",
                key,
                exc,
                extra={"action": "slot_wake_failed"},
            )

    def end(self, outcome: RunOutcome | None) -> None:
        """The run is over (None: it crashed), on whichever thread or task
        ran it last: its lease is no longer renewed, it leaves the runs in
        flight, and a hand-back as the worker stops is counted."""
        scope = self._scope
        if outcome is RunOutcome.HANDED_BACK and scope.shutdown.stopping:
            scope.shutdown.handed_back()
        scope.keeper.drop(self._claim.session_id, self._claim.epoch)
        scope.shutdown.finish(self._active)
