"""The end of a failed session: ``failed``, with an open dead letter.

One fenced statement (``FAIL_SESSION``) commits the session ``failed``, its
open dead letter (the step, the error, the attempts and how its saga ended)
and, when an alert webhook is configured, the alert, together. Then a parent
that waits on this session is told (``coordination/children.py``). An
operator inspects, retries or discards the dead letter
(``resumable/services/dead_letters.py``).
"""

from __future__ import annotations

import logging
from typing import Any

from resumable.coordination import children
from resumable.models import failure_queries
from resumable.models.status import SagaOutcome
from resumable.queue.failing import HeldLease, log_failed_for_good
from resumable.queue.outcomes import RunOutcome
from resumable.queue.scope import WorkerScope

logger = logging.getLogger(__name__)


def dead_letter(
    scope: WorkerScope,
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
    with scope.db.connection() as conn:
        row = failure_queries.fail_session(
            conn,
            held.session_id,
            held.epoch,
            error=error,
            attempts=attempts,
            compensation=compensation,
            compensation_error=compensation_error,
            alert_kind=alert_kind,
            alerts_enabled=bool(scope.settings.alert_webhook_url),
        )
    if row is None:
        return RunOutcome.LEASE_LOST
    if failed_for_good:
        log_failed_for_good(error.get("step"), attempts, error)
    children.session_finished(scope.db, scope.broker, scope.settings, held.session_id)
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
