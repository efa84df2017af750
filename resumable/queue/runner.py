"""The step loop: claim a session's lease, run its steps, commit each outcome.

One message means "run this session for a while". The runner takes the lease
(bumping the fencing epoch), then loops: run the step with no transaction
open, validate what it returned, and commit state, cursor, status, checkpoint
and audit events in one epoch-checked statement. It stops when the session
completes or fails, when the epoch check says another worker took over,
after a budget of steps or seconds (it re-enqueues the session so one long
session cannot starve the others), or when the worker is stopping (the step
in flight commits and releases the lease in the same statement, and the
session is re-enqueued at once: see ``shutdown.py``).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import socket
import threading
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import dramatiq
from psycopg.rows import class_row, tuple_row

from resumable._internal import serialization
from resumable._internal.logs import agent_logger, log_context, session_context
from resumable._internal.redaction import Redactor
from resumable.agent import Agent, AgentRegistry, Complete, Next, version_label
from resumable.checkpoints import EventSourced
from resumable.context import StepContext
from resumable.coordination.shared import CoordinationError
from resumable.coordination.step import StepCoordination
from resumable.errors import (
    InvalidStepResultError,
    LeaseLostError,
    NotSerializableError,
    ReplayDivergedError,
    ResumableError,
    StepTimeoutError,
)
from resumable.models import step_queries
from resumable.models.database import Database
from resumable.models.status import SessionStatus
from resumable.models.step_queries import ClaimableElsewhere, ClaimedSession
from resumable.queue.async_runs import AsyncRuns
from resumable.queue.callbacks import CallbackFactory
from resumable.queue.checkpoint_writer import CheckpointWriter, StepState
from resumable.queue.failures import FailureHandler, HeldLease
from resumable.queue.lease import LeaseKeeper
from resumable.queue.observing import observe_divergence, observe_run, observe_step
from resumable.queue.outcomes import RunOutcome
from resumable.queue.parking import fewer_calls, missing, park
from resumable.queue.positions import RunPosition
from resumable.queue.shutdown import ActiveRun, Shutdown
from resumable.queue.takeover import take_over
from resumable.queue.time_limits import TimeLimit
from resumable.queue.tool_calls import ToolCalls, recorded_calls
from resumable.queue.wakes import Wakes
from resumable.settings import Settings
from resumable.waits import Wait, Wake

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepRun:
    """A step that ran and returned something valid, ready to commit."""

    name: str
    ctx: StepContext
    tools: ToolCalls
    decision: Decision
    wake: Wake | None
    state: StepState
    result: str
    ms: float


@dataclass(frozen=True)
class Decision:
    """A step's return value, validated: where to go next and how."""

    next_step: str | None
    result: Any = None
    done: bool = False
    wait: dict[str, Any] | None = None


