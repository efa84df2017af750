"""The columns each statement that selects whole rows reads, by name: the
fields of its row's dataclass (``records.py``), in order, so a read maps every
column to its field and a worker builds its SQL without SQLModel."""

from __future__ import annotations

from dataclasses import fields

from resumable.models import records


def _names(record: type) -> tuple[str, ...]:
    return tuple(field.name for field in fields(record))


TOOL_CALL_FIELDS = _names(records.ToolCallRecord)
CALLBACK_FIELDS = _names(records.CallbackRecord)
AUDIT_EVENT_FIELDS = _names(records.AuditEventRecord)
SESSION_FIELDS = _names(records.SessionRecord)
DEAD_LETTER_FIELDS = _names(records.DeadLetterRecord)
SCHEDULE_FIELDS = _names(records.ScheduleRecord)
