"""The tool-call cache: one row per logical call, keyed by its idempotency
key; the statements, then the typed functions that run them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from resumable._internal import serialization
from resumable.models import columns, rows
from resumable.models.records import ToolCallRecord
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
    # Set when another call is recorded at this position (another tool or
    # other arguments): a divergence, and nothing was claimed.
    other_key: str | None = None
    other_tool: str | None = None
    other_args_hash: str | None = None
    other_request: Any = None
    other_status: str | None = None

    def __post_init__(self) -> None:
        for name in ("status", "recorded_status"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, ToolCallStatus(value))


# Claim a tool call for this epoch, unless another attempt already recorded it.
# Claim: a worker that lost its lease cannot start a new side effect. A call
# recorded at the same position (session, step seq, call index) under another
# key (another tool, other arguments) is a divergence: nothing is claimed and
# the recorded call comes back as `other_*`. Superseded records (an operator
# accepted new behaviour) are neither compared nor replayed.
CLAIM_TOOL_CALL = """
WITH owner AS (
    SELECT id FROM sessions WHERE id = %(session_id)s AND lease_epoch = %(epoch)s
                              AND status = 'running'
), other AS (
    SELECT idempotency_key, tool, args_hash, request, status FROM tool_execution_cache
    WHERE session_id = %(session_id)s AND step_seq = %(step_seq)s
      AND call_index = %(call_index)s AND idempotency_key <> %(key)s
      AND superseded_at IS NULL
    LIMIT 1
), ins AS (
    INSERT INTO tool_execution_cache
        (idempotency_key, session_id, step_seq, step, call_index, tool, request, status,
         lease_epoch, compensation, args_hash)
    SELECT %(key)s, id, %(step_seq)s, %(step)s, %(call_index)s, %(tool)s, %(request)s::jsonb,
           'started', %(epoch)s, %(compensation)s, %(args_hash)s
    FROM owner WHERE NOT EXISTS (SELECT 1 FROM other)
    ON CONFLICT (idempotency_key, session_id) DO UPDATE SET
        attempts = tool_execution_cache.attempts + 1,
        lease_epoch = EXCLUDED.lease_epoch,
        status = 'started',
        superseded_at = NULL,
        superseded_by = NULL,
        updated_at = now()
    -- A superseded record asked for again is live again (its key goes to the
    -- tool, so an external API still dedupes it).
    WHERE tool_execution_cache.status <> 'completed'
       OR tool_execution_cache.superseded_at IS NOT NULL
    RETURNING status, response
)
SELECT EXISTS (SELECT 1 FROM owner) AS owned,
       ins.status, ins.response,
       t.status AS recorded_status, t.response AS recorded_response,
       other.idempotency_key AS other_key, other.tool AS other_tool,
       other.args_hash AS other_args_hash, other.request AS other_request,
       other.status AS other_status
FROM (SELECT 1) AS one
LEFT JOIN ins ON true
LEFT JOIN other ON true
LEFT JOIN tool_execution_cache AS t ON t.idempotency_key = %(key)s
                                   AND t.session_id = %(session_id)s
                                   AND t.superseded_at IS NULL
"""


# The answers of calls without side effects (``ctx.tool(..., side_effects=
# False)``: a model request) were not claimed before they ran; each rides with
# the step's next write, as a row of %(answers)s (a JSON array), inserted under
# the writer's fence (FENCE: a CTE of the session's id, empty when the lease is
# gone). A row already there under the same key takes the answer if this
# epoch claimed it (a deferred record, ``defer_record=True``) or an earlier
# one wrote it (a failed attempt, a record an operator superseded, a claim
# made by an older release: an attempt more; or a paused worker's statement
# that landed after this run's claim: the answer this run acted on wins).
# Fenced on the row as well: a statement of an earlier epoch still running
# when a later one took the session over changes none of the later one's rows.
_ANSWERS = """answers AS (
    INSERT INTO tool_execution_cache AS t
        (idempotency_key, session_id, step_seq, step, call_index, tool, request, status,
         response, error, lease_epoch, args_hash)
    SELECT a.key, FENCE.id, a.step_seq, a.step, a.call_index, a.tool, a.request, a.status,
           a.response, a.error, %(epoch)s, a.args_hash
    FROM FENCE, jsonb_to_recordset(%(answers)s::jsonb) AS a(
        key text, step_seq integer, step text, call_index integer, tool text,
        request jsonb, status text, response jsonb, error jsonb, args_hash text)
    ON CONFLICT (idempotency_key, session_id) DO UPDATE SET
        status = EXCLUDED.status, response = EXCLUDED.response, error = EXCLUDED.error,
        attempts = t.attempts + (t.lease_epoch <> EXCLUDED.lease_epoch)::int,
        lease_epoch = EXCLUDED.lease_epoch,
        superseded_at = NULL, superseded_by = NULL, updated_at = now()
    WHERE t.lease_epoch < EXCLUDED.lease_epoch
       OR (t.lease_epoch = EXCLUDED.lease_epoch AND t.status = 'started')
    RETURNING t.idempotency_key
)"""


def answers_cte(fence: str) -> str:
    """The CTE that writes the riding answers under the CTE `fence`."""
    return _ANSWERS.replace("FENCE", fence)


# CLAIM_TOOL_CALL that also writes the answers made since the step's last
# write: they are durable before the claimed call can start, so no effect
# ever acts on an answer a replay would not return.
CLAIM_TOOL_CALL_WITH_ANSWERS = CLAIM_TOOL_CALL.replace(
    "\n), other AS (", "\n), " + answers_cte("owner") + ", other AS (", 1
)

# The riding answers on their own: the step ended without a write to ride
# (it failed, or waits for a rate limit's turn).
RECORD_ANSWERS = (
    """WITH owner AS (
    SELECT id FROM sessions WHERE id = %(session_id)s AND lease_epoch = %(epoch)s
                              AND status = 'running'
), """
    + answers_cte("owner")
    + "\nSELECT EXISTS (SELECT 1 FROM owner) AS owned"
)


# Record a tool call's outcome, fenced like every other write: only the epoch
# that claimed the call, while it still holds the session, may record it. A
# worker paused inside a tool call and resumed after another worker recorded
# (or re-ran) the same call gets no row back, and its result is dropped.
COMPLETE_TOOL_CALL = """
UPDATE tool_execution_cache AS t
SET status = 'completed', response = %(response)s::jsonb, error = NULL, updated_at = now()
FROM sessions s
WHERE t.session_id = %(session_id)s AND t.idempotency_key = %(key)s
  AND t.lease_epoch = %(epoch)s AND t.status = 'started'
  AND s.id = %(session_id)s AND s.lease_epoch = %(epoch)s AND s.status = 'running'