class SessionRunner:
    """Runs sessions for one worker process; thread-safe (one call per message)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        broker: dramatiq.Broker,
        registry: AgentRegistry,
        keeper: LeaseKeeper,
    ) -> None:
        self.settings = settings
        self.db = db
        self.broker = broker
        self.registry = registry
        self.keeper = keeper
        self.shutdown = Shutdown()
        self.failures = FailureHandler(settings, db, broker, keeper, self.shutdown.stopping)
        self.wakes = Wakes(settings, db, broker, keeper)
        self.redactor = Redactor(settings.redact_keys)
        #: This process, as the `workers` table and its lease owners name it.
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.agents = sorted(agent.name for agent in registry)
        #: The version of each agent served here, and the older ones it migrates.
        self.versions = {agent.name: agent.version for agent in registry}
        self.takes_over = sorted(
            f"{agent.name}@{old}" for agent in registry for old in agent.takes_over
        )
        self._versions_json = json.dumps(self.versions, sort_keys=True)
        #: Each agent's first step and its time limit, for the claim to stamp.
        self._starts_json = json.dumps(
            {
                agent.name: {
                    "step": agent.start_step,
                    "limit": agent.policy(agent.start_step).time_limit,
                }
                for agent in registry
            },
            sort_keys=True,
        )
        # A run keeps one connection (``Database.pinned``) only when the pool has
        # one for every worker thread besides the lease keeper's and the
        # heartbeat's; a smaller pool is shared statement by statement.
        self._pin = settings.db_pool_size >= settings.worker_threads + 2
        #: Where runs at an ``async def`` step go on (the event loop, started on first use).
        self.async_runs = AsyncRuns(self)
        self.failures.loop = self.wakes.loop = self.async_runs.events

    def _owner(self) -> str:
        return f"{self.worker_id}:{threading.get_ident()}"

    def claim(self, session_id: uuid.UUID) -> ClaimedSession | None:
        # Prepared at its first execution on a connection, as COMMIT_STEP is:
        # psycopg sends the first five unprepared, each parsed and planned anew
        # (a new connection's 2nd to 6th claims: 0.93-1.28 ms, prepared
        # 0.70-0.95, once on a generic plan 0.33; `benchmarks/claims.py`), and
        # every connection of a pool that grows, is recycled or starts after a
        # deploy pays that.
        with self.db.connection() as conn:
            return (
                conn.cursor(row_factory=class_row(ClaimedSession))
                .execute(
                    step_queries.CLAIM_LEASE,
                    {
                        "id": session_id,
                        "owner": self._owner(),
                        "versions": self._versions_json,
                        "starts": self._starts_json,
                        "lease_seconds": self.settings.lease_seconds,
                    },
                    prepare=True,
                )
                .fetchone()
            )

    def run(self, session_id: uuid.UUID | str) -> RunOutcome:
        """Run the session until it finishes, waits, loses its lease, uses its
        budget or the worker stops."""
        if not self._pin:
            return self._run(uuid.UUID(str(session_id)))
        with self.db.pinned():  # one connection for the run's statements
            return self._run(uuid.UUID(str(session_id)))

    def _run(self, session_id: uuid.UUID) -> RunOutcome:
        with session_context(session_id):
            if self.shutdown.stopping.is_set():
                # Taken off the queue as the worker stops: straight back, unclaimed.
                self.failures.enqueue_later(session_id, 0.0, why="returned unclaimed (stopping)")
                return RunOutcome.NOT_CLAIMED
            claim = self.claim(session_id)
            if claim is None:
                taken = self._not_claimed(session_id)
                if not isinstance(taken, ClaimedSession):
                    return taken
                claim = taken
            self.keeper.hold(session_id, claim.epoch)
            outcome: RunOutcome | None = None
            try:
                with (
                    log_context(agent=claim.agent, epoch=claim.epoch),
                    observe_run(self.db, claim),
                    self.shutdown.tracking(session_id, claim.epoch) as active,
                ):
                    outcome = self._loop(claim, active)
                if outcome is RunOutcome.HANDED_BACK and self.shutdown.stopping.is_set():
                    self.shutdown.handed_back()
                return outcome
            finally:
                if outcome is not RunOutcome.ON_LOOP:  # else the loop task holds it
                    self.keeper.drop(session_id, claim.epoch)

    def _not_claimed(self, session_id: uuid.UUID) -> RunOutcome | ClaimedSession:
        """A message this worker cannot simply claim: a duplicate, a session
        of an agent or version it does not serve (passed on when a live
        worker serves it; left to wait, untouched, when none does: a worker
        that serves it enqueues it when it starts), or one of an older
        version this worker migrates and no live worker serves (taken over:
        the claim it returns)."""
        with self.db.connection() as conn:
            row = (
                conn.cursor(row_factory=class_row(ClaimableElsewhere))
                .execute(
                    step_queries.CLAIMABLE_ELSEWHERE,
                    {
                        "id": session_id,
                        "versions": self._versions_json,
                        "takes_over": self.takes_over,
                    },
                )
                .fetchone()
            )
        if row is None:
            # Finished, owned by a live worker, or unknown: a duplicate message.
            logger.debug("session not claimable; message ignored", extra={"action": "skip"})
            return RunOutcome.NOT_CLAIMED
        label = version_label(row.agent, row.version)
        if row.take_over:
            return take_over(
                self.settings, self.db, self.registry, session_id, self._owner(), self.takes_over
            )
        if row.served:
            logger.debug(
                "%s is not served here; message passed on",
                label,
                extra={"action": "agent_not_loaded"},
            )
            self.failures.enqueue_later(session_id, 1.0, why="passed on to a worker serving it")
            return RunOutcome.YIELDED
        if row.agent in self.versions:
            logger.info(
                "no live worker serves %s (this one runs %s); the session waits for one",
                label,
                version_label(row.agent, self.versions[row.agent]),
                extra={"action": "version_not_served"},
            )
        else:
            logger.info(
                "no live worker loads agent %r; the session waits for one",
                row.agent,
                extra={"action": "agent_not_served"},
            )
        return RunOutcome.NOT_CLAIMED

    def _loop(self, claim: ClaimedSession, active: ActiveRun) -> RunOutcome:
        try:
            agent = self.registry.get(claim.agent)
        except ResumableError as exc:  # not loaded here (a claim takes only those that are)
            return self.failures.step_failed(_held(claim), None, exc, claim.cursor)
        if claim.status is SessionStatus.COMPENSATING:
            error = claim.error or {}
            policy = agent.policy(error.get("step"))
            active.at_step(error.get("step"))
            return self.failures.compensate(_held(claim), agent, error, policy)
        try:
            # A renamed step's old name runs the step that has it as an alias.
            cursor = claim.cursor or agent.start_step
            self._check_code_has(claim, agent, cursor)
            wake = self.wakes.resolve(claim, agent)
        except LeaseLostError:
            return RunOutcome.LEASE_LOST
        except ReplayDivergedError as divergence:
            return self._park(claim, divergence)
        except BaseException as exc:  # a poll check is user code, too
            return self.failures.step_failed(_held(claim), agent, exc, claim.cursor)
        if wake is not None and wake.kind == "poll_check":
            return RunOutcome.SUSPENDED  # the check found nothing; suspended again
        time_limit = agent.policy(cursor).time_limit
        if not claim.started and (claim.cursor is None or time_limit is not None):
            self._start_step(claim, cursor, time_limit)
        return self._steps(claim, agent, cursor, wake, active)

    def _steps(
        self,
        claim: ClaimedSession,
        agent: Agent,
        cursor: str,
        wake: Wake | None,
        active: ActiveRun,
    ) -> RunOutcome:
        """Run steps one after the other, each committed before the next starts.
        At an ``async def`` step the run goes on as a task on the event loop."""
        writer = CheckpointWriter(
            agent.checkpoints,
            self.redactor,
            claim.state,
            rebase=claim.history_rebase,
            pending_patch=claim.state_patch,
        )
        position = RunPosition(
            claim.session_id, claim.epoch, cursor, claim.state, claim.step_seq,
            claim.attempts, wake, writer,
        )  # fmt: skip
        resumed = self.wakes.resumed_event(claim, wake)
        if resumed is not None:
            position.events.append(resumed)
        while True:
            if self.shutdown.stopping.is_set():
                return self.failures.hand_back(position.held(), "worker stopping")
            if agent.is_async_step(position.cursor):
                return self.async_runs.hand_off(claim, agent, position, active)
            active.at_step(position.cursor)
            try:
                step = self.execute_limited(claim, agent, position)
            except BaseException as exc:  # a step's SystemExit is its failure, too
                return self.step_error(claim, agent, position, exc)
            outcome = self.after_step(claim, agent, step, position)
            if outcome is not None:
                return outcome

    def execute_limited(
        self, claim: ClaimedSession, agent: Agent, position: RunPosition
    ) -> StepRun:
        """Run a sync step on this thread under its time limit."""
        limit = TimeLimit(agent.policy(position.cursor).time_limit)
        observed = observe_step(
            claim, position.cursor, position.seq + 1, position.attempts, position.wake
        )
        try:
            with limit, observed:
                return self._execute(
                    claim,
                    agent,
                    position.cursor,
                    position.seq,
                    position.state,
                    position.wake,
                    position.writer,
                )
        except StepTimeoutError as exc:
            # Raised into this thread by the time limit: handled by the caller,
            # on the thread where the step ran and its session's log context is set.
            raise StepTimeoutError(limit.message).with_traceback(exc.__traceback__) from None

    def step_error(
        self, claim: ClaimedSession, agent: Agent, position: RunPosition, exc: BaseException
    ) -> RunOutcome:
        """What a step that raised leaves the session in."""
        cursor = position.cursor
        if isinstance(exc, LeaseLostError):
            logger.info(
                "lease lost during step %s (%s); stopping",
                cursor,
                exc,
                extra={"action": "lease_lost"},
            )
            return RunOutcome.LEASE_LOST
        if isinstance(exc, ReplayDivergedError):
            # The step's outcome is not committed; nothing more is called.
            return self._park(claim, exc)
        return self.failures.step_failed(position.held(), agent, exc, cursor)

    def after_step(
        self, claim: ClaimedSession, agent: Agent, step: StepRun, position: RunPosition
    ) -> RunOutcome | None:
        """Commit a step's outcome; how the run ends, or None to go on with the
        next step (`position` moved on to it)."""
        try:
            return self._after_step(claim, agent, step, position)
        finally:
            if step.tools.riding:  # the commit did not take them: recorded on their own
                step.tools.record_riding()

    def _after_step(
        self, claim: ClaimedSession, agent: Agent, step: StepRun, position: RunPosition
    ) -> RunOutcome | None:
        cursor, writer = position.cursor, position.writer
        position.steps_run += 1
        steps_run = position.steps_run
        out_of_budget = (
            steps_run >= self.settings.max_steps_per_run
            or time.monotonic() - position.started >= self.settings.max_seconds_per_run
        )
        stopping = self.shutdown.stopping.is_set()
        status, events = self._transition(step, out_of_budget, stopping, steps_run, writer)
        if position.events:  # committed with this step, or with nothing if it is not
            events, position.events = [*position.events, *events], []
        if status is not SessionStatus.RUNNING:
            self.keeper.drop(claim.session_id, claim.epoch)  # this commit releases it
        next_limit = None
        if status is SessionStatus.RUNNING and step.decision.next_step is not None:
            next_limit = agent.policy(step.decision.next_step).time_limit
        try:
            if position.seq == claim.step_seq and step.tools.made < claim.recorded_calls:
                # A replay that made fewer calls than recorded: nothing committed.
                fewer = fewer_calls(
                    self.db, claim.session_id, step.ctx.seq, step.name, step.tools.made
                )
                if fewer is not None:
                    step.tools.record_riding()
                    return self._park(claim, fewer)
            committed = self._commit(claim, step, status, events, next_limit)
        except CoordinationError as exc:  # rolled back: nothing of the step committed
            step.tools.record_riding()  # before the saga, which may compensate them
            return self.failures.step_failed(position.held(), agent, exc, cursor)
        if committed is None:
            logger.warning(
                "step %s not committed: another worker owns the session",
                cursor,
                extra={"action": "lease_lost"},
            )
            return RunOutcome.LEASE_LOST
        if step.ctx.coordination is not None:  # grants the commit made possible
            step.ctx.coordination.after_commit(
                self.broker, self.settings, status, step.decision.wait
            )
        decision = step.decision
        if decision.done:
            logger.info("session completed after step %s", cursor, extra={"action": "completed"})
            return RunOutcome.COMPLETED
        if decision.wait is not None:
            self.wakes.wake_if_delivered(claim.session_id)
            return RunOutcome.SUSPENDED
        if status is SessionStatus.PENDING:
            self.failures.enqueue_later(claim.session_id, 0.0, why="step committed, run yielded")
            if stopping:
                logger.info(
                    "worker stopping: step %s committed, session handed back",
                    cursor,
                    extra={"action": "handed_back"},
                )
                return RunOutcome.HANDED_BACK
            return RunOutcome.YIELDED
        assert decision.next_step is not None
        position.cursor, position.state = decision.next_step, step.ctx.state
        position.seq, position.wake, position.attempts = committed, None, 0
        return None

    @staticmethod
    def _check_code_has(claim: ClaimedSession, agent: Agent, cursor: str) -> None:
        """Raise a divergence if the session waits at a step, or on a poll
        check, that the deployed code no longer has (never fail it for that)."""
        if not agent.has_step(cursor):
            raise missing("step", agent.name, cursor, cursor)
        wake = claim.wake or {}
        poll = (claim.wait or {}).get("poll") or {}
        check = poll.get("check")
        if wake.get("kind") == "poll_check" and check and check not in agent.check_names:
            raise missing("check", agent.name, str(check), cursor)

    def _park(self, claim: ClaimedSession, divergence: ReplayDivergedError) -> RunOutcome:
        observe_divergence(claim.agent)
        return park(self.settings, self.db, self.keeper, claim.session_id, claim.epoch, divergence)

    def _start_step(self, claim: ClaimedSession, cursor: str, time_limit: float | None) -> None:
        """Record the run's first step and its deadline, for `hung_sessions`."""
        with self.db.connection() as conn:
            conn.execute(
                step_queries.START_STEP,
                {
                    "id": claim.session_id,
                    "epoch": claim.epoch,
                    "cursor": cursor,
                    "time_limit": time_limit,
                },
            )

    def _execute(
        self,
        claim: ClaimedSession,
        agent: Agent,
        cursor: str,
        seq: int,
        state: dict[str, Any],
        wake: Wake | None,
        writer: CheckpointWriter,
    ) -> StepRun:
        """Run one step with no transaction open; validate and encode its outcome."""
        ctx = self.step_context(claim, agent, cursor, seq, state, wake, writer)
        step_started = time.monotonic()
        outcome = agent.get_step(cursor)(ctx)
        return self.step_run(agent, ctx, outcome, step_started, writer)

    def step_context(
        self,
        claim: ClaimedSession,
        agent: Agent,
        cursor: str,
        seq: int,
        state: dict[str, Any],
        wake: Wake | None,
        writer: CheckpointWriter,
    ) -> StepContext:
        """What the step at `cursor` is handed (its tool calls fenced by the lease)."""
        tools = ToolCalls(
            self.db,
            claim.session_id,
            claim.epoch,
            seq + 1,
            cursor,
            writer.redact,
            lambda text: Redactor.scrub(text, writer.secrets),
        )
        ctx = StepContext(
            session_id=claim.session_id,
            agent=agent.name,
            step=cursor,
            seq=seq + 1,
            input=claim.input,
            state=state,
            tools=tools,
            has_compensation=agent.has_compensation,
            callbacks=CallbackFactory(
                self.db, claim.session_id, claim.epoch, seq + 1, self.settings.public_url
            ),
            wake=wake,
            logger=agent_logger(agent.name),
            reducer=agent.checkpoints.reducer
            if isinstance(agent.checkpoints, EventSourced)
            else None,
            version=claim.started_version,
            patches=agent.patches,
            coordination=StepCoordination(
                self.db,
                claim.session_id,
                claim.epoch,
                cursor,
                seq + 1,
                idle_timeout=self.settings.lease_seconds,
                coordinated=claim.coordinated,
            ),
            is_async=agent.is_async_step(cursor),
        )
        return ctx

    def step_run(
        self,
        agent: Agent,
        ctx: StepContext,
        outcome: object,
        step_started: float,
        writer: CheckpointWriter,
    ) -> StepRun:
        """A step's return value validated and its state encoded, ready to commit."""
        cursor, seq, wake, tools = ctx.step, ctx.seq - 1, ctx.wake, recorded_calls(ctx)
        decision = self._interpret(agent, outcome)
        if not isinstance(ctx.state, dict):
            raise NotSerializableError("state must be a JSON object (a dict)")
        events = ctx.events if isinstance(agent.checkpoints, EventSourced) else None
        return StepRun(
            name=cursor,
            ctx=ctx,
            tools=tools,
            decision=decision,
            wake=wake,
            state=writer.record(seq + 1, ctx.state, events, finishing=decision.done),
            # Most steps return no result (they go on): skip the walk and encoder.
            result="null"
            if decision.result is None
            else serialization.dumps(decision.result, "result"),
            ms=round((time.monotonic() - step_started) * 1000, 3),
        )

    @staticmethod
    def _transition(
        step: StepRun,
        out_of_budget: bool,
        stopping: bool,
        steps_run: int,
        writer: CheckpointWriter,
    ) -> tuple[SessionStatus, list[dict[str, Any]]]:
        """The status a step leaves the session in, and its audit events."""
        decision = step.decision
        payload: dict[str, Any] = {
            "next": decision.next_step,
            "ms": step.ms,
            "tool_calls": step.tools.executed,
            "tool_calls_replayed": step.tools.replayed,
        }
        if step.wake is not None:
            payload["woken_by"] = step.wake.kind
        events: list[dict[str, Any]] = [
            {"step": step.name, "type": "step_completed", "payload": payload}
        ]
        if decision.done:
            events.append({"step": step.name, "type": "session_completed", "payload": {}})
            return SessionStatus.COMPLETED, events
        if decision.wait is not None:
            events.append(
                {
                    "step": decision.next_step,
                    "type": "suspended",
                    "payload": writer.redact(decision.wait),
                }
            )
            return SessionStatus.SUSPENDED, events
        if stopping:
            # The commit releases the lease: the worker is stopping (a hand-back).
            payload = {"reason": "worker stopping"}
            events.append(
                {"step": decision.next_step, "type": "lease_released", "payload": payload}
            )
            return SessionStatus.PENDING, events
        if out_of_budget:
            events.append(
                {"step": decision.next_step, "type": "run_yielded", "payload": {"steps": steps_run}}
            )
            return SessionStatus.PENDING, events
        return SessionStatus.RUNNING, events

    @staticmethod
    def _interpret(agent: Agent, outcome: object) -> Decision:
        """What a step's return value asks for."""
        if inspect.isawaitable(outcome):
            if inspect.iscoroutine(outcome):
                outcome.close()  # never awaited: closed, so Python does not warn about it
            raise InvalidStepResultError(
                "a step returned a coroutine (awaitable) instead of its next step: "
                "declare the step `async def` if it awaits, or return the value itself"
            )
        if isinstance(outcome, Complete):
            return Decision(next_step=None, result=outcome.result, done=True)
        if isinstance(outcome, str):
            outcome = Next(outcome)
        if isinstance(outcome, Next):
            agent.get_step(outcome.step)  # raises UnknownStepError
            return Decision(next_step=outcome.step)
        if isinstance(outcome, Wait):
            agent.get_step(outcome.then)
            return Decision(next_step=outcome.then, wait=outcome.spec())
        raise InvalidStepResultError(
            "a step must return a step name, Next(...), Complete(...) or a wait, "
            f"got {type(outcome).__name__}"
        )

    def _commit(
        self,
        claim: ClaimedSession,
        step: StepRun,
        status: SessionStatus,
        events: list[dict[str, Any]],
        next_time_limit: float | None,
    ) -> int | None:
        """Commit a step's outcome; the new sequence number, or None if fenced out."""
        wait = step.decision.wait
        history = step.state.history
        coordination = step.ctx.coordination
        assert coordination is not None
        # Results of async tool calls still to record ride with the commit.
        records = step.tools.riding_params()
        statement = step_queries.COMMIT_STEP_WITH_RECORDS if records else step_queries.COMMIT_STEP
        params = {
            "id": claim.session_id,
            "epoch": claim.epoch,
            "expected_seq": step.ctx.seq - 1,
            "state": step.state.full,
            "state_patch": step.state.patch,
            "cursor": step.decision.next_step,
            "status": status,
            "result": step.result,
            "release": status is not SessionStatus.RUNNING,
            "wait": serialization.dumps(wait, "wait") if wait else None,
            "wake_at": wait.get("wake_at") if wait else None,
            "delivery_id": step.wake.delivery_id if step.wake else None,
            "after_wake": step.wake is not None,
            "lease_seconds": self.settings.lease_seconds,
            "next_time_limit": next_time_limit,
            "step": step.name,
            # Built here from validated parts: encoded without a second walk.
            "events": json.dumps(events, ensure_ascii=False, separators=(",", ":")),
            "kind": history.kind,
            # NULL: the checkpoint takes the live state (nothing was redacted).
            "history_state": None if history.state == step.state.full else history.state,
            "patch": history.patch,
            "step_events": history.events,
            **records,
        }
        writes = coordination.writes(wait)  # mostly not: one autocommitted statement
        with self.db.connection() as conn, conn.transaction() if writes else nullcontext():
            committed = (
                conn.cursor(row_factory=tuple_row)
                .execute(statement, params, prepare=True)
                .fetchone()
            )
            if writes and committed is not None:
                coordination.write(conn, committed[0], wait)  # in the same transaction
        # Committed with the step (or fenced out with it). Not before: a
        # coordination write that fails rolls the records back too, and the
        # caller then records them on their own, before the saga.
        step.tools.riding = []
        return None if committed is None else int(committed[0])


def _held(claim: ClaimedSession) -> HeldLease:
    return HeldLease(claim.session_id, claim.epoch, claim.attempts)
