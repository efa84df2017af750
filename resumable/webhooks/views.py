"""JSON shapes of the API's resources."""

from __future__ import annotations

from typing import Any

from resumable.models.tables import AuditEventRow, SessionRow


def session_json(row: SessionRow, *, include_state: bool = True) -> dict[str, Any]:
    wait = row.wait or {}
    body: dict[str, Any] = {
        "session_id": str(row.id),
        "agent": row.agent,
        "status": row.status,
        "step": row.cursor,
        "seq": row.step_seq,
        "attempts": row.attempts,
        "input": row.input,
        "result": row.result,
        "error": None
        if row.error is None
        else {k: row.error.get(k) for k in ("code", "type", "message", "step")},
        "waiting_for": None
        if row.status != "suspended"
        else {
            "callbacks": len(wait.get("callbacks", [])),
            "signals": wait.get("signals", []),
            "timer_at": wait.get("timer_at"),
            "poll": (wait.get("poll") or {}).get("check"),
            "deadline": wait.get("deadline"),
        },
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }
    if include_state:
        body["state"] = row.state
    return body


def event_json(row: AuditEventRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "seq": row.seq,
        "step": row.step,
        "type": row.event_type,
        "payload": row.payload,
        "at": row.created_at.isoformat(),
    }
