"""Taking over a session of an older agent version (``@agent.migrate``).

A session runs on the version it started on while a worker serving that
version is alive (old workers drain their sessions during a rolling deploy).
Once none is, a worker whose agent declares ``@agent.migrate(from_version=N)``
takes a version-N session over: in ONE transaction it claims the lease, runs
the migration on the recorded state, renames the cursor through the step
aliases, stamps the session with its own version and writes the audit event
``session_migrated``. If the migration raises (or returns something that is
not a JSON object), the session is parked as ``blocked`` in that same
transaction, with the error as its reason: never failed, never compensated.
"""

from __future__ import annotations

import copy
import logging
import uuid
from dataclasses import replace

from resumable._internal import serialization
from resumable.agent import AgentRegistry, version_label
from resumable.models import blocked_queries, step_ops
from resumable.models.database import Database
from resumable.models.step_queries import ClaimedSession
from resumable.queue.outcomes import RunOutcome
from resumable.settings import Settings

logger = logging.getLogger(__name__)


def take_over(
    settings: Settings,
    db: Database,
    registry: AgentRegistry,
    session_id: uuid.UUID,
    owner: str,
    takes_over: list[str],
) -> ClaimedSession | RunOutcome:
    """Claim and migrate the session; the claim to run it with, or
    NOT_CLAIMED (someone else took it first) or BLOCKED (the migration failed)."""
    versions = {agent.name: agent.version for agent in registry}
    # Only the code, for the audit event (a taken-over session has started).
    codes = {agent.name: {"code": agent.fingerprint} for agent in registry}
    with db.connection() as conn, conn.transaction():
        claim = step_ops.take_over(
            conn,
            session_id,
            owner=owner,
            versions=serialization.dumps(versions),
            starts=serialization.dumps(codes),
            takes_over=takes_over,
            lease_seconds=settings.lease_seconds,
        )
        if claim is None:
            return RunOutcome.NOT_CLAIMED
        agent = registry.get(claim.agent)
        old, new = version_label(agent.name, claim.version), agent.label
        try:
            state = agent.migration(claim.version)(copy.deepcopy(claim.state))
            if not isinstance(state, dict):
                raise TypeError(f"a migration must return the state (a dict), got {type(state)}")
            encoded = serialization.dumps(state, "migrated state")
        except Exception as exc:
            reason = {
                "kind": "migration_failed",
                "step": claim.cursor,
                "message": f"migrating a session of {old} to {new} failed: "
                f"{serialization.storable_text(type(exc).__name__)}: "
                f"{serialization.exception_text(exc)}",
                "recorded": {"version": claim.version},
                "requested": {"version": agent.version},
                "traceback": serialization.traceback_text(exc),
            }
            blocked_queries.block(
                conn,
                session_id,
                claim.epoch,
                reason=reason,
                step=claim.cursor,
                alerts_enabled=bool(settings.alert_webhook_url),
            )
            logger.warning(
                "session blocked for an operator: %s",
                reason["message"],
                extra={"action": "session_blocked", "error_code": "migration_failed"},
            )
            return RunOutcome.BLOCKED
        cursor = agent.resolve_step(claim.cursor) if claim.cursor else None
        migrated = step_ops.migrate_session(
            conn,
            session_id,
            claim.epoch,
            state=encoded,
            cursor=cursor,
            from_version=claim.version,
            to_version=agent.version,
            from_step=claim.cursor,
            owner=owner,
        )
        assert migrated is not None  # the lease was taken in this transaction
    logger.info(
        "session of %s taken over by %s (state migrated, at step %s)",
        old,
        new,
        migrated.cursor,
        extra={"action": "session_migrated"},
    )
    return replace(
        claim, state=state, cursor=migrated.cursor, version=agent.version, history_rebase=True
    )
