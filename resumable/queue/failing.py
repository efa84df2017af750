"""A failing run: what it holds, and its error as every record of it stores it.

Where a failure goes is the run's decision (``runner.py``): a retry
(``retrying.py``), the saga (``saga.py``), a dead letter
(``dead_lettering.py``), or, when the worker stops mid-saga, a hand-back
(``hand_back.py``). Each of those writes one fenced statement and takes what
this module defines: the lease the failure belongs to, and the error as
stored in the audit log, on the session and in the dead letter.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from resumable._internal import serialization
from resumable._internal.redaction import Redactor
from resumable.errors import ResumableError, StepTimeoutError
from resumable.queue.outcomes import RunOutcome

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeldLease:
    """The session a failure belongs to, as this worker holds it."""

    session_id: Any
    epoch: int
    attempts: int  # attempts already made (before the failing one, while it is handled)
    secrets: frozenset[str] | set[str] = frozenset()  # values to scrub from error texts


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


def not_recorded(step: str | None, record: dict[str, Any]) -> RunOutcome:
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


def log_failed_for_good(step: str | None, attempts: int, record: dict[str, Any]) -> None:
    logger.error(
        "step %s failed for good after %d attempt(s): %s: %s",
        step,
        attempts,
        record["type"],
        record["message"],
        extra={"action": "step_failed_permanently", "error_code": record["code"]},
    )
