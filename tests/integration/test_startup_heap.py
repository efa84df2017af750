"""The long-running processes freeze what they built while starting, so a full
garbage collection walks only what they allocated since (startup_heap.py):
50-70 ms pauses, with the GIL held, in the web process and the workers before."""

from __future__ import annotations

from functools import partial

from resumable.client import Client
from resumable.dev.processes import Process
from tests.conftest import START_TIMEOUT, LocalDeployment, wait_until

FROZEN = "start-up heap frozen:"


def _said_frozen(process: Process) -> bool:
    return FROZEN in process.output()


def test_web_worker_and_scheduler_freeze_their_start_up_heap(
    deployment: LocalDeployment, client: Client
) -> None:
    debug = ["--log-level", "DEBUG"]
    processes = deployment.processes
    web = processes.spawn("web", [*debug, "web", "--port", str(deployment.port)], "Uvicorn running")
    scheduler = processes.spawn("scheduler", [*debug, "scheduler"], "scheduler started")
    worker = processes.spawn(
        "worker", [*debug, "worker", "--agents", "tests.agents"], "worker started"
    )
    for process in (web, scheduler, worker):
        process.wait_ready(START_TIMEOUT)
    for process in (web, scheduler, worker):
        wait_until(partial(_said_frozen, process), what=f"{process.name}'s freeze")
    session_id = client.start("heap_report", {})
    wait_until(lambda: client.get(session_id).status == "completed", what="the report")
    frozen = client.get(session_id).result["frozen"]  # seen from inside the worker
    # Every import of the worker is in it: far more than any run allocates.
    assert frozen > 50_000, frozen
