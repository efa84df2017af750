"""What happens when a step fails: retry later, or compensate and dead-letter.

A transient failure with attempts left commits the session as ``retrying``
with the time of its next attempt and releases the worker; a delayed queue
message and the scheduler (if Redis lost that message) bring it back, and it
resumes from its latest checkpoint with its recorded tool calls intact.

A permanent failure, or the last attempt, runs the saga: the compensations
of the session's completed, compensable tool calls, newest first, each once
(claimed under the lease epoch before it runs, recorded, retried on its own
schedule), with the session ``compensating`` meanwhile and its lease renewed
like a running step's. Then the session ends ``failed`` with an open dead
letter. A compensation that keeps failing, or fails permanently, stops the
saga and the dead letter says an operator must step in.

All of it runs on the worker thread that ran the step (a time-out included),
in the session's log context; for a run on the event loop, on one of the
loop's database threads. An ``async def`` compensation is awaited on the
event loop while that thread waits for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import dramatiq
from psycopg.rows import class_row

from resumable._internal import serialization
from resumable._internal.redaction import Redactor
from resumable.agent import Agent
from resumable.broker.messages import enqueue_after_commit
from resumable.coordination import children
from resumable.errors import ResumableError, StepTimeoutError
from resumable.models import failure_queries
from resumable.models.database import Database
from resumable.models.failure_queries import DeadLettered, PendingCompensation
from resumable.models.status import SagaOutcome
from resumable.queue.event_loop import EventLoopThread, resolve
from resumable.queue.lease import LeaseKeeper
from resumable.queue.outcomes import RunOutcome
from resumable.queue.parking import missing, park
from resumable.queue.tool_calls import accepts_idempotency_key
from resumable.retries import DEFAULT_POLICY, RetryPolicy
from resumable.settings import Settings

logger = logging.getLogger(__name__)


def error_record(
    exc: BaseException, step: str | None, secrets: Iterable[str] = ()
) -> dict[str, Any]:
    """The error as stored (audit log, session, dead letter), with any secret
    value the step's state or tool calls held scrubbed from its text."""
    code = exc.code if isinstance(exc, ResumableError | StepTimeoutError) else "step_failed"
    return {
        "code": code,
        "type": serialization.storable_text(type(exc).__name__),
        "message": Redactor.scrub(serialization.exception_text(exc), secrets),
        "step": step,
        "traceback": Redactor.scrub(serialization.traceback_text(exc), secrets),
    }


@dataclass(frozen=True)
class HeldLease:
    """The session a failure belongs to, as this worker holds it."""

    session_id: Any
    epoch: int
    attempts: int  # attempts already made (before the failing one, while it is handled)
    secrets: frozenset[str] | set[str] = frozenset()  # values to scrub from error texts


