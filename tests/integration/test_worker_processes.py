"""``resumable worker`` as several processes (``resumable/queue/supervisor.py``):
SIGTERM to the parent alone drains every child (invariant 9), and a child
killed with SIGKILL loses nothing and is replaced (invariant 6)."""

from __future__ import annotations

import os
import re
import signal
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable

from resumable.client import Client
from resumable.dev.processes import free_port
from tests.conftest import LocalDeployment, ManagedProcess, exit_status, wait_until
from tests.fake_api import FakeAPI

TWO_BY_TWO = {"RESUMABLE_WORKER_PROCESSES": "2", "RESUMABLE_WORKER_THREADS": "2"}


def _two_by_two(start_worker: Callable[..., ManagedProcess], **env: str) -> ManagedProcess:
    """A worker of two processes with two threads each, once both children are ready."""
    worker = start_worker(**TWO_BY_TWO, **env)
    wait_until(
        lambda: "all 2 worker processes ready" in worker.output(),
        timeout=60,
        what="both children to be ready",
    )
    return worker


def _owner_pid(client: Client, session_id: uuid.UUID) -> int | None:
    owner = client.session_row(session_id).lease_owner
    return int(owner.split(":")[1]) if owner else None


def _children(worker: ManagedProcess) -> dict[int, int]:
    """Slot -> pid of the latest child the parent started in it, from its log."""
    found = re.findall(r"worker process (\d+) started as pid (\d+)", worker.output())
    return {int(slot): int(pid) for slot, pid in found}


def _each_step_once(client: Client, session_id: uuid.UUID, steps: int) -> None:
    assert [c.seq for c in client.checkpoints(session_id)] == list(range(1, steps + 1))
    committed = Counter(e.seq for e in client.events(session_id) if e.type == "step_completed")
    assert committed == Counter(range(1, steps + 1))


def test_sigterm_to_the_parent_hands_back_every_childs_sessions(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    steps, sessions = 40, 4
    with FakeAPI() as api:
        # A prefetch of one message per thread: neither child can take all four
        # messages and leave the other idle, so both must be under way.
        worker = _two_by_two(start_worker, RESUMABLE_WORKER_PREFETCH="2")
        children = _children(worker)
        assert sorted(children) == [0, 1] and worker.pid not in children.values()
        ids = [
            client.start("counter", {"api": api.url, "steps": steps, "sleep": 0.1})
            for _ in range(sessions)
        ]
        # Two threads in each of two processes: every session is under way, in both.
        wait_until(
            lambda: (
                all(client.get(s).seq >= 2 for s in ids)
                and {_owner_pid(client, s) for s in ids} == set(children.values())
            ),
            timeout=20,
            what="all four sessions running, in both children",
        )

        os.kill(worker.pid, signal.SIGTERM)  # the parent alone, not its group
        assert exit_status(worker, 20) == 0, worker.tail(40)
        for pid in children.values():
            wait_until(_gone(pid), timeout=5, what=f"child {pid} to exit")
        # Every session was handed back: committed, released and re-enqueued,
        # not left for its lease to expire.
        for session_id in ids:
            row = client.session_row(session_id)
            assert row.status in ("pending", "completed"), row.status
            assert row.lease_owner is None
        output = worker.output()
        handed = [int(n) for n in re.findall(r"(\d+) session\(s\) handed back mid-run", output)]
        assert len(handed) == 2 and sum(handed) == sessions, output
        assert "worker stopped: 2 processes exited" in output

        start_worker()
        wait_until(
            lambda: all(client.get(s).status == "completed" for s in ids),
            timeout=60,
            what="another worker to finish the handed-back sessions",
        )
        assert api.total_calls() == steps * sessions
        assert api.effect_count() == steps * sessions
    for session_id in ids:
        _each_step_once(client, session_id, steps)
        released = [e for e in client.events(session_id) if e.type == "lease_released"]
        assert [e.payload["reason"] for e in released] == ["worker stopping"]


def test_a_killed_child_loses_nothing_and_is_replaced(
    client: Client, reconciler: None, start_worker: Callable[..., ManagedProcess]
) -> None:
    steps, sessions = 30, 4
    with FakeAPI() as api:
        worker = _two_by_two(start_worker)
        children = _children(worker)
        ids = [
            client.start("counter", {"api": api.url, "steps": steps, "sleep": 0.05})
            for _ in range(sessions)
        ]
        wait_until(
            lambda: all(client.get(s).seq >= 2 for s in ids),
            timeout=20,
            what="all four sessions under way",
        )
        victim_slot, victim = next(
            (slot, pid)
            for slot, pid in children.items()
            if pid in {_owner_pid(client, s) for s in ids}
        )
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: (
                f"worker process {victim_slot} (pid {victim}) was killed by SIGKILL; "
                "restarting it" in worker.output()
            ),
            timeout=10,
            what="the parent to restart the killed child",
        )
        wait_until(
            lambda: (
                _children(worker)[victim_slot] != victim
                and f"worker started: process {victim_slot} of 2"
                in worker.output().split(f"(pid {victim}) was killed")[-1]
            ),
            timeout=30,
            what="the replacement child to be ready",
        )
        wait_until(
            lambda: all(client.get(s).status == "completed" for s in ids),
            timeout=60,
            what="every session to complete after the kill",
        )
        assert worker.running()
        # Each charge took effect once; a step cut off by the kill ran again
        # under a new epoch and found its charge in the cache or deduped by key.
        assert api.effect_count() == steps * sessions
        worker.signal(signal.SIGTERM)
        assert exit_status(worker, 20) == 0, worker.tail(40)
    for session_id in ids:
        _each_step_once(client, session_id, steps)
    recovered = [
        e for s in ids for e in client.events(s) if e.type == "lease_recovered"
    ]  # the killed child's sessions were taken over after their leases expired
    assert recovered


