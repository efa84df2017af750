"""A transient failure with attempts left: the session retries later.

The failing step's outcome is not committed. Instead one fenced statement
(``SCHEDULE_RETRY``) records the error and the attempt, sets the session
``retrying`` with ``wake_at`` (when the next attempt is due), bumps the epoch
and releases the lease; then a delayed message is sent. If Redis loses that
message, the scheduler's ``wake_due_retries`` sends it again. The next
attempt resumes from the latest checkpoint with its recorded tool calls
intact.
"""

from __future__ import annotations

import logging
from typing import Any

from resumable.broker.messages import enqueue_after_commit
from resumable.models import failure_queries
from resumable.queue.failing import HeldLease
from resumable.queue.outcomes import RunOutcome
from resumable.queue.rate_turns import WaitForRate
from resumable.queue.scope import WorkerScope
from resumable.retries import RetryPolicy

logger = logging.getLogger(__name__)


def schedule_retry(
    scope: WorkerScope,
    held: HeldLease,
    policy: RetryPolicy,
    exc: BaseException,
    record: dict[str, Any],
    attempts: int,
    step: str | None,
) -> RunOutcome:
    """Commit the session ``retrying`` after its `attempts`-th failed attempt
    and send its message for the next one."""
    delay = policy.delay(attempts, exc)
    if not _retrying(
        scope, held, attempts, record, delay, step, "retry_scheduled", "retry scheduled"
    ):
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
    return RunOutcome.RETRYING


def wait_for_rate(
    scope: WorkerScope, held: HeldLease, wait: WaitForRate, step: str | None
) -> RunOutcome:
    """A call's turn under a rate limit is further off than it waits in
    place: the session lets its worker go until then, as a retry that
    counts no attempt (``rate_turns.py``), and says why where an operator
    looks (its error, code ``rate_limited``, and a ``rate_limited`` event)."""
    delay = max(wait.seconds, 0.001)
    record = {
        "code": "rate_limited",
        "type": "WaitForRate",
        "message": f"waiting for a turn of rate limit {wait.limit!r} ({wait.why})",
        "step": step,
        "rate_limit": wait.limit,
    }
    if not _retrying(
        scope, held, held.attempts, record, delay, step, "rate_limited", "rate limit turn"
    ):
        return RunOutcome.LEASE_LOST
    logger.info(
        "step %s waits %.2f s for a turn of rate limit %r",
        step,
        delay,
        wait.limit,
        extra={"action": "rate_limited"},
    )
    return RunOutcome.RATE_LIMITED


def _retrying(
    scope: WorkerScope,
    held: HeldLease,
    attempts: int,
    record: dict[str, Any],
    delay: float,
    step: str | None,
    event: str,
    why: str,
) -> bool:
    """Commit the session ``retrying`` in `delay` seconds (fenced; the write
    gives the lease up, audited as `event`) and send its delayed message;
    False if this epoch no longer held it."""
    scope.keeper.drop(held.session_id, held.epoch)
    with scope.db.connection() as conn:
        retry_at = failure_queries.schedule_retry(
            conn,
            held.session_id,
            held.epoch,
            attempts=attempts,
            error=record,
            delay=delay,
            step=step,
            event=event,
        )
    if retry_at is None:
        return False
    enqueue_after_commit(scope.broker, scope.settings, [held.routed], why=why, delay=delay)
    return True
