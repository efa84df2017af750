"""A worker process's heartbeat in PostgreSQL.

Each worker keeps a row in ``workers`` alive (its id, the prefix of the lease
owners it writes, the agents it loads, the version of each and the older
versions it migrates) a few times per ``ttl``. Three things follow from it:

- a dead worker is seen seconds after it dies: a claim treats the sessions of
  a worker whose row expired as claimable before their leases run out, and the
  reconciler enqueues them (``ORPHANED_SESSIONS``);
- a session whose agent no live worker loads is not claimed by anyone (no
  churn, no audit rows) and waits, visibly, until a worker that loads it
  starts and enqueues it.
- a session is claimed only by a worker that serves its version (or migrates
  it, when no live worker serves that version): during a rolling deploy old
  workers drain their sessions while new ones take the new sessions.

The heartbeat runs on its own connection, so a busy pool cannot delay it
into looking dead. A paused process (SIGSTOP, a long GC) looks dead too: its
sessions go to other workers, and fencing rejects whatever it writes later.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

from resumable._internal.database_urls import libpq_url
from resumable.models import agent_queries
from resumable.models.database import Database

logger = logging.getLogger(__name__)

#: Seconds a worker counts as alive after its last heartbeat (at most the lease).
MAX_TTL_SECONDS = 3.0


class WorkerHeartbeat:
    """Announces this worker and keeps its row alive until `stop`."""

    def __init__(
        self,
        db: Database,
        worker_id: str,
        agents: list[str],
        ttl: float,
        versions: dict[str, int] | None = None,
        takes_over: list[str] | None = None,
        fingerprints: dict[str, str] | None = None,
    ) -> None:
        self._url = libpq_url(db.url)
        self._prepare_threshold = db.prepare_threshold
        self.worker_id = worker_id
        self._agents = agents
        #: {"agent": version} (0: unversioned) and ["agent@older_version"].
        self._versions = versions if versions is not None else dict.fromkeys(agents, 0)
        self._takes_over = takes_over or []
        self._fingerprints = fingerprints or {}
        self.ttl = ttl
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._thread = threading.Thread(
            target=self._run, name="resumable-worker-heartbeat", daemon=True
        )
        #: Why this process cannot do its job, written with each beat (set by
        #: the worker once its vital signs are watched; None: nothing wrong).
        self.problem: Callable[[], str | None] = lambda: None

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._url,
                autocommit=True,
                connect_timeout=5,
                prepare_threshold=self._prepare_threshold,
            )
        return self._conn

    @contextmanager
    def _locked(self) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        """The heartbeat's own connection, for one write at a time."""
        with self._lock:  # the vital signs' thread reports through it too
            yield self._connection()

    def announce(self) -> list[str]:
        """Write this worker's row; return the agents no other live worker
        loaded until now, or whose version (one this worker runs or migrates)
        no other live worker served: their waiting sessions need a message."""
        conn = self._connection()
        unserved = agent_queries.unserved_agents(conn, self.worker_id, self._agents)
        labels = [f"{name}@{version}" for name, version in self._versions.items()]
        labels += self._takes_over
        for name in agent_queries.unserved_versions(conn, self.worker_id, labels):
            if name not in unserved:
                unserved.append(name)
        agent_queries.forget_dead_workers(conn)
        self._announce()
        return unserved

    def _announce(self) -> None:
        with self._locked() as conn:
            agent_queries.announce_worker(
                conn,
                self.worker_id,
                agents=self._agents,
                ttl=self.ttl,
                versions=self._versions,
                takes_over=self._takes_over,
                fingerprints=self._fingerprints,
            )

    def start(self) -> None:
        self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        """The beating thread once started (a vital: see ``vitals.py``)."""
        return self._thread if self._thread.ident is not None else None

    def stop(self) -> None:
        """Stop beating and remove the row (a clean stop has handed everything
        back); the row of a process that stops because it could not do its
        job stays, dead, saying why."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        problem = self.problem()
        try:
            with self._locked() as conn:
                agent_queries.retire_worker(conn, self.worker_id, problem)
        except psycopg.Error:
            logger.warning("could not remove this worker's heartbeat row", exc_info=True)
        if self._conn is not None:
            self._conn.close()

    def report(self) -> None:
        """Write the problem now, from the thread that found it (this one's
        own thread may be what died); never raises: the process is stopping."""
        try:
            self.beat()
        except Exception:
            logger.warning("could not write this worker's problem to its heartbeat row")

    def beat(self) -> None:
        problem = self.problem()
        with self._locked() as conn:
            alive = agent_queries.worker_heartbeat(
                conn, self.worker_id, ttl=self.ttl, problem=problem
            )
        if not alive:
            self._announce()

    def _run(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.beat()
            except psycopg.Error:
                # The database may be briefly unreachable; reconnect at the next beat.
                logger.warning("worker heartbeat failed", exc_info=True)
                if self._conn is not None:
                    self._conn.close()
