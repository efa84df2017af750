"""The fault matrix's processes: a web process, a scheduler and workers (one of a
single process, one of two forked children), started the way every resumable
process is (``resumable/dev/processes.py``); workers are replaced as the faults
take them."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from resumable.dev.processes import Deployment, Process, free_port

AGENTS_MODULE = "tests.faults.agents"


@dataclass
class WorkerGroup:
    """One ``resumable worker`` command: a single process, or a parent of forked children."""

    process: Process
    processes: int
    metrics_port: int

    def leaves(self) -> dict[int, int]:
        """pid -> metrics port of each process that runs sessions."""
        if self.processes == 1:
            return {self.process.pid: self.metrics_port}
        found = re.findall(r"worker process (\d+) started as pid (\d+)", self.process.output())
        latest = {int(slot): int(pid) for slot, pid in found}
        return {pid: self.metrics_port + slot for slot, pid in latest.items()}


class Fleet:
    """The matrix's processes; workers are replaced as the faults take them."""

    def __init__(self, deployment: Deployment, threads: int) -> None:
        self.deployment = deployment
        self.threads = threads
        self.web_port = free_port()
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.web: Process | None = None
        self.scheduler: Process | None = None
        self.workers: list[WorkerGroup] = []

    def start_web(self) -> None:
        self.web = self.deployment.web(self.web_port).wait_ready(60)

    def start_scheduler(self) -> None:
        self.scheduler = self.deployment.scheduler().wait_ready(60)

    def add_worker(self, processes: int) -> WorkerGroup:
        port = free_port(count=processes)
        process = self.deployment.worker(
            AGENTS_MODULE,
            name=f"worker-{len(self.deployment.children)}",
            RESUMABLE_WORKER_PROCESSES=str(processes),
            RESUMABLE_WORKER_METRICS_PORT=str(port),
        )
        group = WorkerGroup(process, processes, port)
        ready = "worker started" if processes == 1 else f"all {processes} worker processes ready"
        wait_for(lambda: ready in process.output() or process.exited(), 90, f"{process.name} ready")
        process.check_alive()
        self.workers.append(group)
        return group

    def replace(self, group: WorkerGroup) -> WorkerGroup:
        self.workers.remove(group)
        return self.add_worker(group.processes)

    def leaves(self) -> dict[int, int]:
        every: dict[int, int] = {}
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
