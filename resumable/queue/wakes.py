"""What a claimed session woke up for, and waking it again when it must.

The first step after a wait sees ``ctx.wake``. A due poll check runs here,
before any step: if the check finds nothing, the session suspends again
until its next check (releasing the lease), and no step runs. If it finds
its value (or the wait's deadline passed), the ``resumed`` audit event, which
the scheduler and the receivers write as they wake a session, is committed
with the step it wakes (``resumed_event``), not in a transaction of its own:
a poll's resume costs a claim and a step, as a timer's does. After a session
suspends, a delivery that arrived while it was suspending wakes it at once.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from resumable._internal import serialization
from resumable.agent import Agent
from resumable.broker.messages import enqueue_after_commit
from resumable.errors import LeaseLostError
from resumable.models import wait_ops
from resumable.models.step_queries import ClaimedSession
from resumable.priorities import Priority, Routed
from resumable.queue.event_loop import resolve
from resumable.queue.scope import WorkerScope
from resumable.waits import Wake

logger = logging.getLogger(__name__)


def resolve_wake(scope: WorkerScope, claim: ClaimedSession, agent: Agent) -> Wake | None:
    """The wake the first step sees; a due poll check runs here first."""
    wake = Wake.from_json(claim.wake)
    if wake is not None and wake.kind == "poll_check":
        return _check_poll(scope, claim, agent) or wake
    return wake


def _check_poll(scope: WorkerScope, claim: ClaimedSession, agent: Agent) -> Wake | None:
    """Run a due poll check: the wake for the `then` step, or None after
    suspending again until the next check."""
    wait = claim.wait or {}
    poll = wait["poll"]
    value = resolve(agent.get_check(poll["check"])(poll["args"]), scope.loop)
    now = datetime.now(UTC)
    deadline = _parse_time(wait.get("deadline"))
    wake: Wake | None = None
    if value is not None:
        serialization.dumps(value, f"value of check {poll['check']!r}")
        wake = Wake(kind="poll", topic=poll["check"], payload=value)
    elif deadline is not None and now >= deadline:
        wake = Wake(kind="timeout")
    if wake is not None:
        return wake  # its `resumed` event rides with the step (resumed_event)
    candidates = [_next_check(now, float(poll["every"]), (claim.wake or {}).get("due_at"))]
    candidates += [t for t in (deadline, _parse_time(wait.get("timer_at"))) if t is not None]
    scope.keeper.drop(claim.session_id, claim.epoch)  # suspending again releases it
    with scope.db.connection() as conn:
        suspended = wait_ops.resuspend_after_poll(
            conn, claim.session_id, claim.epoch, wake_at=min(candidates)
        )
    if not suspended:
        raise LeaseLostError("lease lost during a poll check")
    wake_if_delivered(scope, claim.session_id, claim.priority)
    return None


def resumed_event(claim: ClaimedSession, wake: Wake | None) -> dict[str, Any] | None:
    """The audit event of a wake-up found by a poll check here (its value,
    or the wait's deadline), to commit with the step it wakes, at the
    position the session waited at (as the scheduler's and the receivers'
    are); None for a wake-up whose event its waker wrote. A step that
    fails instead commits none: its retry checks again and records it."""
    woken_by_check = (claim.wake or {}).get("kind") == "poll_check"
    if not woken_by_check or wake is None or wake.kind == "poll_check":
        return None
    check = ((claim.wait or {}).get("poll") or {}).get("check")
    return {
        "step": claim.cursor,
        "type": "resumed",
        "payload": {"by": wake.kind, "check": check},
        "seq": claim.step_seq,
    }


def wake_if_delivered(
    scope: WorkerScope, session_id: uuid.UUID, priority: Priority = "normal"
) -> None:
    """After suspending: a delivery that arrived early wakes the session now."""
    with scope.db.connection() as conn:
        woke = wait_ops.wake_from_deliveries(conn, session_id)
    if woke is not None:
        logger.info(
            "woken at once by a %s delivered while suspending",
            woke.kind,
            extra={"action": "early_delivery"},
        )
        enqueue_after_commit(
            scope.broker,
            scope.settings,
            [Routed(session_id, priority)],
            why="woken by an early delivery",
        )


def _next_check(now: datetime, every: float, due_at: object) -> datetime:
    """`every` seconds after the check that just ran fell due, so that checks
    keep their cadence: counted from now, the next one fell due just after the
    scheduler's tick that would have run it and waited a whole interval more
    (every=1 with a 1 s interval checked every 2 s). From now when that time
    has passed already (the scheduler was down, the check ran long)."""
    period = timedelta(seconds=every)
    due = _parse_time(due_at)
    if due is not None and due + period > now:
        return due + period
    return now + period


def _parse_time(value: object) -> datetime | None:
    return datetime.fromisoformat(str(value)) if value else None
