"""Bulk drains started from the console, run in the background with progress.

A drain can take minutes (a rate limit, thousands of dead letters), longer
than a browser waits for an answer, so it runs on a thread of the web process
and its page polls for progress. Progress lives in that process only (a page
served by another web process says so); the drain's effects do not: each
retry or discard is its own audited transaction, so a drain cut short by a
restart has done what it reports and leaves the rest open, to be drained again.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from resumable.errors import ResumableError
from resumable.services.dead_letters import DrainReport

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

# Finished drains kept for their pages, per web process.
KEEP_FINISHED = 50


@dataclass
class DrainJob:
    id: str
    action: str
    actor: str
    # The filter, as the operator chose it, for the page.
    description: str
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    processed: int = 0
    total: int | None = None
    report: DrainReport | None = None
    error: str | None = None
    finished_at: datetime | None = None

    @property
    def running(self) -> bool:
        return self.finished_at is None


class DrainJobs:
    def __init__(self) -> None:
        self._jobs: OrderedDict[str, DrainJob] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, job_id: str) -> DrainJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def start(
        self, run: Callable[[Progress], DrainReport], *, action: str, actor: str, description: str
    ) -> DrainJob:
        job = DrainJob(secrets.token_urlsafe(12), action, actor, description)
        with self._lock:
            self._jobs[job.id] = job
            finished = [j.id for j in self._jobs.values() if not j.running]
            for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._jobs[old]

        def progress(processed: int, total: int) -> None:
            job.processed, job.total = processed, total

        def work() -> None:
            try:
                job.report = run(progress)
                job.total = len(job.report.matched)
                job.processed = job.total
            except ResumableError as exc:
                job.error = exc.message
            except Exception:
                logger.exception("console drain %s failed", job.id, extra={"action": "drain"})
                job.error = "the drain stopped on an internal error; see the server log"
            finally:
                job.finished_at = datetime.now(UTC)

        threading.Thread(target=work, name=f"console-drain-{job.id}", daemon=True).start()
        return job
