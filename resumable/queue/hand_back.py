"""Handing a session back: its lease released, its message sent again at once.

A run hands its session back when the worker stops between two steps (or
between two compensations of a saga, or while it waits for an in-flight
permit of the event loop): no transition of its own, nothing of the session
changed but its lease, so any worker claims it again within a wake-up
rather than after the lease expired (invariant 9). A step that commits as
the worker stops releases its lease in its own commit instead
(``runner.py``).
"""

from __future__ import annotations

import logging
import uuid

from resumable.broker.messages import enqueue_after_commit
from resumable.priorities import Priority, Routed
from resumable.queue.outcomes import RunOutcome
from resumable.queue.scope import WorkerScope

logger = logging.getLogger(__name__)


def hand_back(
    scope: WorkerScope,
    session_id: uuid.UUID,
    epoch: int,
    reason: str,
    *,
    priority: Priority = "normal",
) -> RunOutcome:
    """Release the lease without a transition and enqueue the session for
    any worker (this one is stopping), on its lane."""
    if not scope.keeper.release(session_id, epoch, reason):
        return RunOutcome.LEASE_LOST
    logger.info("%s; session handed back", reason, extra={"action": "handed_back"})
    enqueue_after_commit(
        scope.broker, scope.settings, [Routed(session_id, priority)], why="handed back"
    )
    return RunOutcome.HANDED_BACK
