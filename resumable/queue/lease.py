"""Keeping leases alive while long steps and compensations run.

A step may take longer than the lease (an LLM call, a slow API), and so may a
saga's compensation. One thread per worker process renews every lease the
process holds, in whichever status it holds it (``running`` or
``compensating``), a few times per lease period. If a renewal finds that the
epoch moved on, the keeper stops renewing that lease and says who has the
session now; the runner stops at its next write, which the epoch check rejects.

Each lease is registered under its epoch, and the runner drops it (that epoch
only) *before* the write that gives the session up (the final commit, a
retry, a dead letter, a hand-back). A renewal that then fails is the runner's
own release racing it, not a takeover, and is not reported as one.
"""

from __future__ import annotations

import logging
import threading
import uuid

from resumable.models import lease_queries, step_ops
from resumable.models.database import Database
from resumable.models.lease_queries import NotRenewed
from resumable.models.status import SessionStatus
from resumable.models.step_queries import Renewal

logger = logging.getLogger(__name__)


def _looks_renewable(row: NotRenewed) -> bool:
    """A lost lease its row still shows as held at its epoch: the renewal's
    snapshot predates the commit that took it (see NOT_RENEWED_NOW)."""
    return (
        row.status in (SessionStatus.RUNNING, SessionStatus.COMPENSATING)
        and row.epoch == row.held_epoch
        and row.owner is not None
    )


class LeaseKeeper:
    """Renews the leases of the sessions this process is running."""

    def __init__(self, db: Database, lease_seconds: float) -> None:
        self._db = db
        self._lease_seconds = lease_seconds
        self._held: dict[uuid.UUID, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="resumable-lease-keeper", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        """The renewing thread once started (a vital: see ``vitals.py``)."""
        return self._thread if self._thread.ident is not None else None

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def hold(self, session_id: uuid.UUID, epoch: int) -> None:
        with self._lock:
            self._held[session_id] = epoch

    def drop(self, session_id: uuid.UUID, epoch: int) -> None:
        """Stop renewing this epoch's lease. A later epoch of the same session
        (taken over by another thread of this process) stays registered."""
        with self._lock:
            if self._held.get(session_id) == epoch:
                del self._held[session_id]

    def release(self, session_id: uuid.UUID, epoch: int, reason: str) -> bool:
        """Give the lease up without a transition (the session can be claimed
        again at once); False if this epoch no longer held it."""
        self.drop(session_id, epoch)
        with self._db.connection() as conn:
            return step_ops.release_lease(conn, session_id, epoch, reason=reason)

    def holds(self, session_id: uuid.UUID, epoch: int) -> bool:
        """Whether this process still renews the lease of that epoch."""
        with self._lock:
            return self._held.get(session_id) == epoch

    def renew_all(self) -> None:
        with self._lock:
            held = list(self._held.items())
        if not held:
            return
        try:
            # One statement for every lease: hundreds of async runs in flight
            # must not make a pass take longer than the lease (lease_queries.py).
            with self._db.connection() as conn:
                lost = lease_queries.renew_leases(conn, held, lease_seconds=self._lease_seconds)
                stale = [(row.id, row.held_epoch) for row in lost if _looks_renewable(row)]
                if stale:
                    lost = [row for row in lost if not _looks_renewable(row)]
                    lost += lease_queries.not_renewed_now(conn, stale)
            for row in lost:
                now = None
                if row.status is not None and row.epoch is not None:
                    now = Renewal(False, SessionStatus(row.status), row.epoch, row.owner)
                self._lost(row.id, row.held_epoch, now)
        except Exception:
            # The database may be briefly unreachable; the next tick retries.
            logger.exception("lease renewal failed", extra={"action": "lease_renewal_failed"})

    def _lost(self, session_id: uuid.UUID, epoch: int, now: Renewal | None) -> None:
        with self._lock:
            if self._held.get(session_id) != epoch:
                return  # released by its runner while the renewal ran: not a loss
            del self._held[session_id]
        extra = {"action": "lease_lost", "session_id": str(session_id)}
        if now is None:
            logger.warning(
                "session %s (epoch %d) no longer exists; its run stops",
                session_id,
                epoch,
                extra=extra,
            )
        elif now.status is SessionStatus.CANCELLED:
            logger.warning(
                "session %s was cancelled while this worker ran it (epoch %d); its run stops "
                "at its next write",
                session_id,
                epoch,
                extra=extra,
            )
        else:
            logger.warning(
                "lease on session %s (epoch %d) was taken over: now %s at epoch %d by %s",
                session_id,
                epoch,
                now.status,
                now.epoch,
                now.owner or "no worker",
                extra=extra,
            )

    def _run(self) -> None:
        interval = max(self._lease_seconds / 3, 0.05)
        while not self._stop.wait(interval):
            self.renew_all()