class FailureHandler:
    """Handles a failed step (or compensation) on the worker thread that ran it."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        broker: dramatiq.Broker,
        keeper: LeaseKeeper,
        stopping: threading.Event,
    ) -> None:
        self.settings = settings
        self.db = db
        self.broker = broker
        self.keeper = keeper
        self.stopping = stopping
        #: The worker's event loop, for async compensations (set by the runner).
        self.loop: EventLoopThread | None = None

    # -- steps ------------------------------------------------------------------------

    def step_failed(
        self, held: HeldLease, agent: Agent | None, exc: BaseException, step: str | None
    ) -> RunOutcome:
        policy = agent.policy(step) if agent is not None else DEFAULT_POLICY
        attempts = held.attempts + 1
        record = error_record(exc, step, held.secrets)
        if policy.should_retry(exc, attempts):
            return self._schedule_retry(held, policy, exc, record, attempts, step)
        # From here on the failing attempt counts as made (dead letter included).
        held = replace(held, attempts=attempts)
        if agent is not None and self._has_compensations(held):
            with self.db.connection() as conn:
                started = conn.execute(
                    failure_queries.START_COMPENSATION,
                    {
                        "id": held.session_id,
                        "epoch": held.epoch,
                        "attempts": attempts,
                        "error": serialization.dumps(record, "error"),
                        "step": step,
                    },
                ).fetchone()
            if started is None:
                return self._not_recorded(step, record)
            _log_failed_for_good(step, attempts, record)
            return self.compensate(held, agent, record, policy)
        outcome = self.fail(
            held, record, attempts, compensation=SagaOutcome.NONE, failed_for_good=True
        )
        if outcome is RunOutcome.LEASE_LOST:
            return self._not_recorded(step, record)
        return outcome

    @staticmethod
    def _not_recorded(step: str | None, record: dict[str, Any]) -> RunOutcome:
        """The session moved on (cancelled, or its lease taken over) while the
        step ran: the failure is not this worker's to record, and no dead
        letter was made, so it is not reported as one."""
        logger.info(
            "step %s failed after this worker lost its lease; the failure is not recorded: %s",
            step,
            record["type"],
            extra={"action": "lease_lost", "error_code": record["code"]},
        )
        return RunOutcome.LEASE_LOST

    def _schedule_retry(
        self,
        held: HeldLease,
        policy: RetryPolicy,
        exc: BaseException,
        record: dict[str, Any],
        attempts: int,
        step: str | None,
    ) -> RunOutcome:
        delay = policy.delay(attempts, exc)
        self.keeper.drop(held.session_id, held.epoch)  # this write gives the lease up
        with self.db.connection() as conn:
            row = conn.execute(
                failure_queries.SCHEDULE_RETRY,
                {
                    "id": held.session_id,
                    "epoch": held.epoch,
                    "attempts": attempts,
                    "error": serialization.dumps(record, "error"),
                    "delay": delay,
                    "step": step,
                },
            ).fetchone()
        if row is None:
            return RunOutcome.LEASE_LOST
        logger.warning(
            "step %s failed (attempt %d of %d), retrying in %.2f s: %s: %s",
            step,
            attempts,
            policy.max_attempts,
            delay,
            record["type"],
            record["message"],
            extra={"action": "retry_scheduled", "error_code": record["code"]},
        )
        self.enqueue_later(held.session_id, delay, why="retry scheduled")
        return RunOutcome.RETRYING

    # -- sagas --------------------------------------------------------------------------

    def _has_compensations(self, held: HeldLease) -> bool:
        with self.db.connection() as conn:
            return (
                conn.execute(
                    failure_queries.PENDING_COMPENSATIONS, {"id": held.session_id}
                ).fetchone()
                is not None
            )

    def compensate(
        self, held: HeldLease, agent: Agent, error: dict[str, Any], policy: RetryPolicy
    ) -> RunOutcome:
        """Run what is left of the saga, each compensation at most once per
        epoch; then dead-letter the session. `held.attempts` counts the
        failed attempt that started the saga."""
        with self.db.connection() as conn:
            pending = (
                conn.cursor(row_factory=class_row(PendingCompensation))
                .execute(failure_queries.PENDING_COMPENSATIONS, {"id": held.session_id})
                .fetchall()
            )
        lost = next((c for c in pending if not agent.has_compensation(c.compensation)), None)
        if lost is not None:
            # The deployed code lost one: parked for an operator, not given up,
            # and before any undo runs, so the saga is not left half undone
            # by code that cannot finish it.
            divergence = missing("compensation", agent.name, lost.compensation, lost.step)
            return park(
                self.settings, self.db, self.keeper, held.session_id, held.epoch, divergence
            )
        for call in pending:
            if self.stopping.is_set():
                return self.hand_back(held, "worker stopping")
            key = f"{call.idempotency_key}:compensate"
            name = call.compensation
            if not self._fenced(failure_queries.CLAIM_COMPENSATION, call, held):
                return RunOutcome.LEASE_LOST
            try:
                fn = agent.get_compensation(name)
                kwargs = {"idempotency_key": key} if accepts_idempotency_key(fn) else {}
                resolve(fn(call.request, call.response, **kwargs), self.loop)
            except Exception as exc:
                return self._compensation_failed(held, call, exc, error, policy)
            if not self._fenced(failure_queries.COMPENSATION_DONE, call, held):
                return RunOutcome.LEASE_LOST
            logger.info("compensated %s with %s", call.tool, name, extra={"action": "compensated"})
        if not pending and not self._compensations_ran(held):
            return self.fail(held, error, held.attempts, compensation=SagaOutcome.NONE)
        return self.fail(held, error, held.attempts, compensation=SagaOutcome.COMPLETED)

    def _compensations_ran(self, held: HeldLease) -> bool:
        with self.db.connection() as conn:
            row = conn.execute(failure_queries.COMPENSATIONS_RAN, {"id": held.session_id})
            return row.fetchone() is not None

    def _fenced(self, statement: str, call: PendingCompensation, held: HeldLease) -> bool:
        with self.db.connection() as conn:
            row = conn.execute(
                statement, {"key": call.idempotency_key, "epoch": held.epoch}
            ).fetchone()
        return row is not None

    def _compensation_failed(
        self,
        held: HeldLease,
        call: PendingCompensation,
        exc: BaseException,
        error: dict[str, Any],
        policy: RetryPolicy,
    ) -> RunOutcome:
        attempts = call.compensation_attempts + 1
        # A permanent failure (PermanentError, a missing compensation) is not
        # worth another attempt, whatever attempts are left.
        give_up = attempts >= policy.compensation_attempts or not policy.is_transient(exc)
        delay = policy.delay(attempts, exc)
        record = error_record(exc, call.step, held.secrets)
        record["compensation"] = call.compensation
        if not give_up:
            self.keeper.drop(held.session_id, held.epoch)  # released until the next attempt
        with self.db.connection() as conn:
            row = conn.execute(
                failure_queries.COMPENSATION_FAILED,
                {
                    "key": call.idempotency_key,
                    "epoch": held.epoch,
                    "give_up": give_up,
                    "error": serialization.dumps(record, "error"),
                    "delay": delay,
                },
            ).fetchone()
        if row is None:
            return RunOutcome.LEASE_LOST
        if not give_up:
            logger.warning(
                "compensation %s failed (attempt %d of %d), retrying in %.2f s: %s",
                call.compensation,
                attempts,
                policy.compensation_attempts,
                delay,
                record["message"],
                extra={"action": "compensation_retry_scheduled"},
            )
            self.enqueue_later(held.session_id, delay, why="compensation retry scheduled")
            return RunOutcome.COMPENSATING
        logger.error(
            "compensation %s failed %d time(s)%s; saga stopped, manual intervention needed: %s",
            call.compensation,
            attempts,
            "" if policy.is_transient(exc) else " with a permanent error",
            record["message"],
            extra={"action": "compensation_failed", "error_code": record["code"]},
        )
        return self.fail(
            held,
            error,
            held.attempts,
            compensation=SagaOutcome.FAILED,
            compensation_error={
                **record,
                "message": "compensation failed, manual intervention needed: " + record["message"],
            },
        )

    # -- the end ------------------------------------------------------------------------

    def fail(
        self,
        held: HeldLease,
        error: dict[str, Any],
        attempts: int,
        *,
        compensation: SagaOutcome,
        compensation_error: dict[str, Any] | None = None,
        failed_for_good: bool = False,
    ) -> RunOutcome:
        """End the session `failed` with an open dead letter (and an alert).
        `failed_for_good`: the failing step's last attempt was this one, logged
        once the dead letter is committed (not before: the write may be fenced)."""
        alert_kind = "compensation_failed" if compensation is SagaOutcome.FAILED else "dead_letter"
        with self.db.connection() as conn:
            row = (
                conn.cursor(row_factory=class_row(DeadLettered))
                .execute(
                    failure_queries.FAIL_SESSION,
                    {
                        "id": held.session_id,
                        "epoch": held.epoch,
                        "error": serialization.dumps(error, "error"),
                        "attempts": attempts,
                        "step": error.get("step"),
                        "code": error.get("code", "step_failed"),
                        "type": error.get("type", "Exception"),
                        "message": error.get("message", ""),
                        "traceback": error.get("traceback"),
                        "compensation": compensation,
                        "compensation_error": serialization.dumps(compensation_error)
                        if compensation_error
                        else None,
                        "alert_kind": alert_kind,
                        "alerts_enabled": bool(self.settings.alert_webhook_url),
                    },
                )
                .fetchone()
            )
        if row is None:
            return RunOutcome.LEASE_LOST
        if failed_for_good:
            _log_failed_for_good(error.get("step"), attempts, error)
        children.session_finished(self.db, self.broker, self.settings, held.session_id)
        logger.error(
            "session dead-lettered (dead letter %s) at step %s: %s: %s",
            row.dead_letter_id,
            error.get("step"),
            error.get("type"),
            error.get("message"),
            extra={
                "action": "dead_lettered",
                "dead_letter_id": row.dead_letter_id,
                "error_code": error.get("code"),
                "compensation": compensation,
            },
        )
        return RunOutcome.FAILED

    def hand_back(self, held: HeldLease, reason: str, *, delay: float = 0.0) -> RunOutcome:
        """Release the lease without a transition and enqueue the session for
        any worker (this one is stopping, or cannot load the agent)."""
        if not self.keeper.release(held.session_id, held.epoch, reason):
            return RunOutcome.LEASE_LOST
        logger.info("%s; session handed back", reason, extra={"action": "handed_back"})
        self.enqueue_later(held.session_id, delay)
        return RunOutcome.HANDED_BACK

    def enqueue_later(self, session_id: Any, delay: float, *, why: str = "handed back") -> None:
        """Send the session's message after `delay` seconds (none at all when
        0: an immediate enqueue also wakes idle consumers)."""
        enqueue_after_commit(self.broker, self.settings, [session_id], why=why, delay=delay)


def _log_failed_for_good(step: str | None, attempts: int, record: dict[str, Any]) -> None:
    logger.error(
        "step %s failed for good after %d attempt(s): %s: %s",
        step,
        attempts,
        record["type"],
        record["message"],
        extra={"action": "step_failed_permanently", "error_code": record["code"]},
    )
