"""Invariant 9: a stop is a hand-back. SIGTERM finishes the step in flight,
commits it, releases the lease and re-enqueues the session at once; a thread
blocked past the stop is named, never left behind in silence."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from resumable.client import Client
from resumable.webhooks.metrics import DatabaseCollector
from tests.conftest import ManagedProcess, exit_status, run_cli, wait_until
from tests.fake_api import FakeAPI


def test_sigterm_mid_run_hands_the_session_to_another_worker_at_once(
    client: Client, start_worker: Callable[..., ManagedProcess], tmp_path: Path
) -> None:
    """The run is held in its third step until the stop has begun, so the
    signal meets it mid-run however long a loaded machine takes to start the
    second worker; who ran the session before and after the hand-back is read
    from its history (each ``run_started`` names its worker), not from the
    lease at one instant."""
    steps = 40
    (tmp_path / "hold").touch()
    with FakeAPI() as api:
        stopping = start_worker()
        session_id = client.start(
            "counter",
            {"api": api.url, "steps": steps, "sleep": 0.1, "gate_dir": str(tmp_path), "hold_at": 3},
        )
        wait_until((tmp_path / "entered-count-3").exists, timeout=60, what="the run held in step 3")
        other = start_worker()

        stopping.signal(signal.SIGTERM)
        waiting = (
            "stopping: waiting up to 30 s for 1 step(s) in flight to commit and hand back: "
            f"session {session_id} in step "
        )
        wait_until(lambda: waiting in stopping.output(), what="the stop to wait for the step")
        (tmp_path / "hold").unlink()  # the step in flight finishes, then is handed back
        assert exit_status(stopping, 60) == 0
        wait_until(
            lambda: client.get(session_id).status == "completed", timeout=120, what="completion"
        )

        # Handed back, not left to lapse: with no scheduler running here, a lease
        # left to expire would never be recovered. The other worker's run started
        # from a released (pending) session, not by taking over an expired lease.
        events = client.events(session_id)
        types = [e.type for e in events]
        released_at = types.index("lease_released")
        assert types[released_at + 1 :].count("lease_recovered") == 0
        runs = [
            (at, _worker_pid(e.payload)) for at, e in enumerate(events) if e.type == "run_started"
        ]
        assert [pid for at, pid in runs if at < released_at] == [stopping.pid]
        after = [pid for at, pid in runs if at > released_at]
        assert after and set(after) == {other.pid}, runs
        # Every step ran once and every charge was made once: nothing was cut off.
        assert api.total_calls() == steps
        assert api.effect_count() == steps
    checkpoints = client.checkpoints(session_id)
    assert [c.seq for c in checkpoints] == list(range(1, steps + 1))
    committed = Counter(e.seq for e in client.events(session_id) if e.type == "step_completed")
    assert committed == Counter(range(1, steps + 1))
    released = [e.payload["reason"] for e in events if e.type == "lease_released"]
    assert released[0] == "worker stopping"
    assert "worker stopping" not in released[1:]  # the other worker may yield for fairness only
    assert "1 session(s) handed back mid-run" in stopping.output()


def _worker_pid(payload: dict[str, Any]) -> int:
    """The pid in a ``run_started`` event's worker (``host:pid:...``)."""
    return int(str(payload["worker"]).split(":")[1])


def test_hung_steps_are_listed_and_stopping_names_the_threads_it_leaves(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    """Point 11: a step blocked in C past its time limit shows as hung; after a
    cancel its thread stays blocked, and the worker's stop says so instead of
    waiting for it; a hung session it still holds is released for others."""
    # Stopping waits for held steps up to RESUMABLE_MAX_SECONDS_PER_RUN.
    worker = start_worker(RESUMABLE_MAX_SECONDS_PER_RUN="1")
    cancelled = client.start("hung", {"seconds": 120})
    held = client.start("hung", {"seconds": 120})
    slow = client.start("counter", {"steps": 1, "sleep": 2.5})  # no time limit

    def hung_ids(after: float) -> set[uuid.UUID]:
        return {h.session_id for h in client.hung_sessions(after_seconds=after)}

    # Past their 1 s time limit, the two blocked steps are hung; the slow step,
    # which has no limit, is hung only by the caller's own bound.
    wait_until(lambda: {cancelled, held} <= hung_ids(600), timeout=15, what="hung steps")
    assert slow not in hung_ids(600)
    wait_until(lambda: slow in hung_ids(1), timeout=10, what="the slow step to pass 1 s")
    [row] = [h for h in client.hung_sessions() if h.session_id == held]
    assert row.step == "block" and row.step_deadline is not None and row.running_seconds >= 1
    listed = {s.session_id for s in client.list_sessions(hung_after=600)}
    assert {cancelled, held} <= listed and slow not in listed
    hung_cli = run_cli(client.settings, "sessions", "list", "--hung", "--json")
    hung_rows = json.loads(hung_cli.stdout)["items"]
    assert {cancelled, held} <= {uuid.UUID(row["session_id"]) for row in hung_rows}
    gauges = {family.name: family for family in DatabaseCollector(client.db).collect()}
    assert gauges["resumable_sessions_hung"].samples[0].value >= 2
    wait_until(lambda: client.get(slow).status == "completed", what="the slow session")

    client.cancel(cancelled, actor="test", reason="hung")
    wait_until(lambda: "was cancelled while this worker ran it" in worker.output(), timeout=10)

    worker.signal(signal.SIGTERM)
    started = time.monotonic()
    assert exit_status(worker, 20) == 0, worker.tail(40)
    assert time.monotonic() - started < 10  # not the 120 s the steps would take
    out = worker.output()
    assert f"still blocked in step block of session {cancelled}" in out
    assert f"still blocked in step block of session {held}" in out
    # Said before it waited: only the run whose lease it still held (the
    # cancelled one's was lost), for up to RESUMABLE_MAX_SECONDS_PER_RUN.
    assert (
        "stopping: waiting up to 1 s for 1 step(s) in flight to commit and hand back: "
        f"session {held} in step block for "
    ) in out
    assert "no longer this worker's (cancelled or taken over)" in out
    assert "its lease is released and the session re-enqueued" in out
    assert client.get(cancelled).status == "cancelled"
    # Released for any other worker, without waiting for the lease to expire.
    after = client.session_row(held)
    assert (after.status, after.lease_owner) == ("pending", None)


def test_a_burst_of_stop_signals_still_stops_the_worker(
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """A worker child got SIGTERM twice (from its parent and from the process
    group) and hung for ever: the second handler ran inside the first one's
    Event.set, holding the event's lock, and waited for it. A burst of
    signals must stop a worker as one does."""
    for attempt in range(3):
        worker = start_worker()
        for _ in range(200):
            os.kill(worker.pid, signal.SIGTERM)
        assert exit_status(worker, 15) == 0, (attempt, worker.tail(20))
        assert worker.output().count("received SIGTERM") == 1
