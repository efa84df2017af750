"""A step's outcome, committed in one fenced statement (invariant 2).

``COMMIT_STEP`` (``models/step_queries.py``) updates the session (state,
cursor, status, result, ``step_seq + 1``, the wait and ``wake_at``, the lease
renewed or released), inserts the checkpoint and the audit events, marks the
delivery that woke the step consumed and closes the wait's other callbacks,
in one statement on an autocommit connection, ``WHERE lease_epoch = :epoch
AND status = 'running' AND step_seq = :expected``: no row back, another
worker owns the session (or the step was committed already) and nothing was
written. Results of async tool calls that no database thread recorded yet
ride with it (``COMMIT_STEP_WITH_RECORDS``), and so do the answers of calls
without side effects made since the step's last write. A step that used shared
documents or locks gets a transaction instead: the same statement first,
then its coordination writes (``coordination/step.py``), then ``COMMIT``.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any

from resumable._internal import serialization
from resumable.models import step_ops
from resumable.models.database import Database
from resumable.models.status import SessionStatus
from resumable.models.step_queries import ClaimedSession
from resumable.queue.decisions import StepRun


def commit_step(
    db: Database,
    lease_seconds: float,
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
    records, record_keys = step.tools.riding_records()
    writes = coordination.writes(wait)  # mostly not: one autocommitted statement
    with db.connection() as conn, conn.transaction() if writes else nullcontext():
        committed = step_ops.commit_step(
            conn,
            claim.session_id,
            claim.epoch,
            expected_seq=step.ctx.seq - 1,
            state=step.state.full,
            state_patch=step.state.patch,
            cursor=step.decision.next_step,
            status=status,
            result=step.result,
            release=status is not SessionStatus.RUNNING,
            wait=serialization.dumps(wait, "wait") if wait else None,
            wake_at=wait.get("wake_at") if wait else None,
            delivery_id=step.wake.delivery_id if step.wake else None,
            after_wake=step.wake is not None,
            lease_seconds=lease_seconds,
            next_time_limit=next_time_limit,
            step=step.name,
            # Built here from validated parts: encoded without a second walk.
            events=json.dumps(events, ensure_ascii=False, separators=(",", ":")),
            kind=history.kind,
            # NULL: the checkpoint takes the live state (nothing was redacted).
            history_state=None if history.state == step.state.full else history.state,
            patch=history.patch,
            step_events=history.events,
            records=records,
            record_keys=record_keys,
            answers=step.tools.riding_answers(),
        )
        if writes and committed is not None:
            coordination.write(conn, committed, wait)  # in the same transaction
    # Committed with the step (or fenced out with it). Not before: a
    # coordination write that fails rolls the records back too, and the
    # caller then records them on their own, before the saga.
    step.tools.committed()
    return committed
