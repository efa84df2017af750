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

import psycopg

from resumable._internal import serialization
from resumable._internal.redaction import Redactor
from resumable.errors import ResumableError, StepTimeoutError
from resumable.priorities import Priority, Routed
from resumable.queue.outcomes import RunOutcome

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeldLease:
    """The session a failure belongs to, as this worker holds it."""

    session_id: Any
    epoch: int
    attempts: int  # attempts already made (before the failing one, while it is handled)
    secrets: frozenset[str] | set[str] = frozenset()  # values to scrub from error texts
    priority: Priority = "normal"  # the lane its messages go on

    @property
    def routed(self) -> Routed:
        """The session, to send on its lane."""
        return Routed(self.session_id, self.priority)


class RecordsUnavailable(BaseException):
    """The database failed under a step's own bookkeeping (a call's claim,
    its result, its failure; a callback's token): not the step's failure,
    and no attempt of it.

    A call whose result could not be recorded may have had its effect, and
    only a replay under the same key finds out (invariant 4): counted as
    the step's failure, the last attempt would run the saga over the
    *recorded* calls and never undo this one. So the run stops without a
    transition, the session goes back to the queue (or its lease lapses,
    if the database is still away), and the replay makes the call again,
    with its key, and records it. A ``BaseException``, so that a step's
    ``except Exception`` around its call does not swallow it.

    Only a lost connection counts (``connection_lost``): an error the
    database would answer again on the replay (a statement timeout, a full
    disk, a value too large) is the step's failure, under its retry policy,
    or a replay would make the call again and again."""


# SQLSTATEs of a session the server ended (admin, crash, cannot connect now).
_ENDED_SESSIONS = frozenset({"57P01", "57P02", "57P03"})


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` is the loss of the database connection (or of the way
    to one: no state at all, as a dropped socket or the pool's timeout)."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _ENDED_SESSIONS


def records_unavailable_in(exc: BaseException) -> RecordsUnavailable | None:
    """`exc` if it is ``RecordsUnavailable``, or the first one inside an
    exception group (an ``asyncio.TaskGroup`` of calls); else None."""
    if isinstance(exc, RecordsUnavailable):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = records_unavailable_in(inner)
            if found is not None:
                return found
    return None


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
