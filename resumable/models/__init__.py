"""Persistence: the tables (SQLModel, for the migrations), the connection
pool, every SQL statement named by concern (``*_queries.py``) with the typed
function that runs it (beside it, or in ``*_ops.py`` for the larger ones),
and the migrations. Callers run the typed functions: they pass arguments and
get rows back as dataclasses (``records.py`` for whole table rows), never building parameters or
picking row factories; no module outside this package imports SQLModel (an
import-linter contract says so).

The names below resolve on first use (PEP 562), as the package root's do:
importing a query module loads this package first, and a process that only
runs statements (a worker) would otherwise load SQLModel and SQLAlchemy for
the table classes it never touches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from resumable._internal import lazy_names

if TYPE_CHECKING:
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

# Each public name, to the module that defines it.
_HOMES = {
    "TERMINAL_STATUSES": "resumable.models.status",
    "SessionStatus": "resumable.models.status",
    "ToolCallStatus": "resumable.models.status",
    "Database": "resumable.models.database",
    "AuditEventRow": "resumable.models.tables",
    "CheckpointRow": "resumable.models.tables",
    "SessionRow": "resumable.models.tables",
    "ToolCallRow": "resumable.models.tables",
}


__getattr__, __dir__ = lazy_names.resolver(__name__, _HOMES, globals())
