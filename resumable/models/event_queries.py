"""Reading a session's audit log (``audit_events``; every statement that
changes a session writes its events itself), with the typed functions that
run the reads. Rows come back as ``AuditEventRecord``, oldest first."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from resumable.models import columns, rows
from resumable.models.records import AuditEventRecord

EVENT_COLUMNS = ", ".join(columns.AUDIT_EVENT_FIELDS)

# The session's events after event `after`, oldest first; at most %(limit)s
# of them (NULL: all).
EVENTS = f"""
SELECT {EVENT_COLUMNS} FROM audit_events
WHERE session_id = %(session_id)s AND id > %(after)s
ORDER BY id
LIMIT %(limit)s
"""

# Its newest %(limit)s events after event `after`, newest first.
LATEST_EVENTS = f"""
SELECT {EVENT_COLUMNS} FROM audit_events
WHERE session_id = %(session_id)s AND id > %(after)s
ORDER BY id DESC
LIMIT %(limit)s
"""


def events(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, after: int = 0, limit: int | None
) -> list[AuditEventRecord]:
    """The session's events after event `after`, oldest first, at most
    `limit` of them (None: all)."""
    params = {"session_id": session_id, "after": after, "limit": limit}
    return rows.every(conn, AuditEventRecord, EVENTS, params)


def latest_events(
    conn: psycopg.Connection[Any], session_id: uuid.UUID, *, limit: int, after: int = 0
) -> list[AuditEventRecord]:
    """The session's newest `limit` events after event `after`, oldest first."""
    params = {"session_id": session_id, "after": after, "limit": limit}
    newest_first = rows.every(conn, AuditEventRecord, LATEST_EVENTS, params)
    newest_first.reverse()
    return newest_first
