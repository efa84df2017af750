"""Parking a session whose replay diverged from its record (invariant 8).

When the deployed code asks for something other than what a session
recorded (another tool or other arguments at a recorded call position, or a
step, poll check or compensation it no longer has), failing the session
would run its saga and undo effects the customer wanted; running it would
repeat an effect. So the worker does neither: it commits nothing of the
step, releases the lease and parks the session as ``blocked`` with the
reason, an audit event and an alert, in one transaction. An operator then
resumes it (after deploying a fix), accepts the new behaviour, or fails it
(see ``resumable/services/blocked.py``).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from resumable.agent import Agent
from resumable.errors import ReplayDivergedError
from resumable.models import blocked_queries, step_ops
from resumable.models.database import Database
from resumable.models.step_queries import ClaimedSession
from resumable.queue.lease import LeaseKeeper
from resumable.queue.outcomes import RunOutcome
from resumable.settings import Settings

logger = logging.getLogger(__name__)


def missing(kind: str, agent: str, name: str, step: str | None) -> ReplayDivergedError:
    """The divergence of a session that needs a step, check or compensation
    (`kind`) the deployed code of `agent` does not have."""
    return ReplayDivergedError(
        {
            "kind": f"missing_{kind}",
            "step": step,
            "message": f"the session needs {kind} {name!r}, which agent {agent!r} "
            "no longer has in the deployed code",
            "recorded": {kind: name},
            "requested": None,
        }
    )


def check_code_has(claim: ClaimedSession, agent: Agent, cursor: str) -> None:
    """Raise a divergence if the session waits at a step, or on a poll
    check, that the deployed code no longer has (never fail it for that)."""
    if not agent.has_step(cursor):
        raise missing("step", agent.name, cursor, cursor)
    wake = claim.wake or {}
    poll = (claim.wait or {}).get("poll") or {}
    check = poll.get("check")
    if wake.get("kind") == "poll_check" and check and check not in agent.check_names:
        raise missing("check", agent.name, str(check), cursor)


def fewer_calls(
    db: Database, session_id: Any, step_seq: int, step: str, made: int
) -> ReplayDivergedError | None:
    """The divergence of a replayed step that made fewer calls than it
    recorded (found when its commit wrote nothing), or None: then the commit
    was fenced out by another worker."""
    with db.connection() as conn:
        beyond = step_ops.recorded_beyond(conn, session_id, step_seq, made)
    if not beyond:
        return None
    first = beyond[0]
    return ReplayDivergedError(
        {
            "kind": "tool_calls_missing",
            "step": step,
            "step_seq": step_seq,
            "call_index": made,
            "message": f"step {step!r} made {made} call(s) on replay, but "
            f"{len(beyond)} more were recorded from call #{first.call_index} on "
            f"({', '.join(repr(call.tool) for call in beyond)})",
            "recorded": {
                "tool": first.tool,
                "args_hash": first.args_hash,
                "request": first.request,
                "status": first.status,
                "idempotency_key": first.idempotency_key,
                "calls": [
                    {"call_index": call.call_index, "tool": call.tool, "status": call.status}
                    for call in beyond
                ],
            },
            "requested": None,
        }
    )


def park(
    settings: Settings,
    db: Database,
    keeper: LeaseKeeper,
    session_id: Any,
    epoch: int,
    divergence: ReplayDivergedError,
) -> RunOutcome:
    """Block the held session with the divergence's reason; nothing else runs."""
    reason = divergence.reason
    keeper.drop(session_id, epoch)  # this write gives the lease up
    with db.connection() as conn:
        blocked = blocked_queries.block(
            conn,
            session_id,
            epoch,
            reason=reason,
            step=cast("str | None", reason.get("step")),  # a step's name, as every reason has
            alerts_enabled=bool(settings.alert_webhook_url),
        )
    if not blocked:
        return RunOutcome.LEASE_LOST
    logger.warning(
        "session blocked for an operator: %s",
        divergence.message,
        extra={"action": "session_blocked", "error_code": divergence.code},
    )
    return RunOutcome.BLOCKED
