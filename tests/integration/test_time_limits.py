"""Time limits interrupt like dramatiq's: the interrupt is not an Exception a
step can swallow, and the failure (its retry, its saga) is handled on the
worker thread that ran the step, in the session's log context."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from resumable.client import Client
from resumable.errors import StepTimeoutError
from resumable.models.database import Database
from tests.conftest import ManagedProcess, wait_until
from tests.fake_api import FakeAPI


def _lines(output: str, text: str) -> list[str]:
    return [line for line in output.splitlines() if text in line]


def test_a_time_out_is_not_swallowed_and_is_handled_in_the_sessions_context(
    client: Client, db: Database, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    assert not issubclass(StepTimeoutError, Exception)
    worker = start_worker()
    swallowed = tmp_path / "swallowed"
    with FakeAPI() as api:
        session_id: uuid.UUID = client.start(
            "stubborn", {"api": api.url, "swallowed": str(swallowed)}
        )
        wait_until(lambda: client.get(session_id).status == "failed", timeout=30)
        undone = [body["what"] for path, body in api.order if path == "/undo"]

    # Both attempts ran past the 1 s limit; the step's `except Exception:` never ran.
    assert not swallowed.exists()
    events = client.events(session_id)
    [retry] = [e for e in events if e.type == "retry_scheduled"]
    assert retry.payload["type"] == "StepTimeoutError"
    assert retry.payload["code"] == "step_timeout"
    assert "1 s time limit" in retry.payload["message"]
    assert undone == ["seat"]
    with db.connection() as conn:
        letter = conn.execute(
            "SELECT error_type, attempts, compensation FROM dead_letters WHERE session_id = %s",
            (session_id,),
        ).fetchone()
    assert letter == {"error_type": "StepTimeoutError", "attempts": 2, "compensation": "completed"}

    # The retry, the failure and the compensation were logged by the step's own
    # thread, which names the session (a timer thread would log "session=-").
    out = worker.output()
    tag = f"[session={session_id}]"
    for text in ("retrying in", "failed for good", "compensated seat with undo"):
        found = _lines(out, text)
        assert found and all(tag in line for line in found), (text, found)
