"""Invariant 10: a worker process whose own thread it cannot work without
died (a consumer, the lease keeper, the heartbeat) says so (its log, its
heartbeat row, its health endpoint and metric, the web's ``/readyz``) and
exits, handing its sessions back, so that its supervisor starts a new one.
The threads are ended from inside by ``tests/sabotage_agents.py``."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from resumable.client import Client
from resumable.dev.processes import free_port
from resumable.models.database import Database
from resumable.queue.worker import UNHEALTHY_EXIT_STATUS
from tests.conftest import LocalDeployment, exit_status, wait_until
from tests.integration.test_worker_processes import _children

MODULES = ("tests.agents", "tests.sabotage_agents")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _problem_row(db: Database) -> Any:
    with db.connection() as conn:
        return conn.execute(
            "SELECT id, problem, expires_at <= now() AS dead FROM workers WHERE problem IS NOT NULL"
        ).fetchone()


@pytest.mark.parametrize("thread", ["consumer", "lease-keeper", "worker-heartbeat"])
def test_a_worker_that_lost_a_vital_thread_says_so_hands_back_and_exits(
    thread: str, client: Client, db: Database, tmp_path: Path, deployment: LocalDeployment
) -> None:
    port = free_port()
    worker = deployment.worker(*MODULES, RESUMABLE_WORKER_METRICS_PORT=str(port))
    health = f"http://127.0.0.1:{port}/readyz"
    assert _get(health)[0] == 200
    # A step in flight, held: the stop waits for it, which gives the test
    # time to read what the process says of itself before it exits.
    (tmp_path / "hold").touch()
    held = client.start("counter", {"steps": 3, "hold_at": 1, "gate_dir": str(tmp_path)})
    wait_until((tmp_path / "entered-count-1").exists, what="the held step to start")

    broken = client.start("sabotage", {"thread": thread})
    wait_until(lambda: "not doing its job" in worker.output(), what="the worker to notice")
    status, body = _get(health)
    assert status == 503, body
    assert "died" in json.loads(body)["problem"]
    _, metrics = _get(f"http://127.0.0.1:{port}/metrics")
    assert re.search(r"^resumable_worker_healthy 0\.0$", metrics, re.M), metrics
    row = wait_until(lambda: _problem_row(db), what="the heartbeat row to carry the problem")
    assert "died" in row["problem"]

    web = deployment.web()
    ready = json.loads(_get(f"{deployment.url}/readyz")[1])
    assert ready["workers"]["unhealthy"] == 1, ready
    assert "died" in ready["workers"]["problem"]
    assert web.proc.poll() is None

    (tmp_path / "hold").unlink()
    assert exit_status(worker, 60) == UNHEALTHY_EXIT_STATUS
    assert "Traceback" not in worker.output(), worker.tail(60)
    # The held step committed and its session was handed back: another
    # worker finishes it, as it does the sabotage's own session.
    row = _problem_row(db)
    assert row is not None and row["dead"], row
    deployment.worker(*MODULES)
    wait_until(lambda: client.get(held).status == "completed", timeout=30, what="hand-back")
    wait_until(lambda: client.get(broken).status == "completed", timeout=30, what="sabotage")
    ready = json.loads(_get(f"{deployment.url}/readyz")[1])
    assert ready["workers"]["live"] == 1, ready


def test_the_supervisor_starts_a_new_child_in_place_of_an_unhealthy_one(
    client: Client, deployment: LocalDeployment
) -> None:
    worker = deployment.worker(
        *MODULES, RESUMABLE_WORKER_PROCESSES="2", RESUMABLE_WORKER_THREADS="2"
    )
    wait_until(
        lambda: "all 2 worker processes ready" in worker.output(),
        timeout=60,
        what="both children to be ready",
    )
    before = _children(worker)
    client.start("sabotage", {"thread": "consumer"})
    wait_until(
        lambda: f"exited with status {UNHEALTHY_EXIT_STATUS}; restarting it" in worker.output(),
        timeout=60,
        what="the parent to restart the unhealthy child",
    )
    wait_until(lambda: _children(worker) != before, what="a new child")
    # Both slots consume again: sessions complete, on either child.
    started = [client.start("counter", {"steps": 3}) for _ in range(6)]
    for session_id in started:
        wait_until(
            lambda sid=session_id: client.get(sid).status == "completed",  # type: ignore[misc]
            timeout=60,
            what="sessions after the restart",
        )
    assert worker.proc.poll() is None
