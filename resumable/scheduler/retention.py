"""The scheduler's housekeeping: retiring old finished sessions and
compacting long histories, in bounded batches so each pass stays short."""

from __future__ import annotations

import logging
import uuid

from resumable.agent import AgentRegistry
from resumable.errors import ResumableError
from resumable.models import checkpoint_queries, coordination_queries
from resumable.models.database import Database
from resumable.services.time_travel import TimeTravel
from resumable.settings import Settings

logger = logging.getLogger(__name__)


def retire_old_sessions(settings: Settings, db: Database) -> int:
    """Delete (or archive, then delete) sessions finished more than
    ``retention_days`` ago, with all their history. Sessions with an open
    dead letter are kept for the operator."""
    if settings.retention_days is None:
        return 0
    archive = settings.retention_mode == "archive"
    retired = _older_than_retention(
        settings,
        db,
        checkpoint_queries.RETIRE_SESSIONS,
        limit=settings.retention_batch,
        archive=archive,
    )
    if retired:
        logger.info(
            "retention %sd %d finished sessions",
            "archived and delete" if archive else "delete",
            retired,
            extra={"action": "retention"},
        )
    return retired + retire_old_shared_versions(settings, db)


def retire_old_shared_versions(settings: Settings, db: Database) -> int:
    """Delete shared documents' versions older than ``retention_days`` (each
    document's current version stays): a counter updated on every step would
    otherwise grow its history without bound."""
    if settings.retention_days is None:
        return 0
    retired = _older_than_retention(
        settings,
        db,
        coordination_queries.RETIRE_SHARED_VERSIONS,
        limit=10 * settings.retention_batch,
    )
    if retired:
        logger.info(
            "retention deleted %d old versions of shared documents",
            retired,
            extra={"action": "retention_shared_versions"},
        )
    return retired


def _older_than_retention(settings: Settings, db: Database, query: str, **params: object) -> int:
    """Run one retention statement over rows older than ``retention_days``;
    how many rows it removed."""
    assert settings.retention_days is not None
    with db.connection() as conn:
        rows = conn.execute(
            query, {"age_seconds": settings.retention_days * 86400, **params}
        ).fetchall()
    return len(rows)


def compact_histories(
    settings: Settings, db: Database, registry: AgentRegistry | None = None, limit: int = 50
) -> int:
    """Trim sessions holding more than twice ``compact_keep`` checkpoints down
    to the last ``compact_keep`` (the slack keeps each pass from touching a
    session on every step)."""
    keep = settings.compact_keep
    if keep is None:
        return 0
    with db.connection() as conn:
        rows = conn.execute(
            checkpoint_queries.COMPACTION_CANDIDATES, {"threshold": 2 * keep, "limit": limit}
        ).fetchall()
    history = TimeTravel(db, registry)
    removed = 0
    for row in rows:
        try:
            removed += history.compact(uuid.UUID(str(row["id"])), keep)
        except ResumableError as exc:
            logger.warning("cannot compact session %s: %s", row["id"], exc.message)
    return removed
