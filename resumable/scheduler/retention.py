"""The scheduler's housekeeping: retiring old finished sessions and
compacting long histories, in bounded batches so each pass stays short."""

from __future__ import annotations

import logging

from resumable.agent import AgentRegistry
from resumable.errors import ResumableError
from resumable.models import checkpoint_queries, coordination_ops
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
    with db.connection() as conn:
        retired = checkpoint_queries.retire_sessions(
            conn,
            age_seconds=_age_seconds(settings),
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
    with db.connection() as conn:
        retired = coordination_ops.retire_shared_versions(
            conn, age_seconds=_age_seconds(settings), limit=10 * settings.retention_batch
        )
    if retired:
        logger.info(
            "retention deleted %d old versions of shared documents",
            retired,
            extra={"action": "retention_shared_versions"},
        )
    return retired


def _age_seconds(settings: Settings) -> float:
    """``retention_days``, in seconds."""
    assert settings.retention_days is not None
    return settings.retention_days * 86400


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
        candidates = checkpoint_queries.compaction_candidates(conn, threshold=2 * keep, limit=limit)
    history = TimeTravel(db, registry)
    removed = 0
    for candidate in candidates:
        try:
            removed += history.compact(candidate.id, keep)
        except ResumableError as exc:
            logger.warning("cannot compact session %s: %s", candidate.id, exc.message)
    return removed
