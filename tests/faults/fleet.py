"""The fault matrix's processes: a web process, a scheduler and workers (one of a
single process, one of two forked children), started the way every resumable
process is (``resumable/dev/processes.py``); workers are replaced as the faults
take them. Each runs at a ``Place``: here all on 127.0.0.1, in the multi-host
harness (``tests/multihost``) each role on a host of its own."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from resumable.dev.processes import Deployment, Process, free_port

AGENTS_MODULE = "tests.faults.agents"


@dataclass(frozen=True)
class Place:
    """Where a process runs: the deployment that starts it, and the address
    it binds its ports to and is reached at."""

    deployment: Deployment
    address: str = "127.0.0.1"


@dataclass
class WorkerGroup:
    """One ``resumable worker`` command: a single process, or a parent of forked children."""

    process: Process
    processes: int
    metrics_port: int
    place: Place

    def leaves(self) -> dict[int, str]:
        """pid -> metrics URL (``http://address:port``) of each process that runs sessions."""
        base = f"http://{self.place.address}:"
        if self.processes == 1:
            return {self.process.pid: f"{base}{self.metrics_port}"}
        found = re.findall(r"worker process (\d+) started as pid (\d+)", self.process.output())
        latest = {int(slot): int(pid) for slot, pid in found}
        return {pid: f"{base}{self.metrics_port + slot}" for slot, pid in latest.items()}


class Fleet:
    """The matrix's processes; workers are replaced as the faults take them."""

    def __init__(
        self,
        deployment: Deployment,
        threads: int,
        *,
        web_at: Place | None = None,
        scheduler_at: Place | None = None,
    ) -> None:
        """Every process in `deployment` on 127.0.0.1, unless placed elsewhere."""
        self.deployment = deployment
        self.threads = threads
        self.web_at = web_at or Place(deployment)
        self.scheduler_at = scheduler_at or Place(deployment)
        self.web_port = free_port()
        self.web_url = f"http://{self.web_at.address}:{self.web_port}"
        self.web: Process | None = None
        self.scheduler: Process | None = None
        self.workers: list[WorkerGroup] = []

    def start_web(self) -> None:
        web = self.web_at.deployment.web(self.web_port, RESUMABLE_WEB_HOST=self.web_at.address)
        self.web = web.wait_ready(60)

    def start_scheduler(self) -> None:
        self.scheduler = self.scheduler_at.deployment.scheduler().wait_ready(60)

    def add_worker(self, processes: int, at: Place | None = None) -> WorkerGroup:
        at = at or Place(self.deployment)
        port = free_port(count=processes)
        process = at.deployment.worker(
            AGENTS_MODULE,
            name=f"worker-{len(at.deployment.children)}",
            RESUMABLE_WORKER_PROCESSES=str(processes),
            RESUMABLE_WORKER_METRICS_PORT=str(port),
            RESUMABLE_WORKER_METRICS_HOST=at.address,
        )
        group = WorkerGroup(process, processes, port, at)
        ready = "worker started" if processes == 1 else f"all {processes} worker processes ready"
        wait_for(lambda: ready in process.output() or process.exited(), 90, f"{process.name} ready")
        process.check_alive()
        self.workers.append(group)
        return group

    def replace(self, group: WorkerGroup) -> WorkerGroup:
        self.workers.remove(group)
        return self.add_worker(group.processes, group.place)

    def leaves(self) -> dict[int, str]:
        """pid -> metrics URL of every worker process that runs sessions."""
        every: dict[int, str] = {}
        for group in self.workers:
            every.update(group.leaves())
        return every


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started
