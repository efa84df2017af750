"""Persistence: the tables (SQLModel, for the migrations), the connection
pool, every SQL statement named by concern (``*_queries.py``) with the typed
function that runs it (beside it, or in ``*_ops.py`` for the larger ones),
and the migrations. Callers run the typed functions: they pass arguments and
get rows back as dataclasses or table rows, never building parameters or
picking row factories; no module outside this package imports SQLModel (an
import-linter contract says so)."""

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