RETURNING t.idempotency_key
"""


FAIL_TOOL_CALL = """
UPDATE tool_execution_cache AS t
SET status = 'failed', error = %(error)s::jsonb, updated_at = now()
FROM sessions s
WHERE t.session_id = %(session_id)s AND t.idempotency_key = %(key)s
  AND t.lease_epoch = %(epoch)s AND t.status = 'started'
  AND s.id = %(session_id)s AND s.lease_epoch = %(epoch)s AND s.status = 'running'
RETURNING t.idempotency_key
"""


TOOL_CALL_COLUMNS = ", ".join(columns.TOOL_CALL_FIELDS)

# A session's recorded calls in the order it made them (the console lists them).
TOOL_CALLS_OF_SESSION = f"""
SELECT {TOOL_CALL_COLUMNS} FROM tool_execution_cache WHERE session_id = %(session_id)s
ORDER BY step_seq, call_index
LIMIT %(limit)s
"""


# -- the typed functions ------------------------------------------------------------


def claim_tool_call(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    epoch: int,
    *,
    key: str,
    step_seq: int,
    step: str,
    call_index: int,
    tool: str,
    request: str,
    compensation: str | None,
    args_hash: str,
    answers: str | None = None,
) -> ToolCallClaim:
    """Claim the call for this epoch (`request`: the redacted arguments as
    JSON), or find it recorded; with `answers` (a JSON array of rows), the
    answers made since the step's last write ride with it."""
    params = {
        "session_id": session_id,
        "epoch": epoch,
        "key": key,
        "step_seq": step_seq,
        "step": step,
        "call_index": call_index,
        "tool": tool,
        "request": request,
        "compensation": compensation,
        "args_hash": args_hash,
    }
    statement = CLAIM_TOOL_CALL
    if answers is not None:
        statement, params["answers"] = CLAIM_TOOL_CALL_WITH_ANSWERS, answers
    claim = rows.one(conn, ToolCallClaim, statement, params)
    assert claim is not None  # the statement answers one row, whatever it found
    return claim


def complete_tool_call(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, key: str, epoch: int, response: str
) -> bool:
    """Record the call's result (JSON text); False if the epoch moved on.
    The session is named beside the key: one partition of a table
    distributed by session id (tests/integration/test_partition_plan.py)."""
    params = {"session_id": session_id, "key": key, "epoch": epoch, "response": response}
    return rows.found(conn, COMPLETE_TOOL_CALL, params)


def record_answers(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, epoch: int, answers: str
) -> bool:
    """Write the riding `answers` (a JSON array of rows) on their own; False
    if the epoch moved on (nothing written)."""
    params = {"session_id": session_id, "epoch": epoch, "answers": answers}
    return bool(rows.value(conn, RECORD_ANSWERS, params))


def fail_tool_call(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID,
    key: str,
    epoch: int,
    error: dict[str, Any],
) -> bool:
    """Record that the call failed; False if the epoch moved on."""
    params = {
        "session_id": session_id,
        "key": key,
        "epoch": epoch,
        "error": serialization.dumps(error),
    }
    return rows.found(conn, FAIL_TOOL_CALL, params)


def of_session(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, limit: int
) -> list[ToolCallRecord]:
    """The session's first `limit` recorded calls, in the order it made them."""
    params = {"session_id": session_id, "limit": limit}
    return rows.every(conn, ToolCallRecord, TOOL_CALLS_OF_SESSION, params)
