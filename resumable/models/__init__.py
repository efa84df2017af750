"""Persistence: SQLModel tables, connections, named SQL and migrations."""

from resumable.models.database import Database
from resumable.models.status import TERMINAL_STATUSES, SessionStatus, ToolCallStatus
from resumable.models.tables import AuditEventRow, CheckpointRow, SessionRow, ToolCallRow

__all__ = [
    "TERMINAL_STATUSES",
    "AuditEventRow",
    "CheckpointRow",
    "Database",
    "SessionRow",
    "SessionStatus",
    "ToolCallRow",
    "ToolCallStatus",
]
