"""Keeping leases alive while long steps run.

A step may take longer than the lease (an LLM call, a slow API). One thread
per worker process renews every lease the process holds a few times per
lease period; if a renewal finds the epoch moved on, the lease is marked lost
the keeper stops renewing it, and the runner stops at its next write, which
the epoch check rejects.
"""

from __future__ import annotations

import logging
import threading
import uuid

from resumable.models import step_queries
from resumable.models.database import Database

logger = logging.getLogger(__name__)


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

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def hold(self, session_id: uuid.UUID, epoch: int) -> None:
        with self._lock:
            self._held[session_id] = epoch

    def drop(self, session_id: uuid.UUID) -> None:
        with self._lock:
            self._held.pop(session_id, None)

    def renew_all(self) -> None:
        with self._lock:
            held = list(self._held.items())
        if not held:
            return
        try:
            with self._db.connection() as conn:
                for session_id, epoch in held:
                    row = conn.execute(
                        step_queries.RENEW_LEASE,
                        {"id": session_id, "epoch": epoch, "lease_seconds": self._lease_seconds},
                    ).fetchone()
                    if row is None:
                        logger.warning(
                            "lease on session %s (epoch %d) was taken over",
                            session_id,
                            epoch,
                            extra={"action": "lease_lost", "session_id": str(session_id)},
                        )
                        # Stop renewing; the runner's next fenced write fails and it stops.
                        with self._lock:
                            if self._held.get(session_id) == epoch:
                                del self._held[session_id]
        except Exception:
            # The database may be briefly unreachable; the next tick retries.
            logger.exception("lease renewal failed", extra={"action": "lease_renewal_failed"})

    def _run(self) -> None:
        interval = max(self._lease_seconds / 3, 0.05)
        while not self._stop.wait(interval):
            self.renew_all()
