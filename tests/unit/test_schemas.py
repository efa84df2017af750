"""The shared record models: built from table rows, frozen, one vocabulary,
no lease internals, and their JSON reads back as the same record."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

from resumable.models.records import (
    AuditEventRecord,
    DeadLetterRecord,
    SessionRecord,
    ToolCallRecord,
)
from resumable.models.status import SessionStatus
from resumable.schemas import (
    Checkpoint,
    DeadLetter,
    Event,
    Page,
    Record,
    Session,
    ToolCall,
)

NOW = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
SID = uuid.uuid4()
LEASE_FIELDS = {"lease_epoch", "lease_owner", "lease_expires_at", "epoch", "owner"}


def _session_row(**changes: Any) -> SessionRecord:
    fields: dict[str, Any] = {
        "id": SID,
        "agent": "support",
        "status": "suspended",
        "cursor": "charge_customer",
        "step_seq": 2,
        "state": {"plan": ["a"]},
        "input": {"amount": 500},
        "lease_epoch": 7,
        "lease_owner": "worker-1",
        "wait": {"signals": ["approval"], "deadline": "2026-11-02T09:00:00+00:00"},
        "created_at": NOW,
        "updated_at": NOW,
        **changes,
    }
    return SessionRecord(**fields)


def test_every_record_is_frozen_closed_and_named_in_one_vocabulary() -> None:
    for model in (Session, Event, Checkpoint, ToolCall, DeadLetter, Page[Session]):
        assert issubclass(model, Record)
        assert model.model_config.get("frozen") and model.model_config.get("extra") == "forbid"
        assert "id" not in model.model_fields, model
        assert not LEASE_FIELDS & set(model.model_fields), model
    session = Session.from_row(_session_row())
    with pytest.raises(pydantic.ValidationError):
        session.status = SessionStatus.COMPLETED  # type: ignore[misc]


def test_a_session_from_its_row() -> None:
    session = Session.from_row(_session_row())
    assert (session.session_id, session.step, session.seq) == (SID, "charge_customer", 2)
    assert session.waiting_for is not None and session.waiting_for.signals == ["approval"]
    assert session.waiting_for.deadline == datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    assert Session.from_row(_session_row(), include_state=False).state is None
    finished = Session.from_row(_session_row(status="failed", error={"code": "x", "type": "E"}))
    assert finished.waiting_for is None and finished.error is not None
    assert finished.error.type == "E" and finished.error.step is None
    assert Session.model_validate_json(session.model_dump_json()) == session


def test_events_tool_calls_checkpoints_and_dead_letters_from_their_rows() -> None:
    event = Event.from_row(
        AuditEventRecord(
            id=41, session_id=SID, seq=2, step="s", event_type="step_completed", payload={},
            created_at=NOW,
        )
    )  # fmt: skip
    assert (event.event_id, event.type) == (41, "step_completed")
    call = ToolCall.from_row(
        ToolCallRecord(
            idempotency_key="k", session_id=SID, step_seq=1, step="s", call_index=0,
            tool="charge", request={"amount": 5}, status="completed", response={"id": "r"},
            lease_epoch=3, attempts=1, created_at=NOW, updated_at=NOW,
        )
    )  # fmt: skip
    assert (call.seq, call.tool, call.status) == (1, "charge", "completed")
    checkpoint = Checkpoint.from_row(
        SID,
        {"seq": 1, "step": "s", "next_step": None, "kind": "delta", "bytes": 9, "created_at": NOW},
    )
    assert checkpoint.kind == "delta"
    letter = DeadLetter.from_row(
        DeadLetterRecord(
            id=7, session_id=SID, agent="a", error_code="permanent_error",
            error_type="PermanentError", error_message="no", traceback="Traceback", attempts=1,
            compensation="none", status="open", failed_at=NOW,
        ),
        include_traceback=False,
    )  # fmt: skip
    assert (letter.dead_letter_id, letter.traceback) == (7, None)
    page = Page[Event](items=[event], next_cursor=None)
    assert Page[Event].model_validate_json(page.model_dump_json()) == page
    with pytest.raises(pydantic.ValidationError):
        DeadLetter.model_validate({**letter.model_dump(), "status": "lost"})
