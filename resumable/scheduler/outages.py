"""The scheduler's jobs through an outage of PostgreSQL or Redis.

Left alone, every job fails every interval while a server is down, each
failure a traceback that never says what is wrong (measured: ~400 lines in
45 s). Instead the first failure is diagnosed with a direct probe and
reported in one line naming the server, its address and its reason; the jobs
pause; the server is probed again with capped exponential backoff, quietly;
and one line says when it answers again. A failure that is not an outage (the
probe answers at once) is one line too; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from resumable._internal.reachability import (
    PROBE_TIMEOUT,
    Server,
    ServiceUnreachableError,
    reason,
    which_server,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dependency:
    """A server the jobs need, and how to ask it whether it answers."""

    server: Server
    location: str
    probe: Callable[[], None]  # raises ServiceUnreachableError
    #: What the log lines call it, when not `server`: RabbitMQ stands where
    #: Redis would (the actions keep ``redis_*``, as documented).
    label: str = ""

    @property
    def called(self) -> str:
        return self.label or self.server


@dataclass
class _Outage:
    since: float
    delay: float
    next_probe: float
    probing: bool = True


class Outages:
    """Guards jobs: they run only while every dependency answers."""

    def __init__(
        self,
        dependencies: list[Dependency],
        *,
        first_delay: float,
        max_delay: float,
        clock: Callable[[], float] = time.monotonic,
        probe_deadline: float = 2 * PROBE_TIMEOUT + 1,
    ) -> None:
        self._dependencies = {d.server: d for d in dependencies}
        self._probe_deadline = probe_deadline
        self._unanswered: dict[Server, threading.Thread] = {}
        self._first_delay = first_delay
        self._max_delay = max(first_delay, max_delay)
        self._clock = clock
        self._lock = threading.Lock()
        self._down: dict[Server, _Outage] = {}

    @property
    def down(self) -> list[Server]:
        with self._lock:
            return list(self._down)

    def guard(self, job: Callable[[], object]) -> Callable[[], object]:
        """`job`, skipped while a dependency is down, its outage errors reported once."""

        @functools.wraps(job)
        def run() -> object:
            if not self._ready():
                return None
            try:
                return job()
            except Exception as exc:
                server = which_server(exc)
                if server is None or server not in self._dependencies:
                    raise
                self._failed(server, exc, getattr(job, "__name__", "job"))
                return None

        return run

    def _ready(self) -> bool:
        """Whether jobs may run; probes the servers that are down and due."""
        with self._lock:
            if not self._down:
                return True
            now = self._clock()
            due = [
                server
                for server, outage in self._down.items()
                if not outage.probing and now >= outage.next_probe
            ]
            for server in due:
                self._down[server].probing = True
        for server in due:
            self._probe_again(server)
        with self._lock:
            return not self._down

    def _probe(self, server: Server) -> str | None:
        """Why `server` does not answer, or None if it does, within the
        probe's deadline.

        A probe bounds its connect, not what follows: a server frozen after
        the handshake (or a proxy in front of a stalled one) holds its
        ``SELECT 1`` until the connection dies, hours later, and the outage
        would stay marked as being probed meanwhile, no job running. So the
        probe runs on a thread of its own; past the deadline the server
        counts as unreachable, and until that thread returns no other probe
        of the server starts (one stuck thread at most)."""
        stuck = self._unanswered.get(server)
        if stuck is not None:
            if stuck.is_alive():
                return f"its probe has not answered for more than {self._probe_deadline:g} s"
            del self._unanswered[server]
        answers: list[str | None] = []
        thread = threading.Thread(
            target=lambda: answers.append(self._probe_once(server)),
            name=f"probe-{server}",
            daemon=True,
        )
        try:
            thread.start()
        except RuntimeError:  # no thread to spare: probe here, unbounded
            return self._probe_once(server)
        thread.join(self._probe_deadline)
        if not answers:
            self._unanswered[server] = thread
            return f"its probe did not answer within {self._probe_deadline:g} s"
        return answers[0]

    def _probe_once(self, server: Server) -> str | None:
        """A probe that fails in a way it did not expect counts as unreachable
        too: escaping, it would leave the outage marked as being probed, and
        no job would run again (a RecursionError out of a RabbitMQ probe
        did exactly that on CI; every timer of the deployment stopped)."""
        try:
            self._dependencies[server].probe()
        except ServiceUnreachableError as exc:
            return exc.reason
        except Exception as exc:
            logger.debug("%s probe failed unexpectedly", server, exc_info=True)
            return f"{type(exc).__name__}: {exc}"[:500]
        return None

    def _probe_again(self, server: Server) -> None:
        dependency = self._dependencies[server]
        why = self._probe(server)
        if why is not None:
            with self._lock:
                outage = self._down[server]
                outage.delay = min(outage.delay * 2, self._max_delay)
                outage.next_probe = self._clock() + outage.delay
                outage.probing = False
            logger.debug("%s still unreachable: %s", dependency.called, why)
            return
        with self._lock:
            outage = self._down.pop(server)
        logger.info(
            "%s reachable again at %s (down %.1f s)",
            dependency.called,
            dependency.location,
            self._clock() - outage.since,
            extra={"action": f"{server}_reachable"},
        )

    def _failed(self, server: Server, exc: Exception, job: str) -> None:
        now = self._clock()
        with self._lock:
            if server in self._down:
                return  # already reported; the probes take it from here
            self._down[server] = _Outage(since=now, delay=self._first_delay, next_probe=now)
        dependency = self._dependencies[server]
        why = self._probe(server)
        if why is not None:
            with self._lock:
                outage = self._down[server]
                outage.next_probe = self._clock() + outage.delay
                outage.probing = False
            logger.warning(
                "%s unreachable at %s: %s; retrying (backing off up to %.0f s)",
                dependency.called,
                dependency.location,
                why,
                self._max_delay,
                extra={"action": f"{server}_unreachable"},
            )
            return
        with self._lock:
            self._down.pop(server, None)
        # It answers: one failed connection (a restart, a terminated backend).
        logger.warning(
            "%s failed on a %s error that passed: %s",
            job,
            dependency.called,
            reason(exc),
            extra={"action": f"{server}_error"},
        )
