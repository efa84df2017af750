"""The resumable processes a benchmark starts (web, workers; a scheduler through
``BenchDeployment.processes``) on its servers, all stopped on the way out.

Processes are spawned and stopped the way ``resumable dev``, the demo and the
tests do it (``resumable/dev/processes.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from multiprocessing.process import BaseProcess
from pathlib import Path

from benchmarks.harness.servers import ROOT, Services
from resumable.dev.processes import Deployment, Process, free_port
from resumable.settings import Settings

DEFAULT_POOL_SIZE = Settings.model_fields["db_pool_size"].default
START_TIMEOUT = 60.0
# A worker stopping finishes its steps in flight first.
STOP_GRACE_SECONDS = 60.0


def worker_env(threads: int, **extra: str) -> dict[str, str]:
    """A worker with `threads` threads and a pool large enough for them, in one
    process (a benchmark's ``--workers`` counts processes)."""
    return {
        "RESUMABLE_WORKER_PROCESSES": "1",
        "RESUMABLE_WORKER_THREADS": str(threads),
        "RESUMABLE_DB_POOL_SIZE": str(max(DEFAULT_POOL_SIZE, threads + 2)),
        **extra,
    }


class BenchDeployment:
    """The benchmark's ``resumable web`` and ``worker`` processes on its servers,
    logging to `log_dir`; all stopped on the way out."""

    def __init__(self, services: Services, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.processes = Deployment(
            {
                **env,
                "DATABASE_URL": services.database_url,
                "REDIS_URL": services.redis_url,
                "PYTHONPATH": str(ROOT),
            },
            log_dir,
            cwd=ROOT,
            grace_seconds=STOP_GRACE_SECONDS,
        )
        self.workers: list[Process] = []
        self.web: Process | None = None
        self.url = ""

    def start_workers(self, count: int, agent_module: str) -> list[Process]:
        """`count` workers of `agent_module`, once all have started."""
        started = [
            self.processes.worker(agent_module, name=f"worker-{len(self.workers) + index}")
            for index in range(count)
        ]
        self.workers += started
        for worker in started:
            worker.wait_ready(START_TIMEOUT)
        return started

    def start_web(self, **env: str) -> str:
        """A web process on a free port, once it serves; its base URL. Start it
        before the workers, so the callback URLs they hand out point at it."""
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        # Every process started from now on hands out callback URLs pointing here.
        self.processes.env["RESUMABLE_PUBLIC_URL"] = self.url
        self.web = self.processes.web(port, **env)
        self.web.wait_ready(START_TIMEOUT)
        return self.url

    @property
    def pids(self) -> list[int]:
        return [child.pid for child in self.processes.children]

    def check_alive(self) -> None:
        self.processes.check_alive()

    def __enter__(self) -> BenchDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.processes.stop_all()


def join_or_kill(children: Iterable[BaseProcess], timeout: float) -> None:
    """Wait up to `timeout` for each multiprocessing child, then kill what is left
    (the scripts' own helper processes: raw clients, a BLPOP waiter)."""
    for child in children:
        child.join(timeout=timeout)
        if child.is_alive():
            child.kill()
            child.join()
