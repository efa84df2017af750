"""A failure for good runs the saga: the completed tool calls are undone, newest first.

A permanent failure, or the last attempt, of a session with compensable
tool calls commits it ``compensating`` (``START_COMPENSATION``, fenced) and
runs the compensations of its completed calls, newest first, each once:
claimed under the lease epoch before it runs (``CLAIM_COMPENSATION``),
recorded when it returns, retried on its own schedule when it fails (the
lease released and a delayed message sent meanwhile; the next claim of the
``compensating`` session goes on here). The lease is renewed like a running
step's. Then the session is dead-lettered (``dead_lettering.py``), saying
whether the saga completed. A compensation that keeps failing, or fails
permanently, stops the saga, and the dead letter says an operator must step
in. A compensation the deployed code no longer has parks the session before
anything is undone (``parking.py``); a worker that stops between two
compensations hands the session back.

It runs on the thread that handles the failure (a worker thread, or a
sync-step thread for a run on the event loop), in the session's log
context; an ``async def`` compensation is awaited on the event loop while
that thread waits for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg

from resumable.agent import Agent
from resumable.broker.messages import enqueue_after_commit
from resumable.models import failure_queries
from resumable.models.failure_queries import PendingCompensation
from resumable.models.status import SagaOutcome
from resumable.queue.dead_lettering import dead_letter
from resumable.queue.event_loop import resolve
from resumable.queue.failing import HeldLease, error_record, log_failed_for_good, not_recorded
from resumable.queue.hand_back import hand_back
from resumable.queue.outcomes import RunOutcome
from resumable.queue.parking import missing, park
from resumable.queue.scope import WorkerScope
from resumable.queue.tool_calls import accepts_idempotency_key
from resumable.retries import RetryPolicy

logger = logging.getLogger(__name__)


def has_compensations(scope: WorkerScope, held: HeldLease) -> bool:
    """Whether the session made calls that a saga would undo."""
    with scope.db.connection() as conn:
        return failure_queries.has_pending_compensations(conn, held.session_id)


def start_saga(
    scope: WorkerScope,
    held: HeldLease,
    agent: Agent,
    record: dict[str, Any],
    step: str | None,
    policy: RetryPolicy,
) -> RunOutcome:
    """Commit the session ``compensating`` with the step's error, then run
    the saga. `held.attempts` counts the attempt that failed for good."""
    with scope.db.connection() as conn:
        started = failure_queries.start_compensation(
            conn, held.session_id, held.epoch, attempts=held.attempts, error=record, step=step
        )
    if not started:
        return not_recorded(step, record)
    log_failed_for_good(step, held.attempts, record)
    return compensate(scope, held, agent, record, policy)


def compensate(
    scope: WorkerScope,
    held: HeldLease,
    agent: Agent,
    error: dict[str, Any],
    policy: RetryPolicy,
) -> RunOutcome:
    """Run what is left of the saga, each compensation at most once per
    epoch; then dead-letter the session. `held.attempts` counts the
    failed attempt that started the saga."""
    with scope.db.connection() as conn:
        pending = failure_queries.pending_compensations(conn, held.session_id)
    lost = next((c for c in pending if not agent.has_compensation(c.compensation)), None)
    if lost is not None:
        # The deployed code lost one: parked for an operator, not given up,
        # and before any undo runs, so the saga is not left half undone
        # by code that cannot finish it.
        divergence = missing("compensation", agent.name, lost.compensation, lost.step)
        return park(scope.settings, scope.db, scope.keeper, held.session_id, held.epoch, divergence)
    for call in pending:
        if scope.shutdown.stopping:
            return hand_back(
                scope, held.session_id, held.epoch, "worker stopping", priority=held.priority
            )
        key = f"{call.idempotency_key}:compensate"
        name = call.compensation
        if not _fenced(scope, failure_queries.claim_compensation, call, held):
            return RunOutcome.LEASE_LOST
        try:
            fn = agent.get_compensation(name)
            kwargs = {"idempotency_key": key} if accepts_idempotency_key(fn) else {}
            resolve(fn(call.request, call.response, **kwargs), scope.loop)
        except Exception as exc:
            return _compensation_failed(scope, held, call, exc, error, policy)
        if not _fenced(scope, failure_queries.compensation_done, call, held):
            return RunOutcome.LEASE_LOST
        logger.info("compensated %s with %s", call.tool, name, extra={"action": "compensated"})
    if not pending and not _compensations_ran(scope, held):
        return dead_letter(scope, held, error, held.attempts, compensation=SagaOutcome.NONE)
    return dead_letter(scope, held, error, held.attempts, compensation=SagaOutcome.COMPLETED)


def _compensations_ran(scope: WorkerScope, held: HeldLease) -> bool:
    with scope.db.connection() as conn:
        return failure_queries.compensations_ran(conn, held.session_id)


def _fenced(
    scope: WorkerScope,
    write: Callable[[psycopg.Connection[Any], str, int], bool],
    call: PendingCompensation,
    held: HeldLease,
) -> bool:
    """Run a fenced write of the call's compensation; False if the epoch moved on."""
    with scope.db.connection() as conn:
        return write(conn, call.idempotency_key, held.epoch)


def _compensation_failed(
    scope: WorkerScope,
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
        scope.keeper.drop(held.session_id, held.epoch)  # released until the next attempt
    with scope.db.connection() as conn:
        recorded = failure_queries.compensation_failed(
            conn, call.idempotency_key, held.epoch, give_up=give_up, error=record, delay=delay
        )
    if not recorded:
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
        enqueue_after_commit(
            scope.broker,
            scope.settings,
            [held.routed],
            why="compensation retry scheduled",
            delay=delay,
        )
        return RunOutcome.COMPENSATING
    logger.error(
        "compensation %s failed %d time(s)%s; saga stopped, manual intervention needed: %s",
        call.compensation,
        attempts,
        "" if policy.is_transient(exc) else " with a permanent error",
        record["message"],
        extra={"action": "compensation_failed", "error_code": record["code"]},
    )
    return dead_letter(
        scope,
        held,
        error,
        held.attempts,
        compensation=SagaOutcome.FAILED,
        compensation_error={
            **record,
            "message": "compensation failed, manual intervention needed: " + record["message"],
        },
    )
