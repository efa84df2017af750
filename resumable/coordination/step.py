"""What one step does with coordination, and when it reaches the database.

Shared-document updates, a lock request (the step's wait names a ``Lock``)
and lock releases are written in the step's commit transaction, after its
``COMMIT_STEP`` statement succeeded; a step that uses none of them commits
as before, one autocommitted statement. After the commit, grants run (their
own short transaction per lock) and wake the next holders.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import psycopg

from resumable.coordination import children, locks
from resumable.coordination.shared import SharedState, check_name
from resumable.models.database import Database
from resumable.models.status import SessionStatus
from resumable.priorities import Priority
from resumable.settings import Settings

if TYPE_CHECKING:
    import dramatiq

logger = logging.getLogger(__name__)


class StepCoordination:
    """The coordination of one step of one session's run (lease epoch)."""

    def __init__(
        self,
        db: Database,
        session_id: uuid.UUID,
        epoch: int,
        step: str,
        seq: int,
        *,
        idle_timeout: float,
        coordinated: bool = True,
        priority: Priority = "normal",
    ) -> None:
        self.db = db
        #: Whether the session had a parent or lock requests when its run was
        #: claimed; if not, completing it has nothing to release or wake.
        self.coordinated = coordinated
        #: A commit transaction whose worker goes quiet this long is ended by
        #: the server (the lease: a worker paused longer is a zombie anyway).
        self.idle_timeout = idle_timeout
        self.session_id = session_id
        self.epoch = epoch
        self.shared = SharedState(db, session_id, step)
        #: Locks this step releases at its commit.
        self.releases: list[str] = []
        self.spawns = children.Spawns(session_id, seq, priority)

    def fence(self, name: str) -> int:
        return locks.fence(self.db, self.session_id, self.epoch, name, self.idle_timeout)

    def release(self, name: str) -> None:
        check_name(name, "lock")
        if name not in self.releases:
            self.releases.append(name)

    def writes(self, wait: dict[str, Any] | None) -> bool:
        """Whether the step's commit writes anything here, so needs a
        transaction around it; if not, it stays one autocommitted statement."""
        return bool(self.shared.pending or self.releases or self.spawns.children or _locks(wait))

    def write(self, conn: psycopg.Connection[Any], seq: int, wait: dict[str, Any] | None) -> None:
        """In the commit's transaction (when ``writes``), after the step's own
        commit statement succeeded."""
        locks.bound_idle(conn, self.idle_timeout)
        self.shared.write(conn, seq)
        self.spawns.write(conn)
        for name in self.releases:
            locks.release(conn, self.session_id, name)
        if wait and "lock" in wait:
            locks.request(conn, self.session_id, wait["lock"]["name"], wait["lock"]["permits"])

    def after_commit(
        self,
        broker: dramatiq.Broker,
        settings: Settings,
        status: SessionStatus,
        wait: dict[str, Any] | None,
    ) -> None:
        """Grants that the commit made possible: released locks go to their
        next waiters, a new request may be granted at once, and a finished
        session lets go of everything it held. Best effort: the step is
        committed, and what fails here the scheduler's backstops redo."""
        try:
            self._after_commit(broker, settings, status, wait)
        except Exception:
            logger.warning(
                "grants or wake-ups after the commit failed; the scheduler will redo them",
                exc_info=True,
                extra={"action": "coordination_after_commit_failed"},
            )

    def _after_commit(
        self,
        broker: dramatiq.Broker,
        settings: Settings,
        status: SessionStatus,
        wait: dict[str, Any] | None,
    ) -> None:
        self.spawns.enqueue(broker, settings)
        names = set(self.releases)
        if _locks(wait):
            names.add(wait["lock"]["name"])  # type: ignore[index]
        if names:
            locks.grant_and_wake(self.db, broker, settings, names)
        if wait and "children" in wait:  # they may all have finished already
            children.wake_parent(self.db, broker, settings, parent_id=self.session_id)
        if status is SessionStatus.COMPLETED and (self.coordinated or self.releases):
            children.session_finished(self.db, broker, settings, self.session_id)


def _locks(wait: dict[str, Any] | None) -> bool:
    return bool(wait and "lock" in wait)
