"""The statements of shared state, locks and semaphores (see
``resumable/coordination``). Shared-document writes run inside the step's
commit transaction, after ``COMMIT_STEP`` succeeded, so they commit with the
step or not at all; the row locks they take are held only until that commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class SharedDocument:
    """A shared document as stored: its value, version (0: never written) and
    who wrote it last."""

    name: str
    value: Any
    version: int
    updated_at: datetime
    updated_by: uuid.UUID | None


@dataclass(frozen=True)
class SharedVersion:
    """One committed value of a shared document and the step that wrote it."""

    name: str
    version: int
    value: Any
    session_id: uuid.UUID
    seq: int
    step: str
    created_at: datetime


READ_SHARED = """
SELECT name, value, version, updated_at, updated_by FROM shared_documents WHERE name = %(name)s
"""

SHARED_HISTORY = """
SELECT name, version, value, session_id, seq, step, created_at FROM shared_versions
WHERE name = %(name)s AND (%(before)s::bigint IS NULL OR version < %(before)s::bigint)
ORDER BY version DESC
LIMIT %(limit)s
"""

# Make sure every document the step updates has a row (a statement of its
# own: a data-modifying CTE's rows are invisible to the rest of its statement),
ENSURE_SHARED = """
INSERT INTO shared_documents (name, value, version)
SELECT n, NULL, 0 FROM unnest(%(names)s::text[]) AS n ORDER BY n
ON CONFLICT (name) DO NOTHING
"""

# then lock them all in name order (one global order, so two steps updating
# the same documents cannot deadlock). Both run inside the commit transaction,
# after COMMIT_STEP: the locks last only until that commit.
LOCK_SHARED = """
SELECT name, value, version FROM shared_documents
WHERE name = ANY(%(names)s::text[])
ORDER BY name
FOR UPDATE
"""

# The new values, their history rows and one audit event each, in one statement.
WRITE_SHARED = """
WITH d AS (
    SELECT * FROM jsonb_to_recordset(%(docs)s::jsonb) AS d(name text, value jsonb, version bigint)
), u AS (
    UPDATE shared_documents SET value = d.value, version = d.version, updated_at = now(),
                                updated_by = %(session_id)s
    FROM d WHERE shared_documents.name = d.name
), h AS (
    INSERT INTO shared_versions (name, version, value, session_id, seq, step)
    SELECT d.name, d.version, d.value, %(session_id)s, %(seq)s, %(step)s FROM d
)
INSERT INTO audit_events (session_id, seq, step, event_type, payload)
SELECT %(session_id)s, %(seq)s, %(step)s, 'shared_updated',
       jsonb_build_object('name', d.name, 'version', d.version)
FROM d
"""
