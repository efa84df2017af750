"""How one run of a session ended, as the run and its failure paths report it.

Where a run ends by leaving the session in a status, the outcome is that
status's value; the others say why the worker let go without a transition of
its own (another worker owns the session, the message was a duplicate, the
run used its budget or the worker is stopping).
"""

from __future__ import annotations

from enum import StrEnum

from resumable.models.status import SessionStatus


class RunOutcome(StrEnum):
    """Returned by ``ThreadDriver.run`` and a ``Run``'s stages (for tests and logs)."""

    NOT_CLAIMED = "not_claimed"  # a duplicate message, or the session is not runnable
    WAITING_FOR_SLOT = "waiting_for_slot"  # its concurrency key has no free slot: parked
    LEASE_LOST = "lease_lost"  # another worker (or an operator) moved the epoch on
    YIELDED = "yielded"  # budget used or not loadable here: re-enqueued for any worker
    HANDED_BACK = "handed_back"  # the worker is stopping: lease released, re-enqueued
    SUSPENDED = SessionStatus.SUSPENDED.value  # waiting for a callback, signal, timer or poll
    RETRYING = SessionStatus.RETRYING.value  # a transient failure; next attempt scheduled
    RATE_LIMITED = "rate_limited"  # a call's turn is far off: retrying then, no attempt counted
    COMPENSATING = SessionStatus.COMPENSATING.value  # a compensation will be tried again
    COMPLETED = SessionStatus.COMPLETED.value  # finished with a result
    FAILED = SessionStatus.FAILED.value  # dead-lettered
    BLOCKED = SessionStatus.BLOCKED.value  # replay diverged: parked for an operator
    ON_LOOP = "on_loop"  # at an async step: the run goes on as a task on the event loop
