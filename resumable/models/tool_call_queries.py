"""The tool-call cache: one row per logical call, keyed by its idempotency key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resumable.models.status import ToolCallStatus


@dataclass(frozen=True)
class ToolCallClaim:
    """A row of CLAIM_TOOL_CALL. ``status`` is set when this epoch claimed the
    call (run it); ``recorded_*`` is the cache row as it stands (a completed one
    is returned without running the tool)."""

    owned: bool
    status: ToolCallStatus | None
    response: Any
    recorded_status: ToolCallStatus | None
    recorded_response: Any

    def __post_init__(self) -> None:
        for name in ("status", "recorded_status"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, ToolCallStatus(value))


# Claim a tool call for this epoch, unless another attempt already recorded it.
# Claim: a worker that lost its lease cannot start a new side effect.
CLAIM_TOOL_CALL = """
WITH owner AS (
    SELECT id FROM sessions WHERE id = %(session_id)s AND lease_epoch = %(epoch)s
                              AND status = 'running'
), ins AS (
    INSERT INTO tool_execution_cache
        (idempotency_key, session_id, step_seq, step, call_index, tool, request, status,
         lease_epoch, compensation)
    SELECT %(key)s, id, %(step_seq)s, %(step)s, %(call_index)s, %(tool)s, %(request)s::jsonb,
           'started', %(epoch)s, %(compensation)s
    FROM owner
    ON CONFLICT (idempotency_key) DO UPDATE SET
        attempts = tool_execution_cache.attempts + 1,
        lease_epoch = EXCLUDED.lease_epoch,
        status = 'started',
        updated_at = now()
    WHERE tool_execution_cache.status <> 'completed'
    RETURNING status, response
)
SELECT EXISTS (SELECT 1 FROM owner) AS owned,
       ins.status, ins.response,
       t.status AS recorded_status, t.response AS recorded_response
FROM (SELECT 1) AS one
LEFT JOIN ins ON true
LEFT JOIN tool_execution_cache AS t ON t.idempotency_key = %(key)s
"""


# Record a tool call's outcome, fenced like every other write: only the epoch
# that claimed the call, while it still holds the session, may record it. A
# worker paused inside a tool call and resumed after another worker recorded
# (or re-ran) the same call gets no row back, and its result is dropped.
COMPLETE_TOOL_CALL = """
UPDATE tool_execution_cache AS t
SET status = 'completed', response = %(response)s::jsonb, error = NULL, updated_at = now()
FROM sessions s
WHERE t.idempotency_key = %(key)s AND t.lease_epoch = %(epoch)s AND t.status = 'started'
  AND s.id = t.session_id AND s.lease_epoch = %(epoch)s AND s.status = 'running'
RETURNING t.idempotency_key
"""


FAIL_TOOL_CALL = """
UPDATE tool_execution_cache AS t
SET status = 'failed', error = %(error)s::jsonb, updated_at = now()
FROM sessions s
WHERE t.idempotency_key = %(key)s AND t.lease_epoch = %(epoch)s AND t.status = 'started'
  AND s.id = t.session_id AND s.lease_epoch = %(epoch)s AND s.status = 'running'
RETURNING t.idempotency_key
"""