def _gone(pid: int) -> Callable[[], bool]:
    return lambda: not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_each_child_serves_its_own_metrics_port(
    client: Client, deployment: LocalDeployment
) -> None:
    base = free_port(count=2)  # each child takes base + its slot
    worker = deployment.processes.worker(
        "tests.agents", **TWO_BY_TWO, RESUMABLE_WORKER_METRICS_PORT=str(base)
    )

    def both_ready() -> bool:
        worker.check_alive()  # a worker that exited fails now, with its log
        return "all 2 worker processes ready" in worker.output()

    # However long a loaded machine takes to start them (the test's whole
    # budget, not a guess at how slow "slow" is).
    wait_until(both_ready, timeout=150, what="both children to be ready")
    session_id = client.start("counter", {"steps": 2})
    wait_until(
        lambda: client.get(session_id).status == "completed", timeout=60, what="a session to run"
    )
    served = {}
    for port in (base, base + 1):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
            served[port] = response.read().decode()
        assert "resumable_step_duration_seconds" in served[port]
    # The steps ran in one child or both; together they counted both (each is
    # counted when it returns, before its commit: both are in once completed).
    counts = [
        float(m)
        for text in served.values()
        for m in re.findall(r"^resumable_step_duration_seconds_count\{[^}]*\} (\S+)$", text, re.M)
    ]
    assert sum(counts) == 2


def _state(pid: int) -> str:
    """The process's state letter from /proc (T when stopped), or '' if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return ""


def test_the_parent_paused_or_killed_alone_pauses_or_kills_every_child(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    """What is done to the worker's pid is done to the whole worker: a pause
    (SIGSTOP cannot be passed on, so the children notice and stop themselves)
    and a crash (SIGKILL: the kernel kills them with it), as with one process."""
    worker = _two_by_two(start_worker)
    children = list(_children(worker).values())
    os.kill(worker.pid, signal.SIGSTOP)  # the parent alone, not its group
    try:
        wait_until(
            lambda: all(_state(pid) == "T" for pid in children),
            timeout=10,
            what="both children to stop with their parent",
        )
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    wait_until(
        lambda: all(_state(pid) not in ("T", "") for pid in children),
        timeout=10,
        what="both children to continue with their parent",
    )
    os.kill(worker.pid, signal.SIGKILL)
    worker.proc.wait(timeout=10)
    for pid in children:  # gone, or a zombie (an orphan's reaper may be slow)
        wait_until(
            lambda pid=pid: _state(pid) in ("", "Z"),  # type: ignore[misc]
            timeout=10,
            what=f"child {pid} to die with its parent",
        )
