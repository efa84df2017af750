"""Suspend and resume over real processes: uvicorn web, workers, schedulers."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import redis

from resumable.client import Client
from resumable.models.database import Database
from tests.conftest import API_TOKEN, LocalDeployment, wait_until
from tests.signing import signed, signed_headers

AUTH = {"authorization": f"Bearer {API_TOKEN}"}


def _status(client: Client, session_id: uuid.UUID) -> str:
    return client.get(session_id).status


def _callback_url(client: Client, session_id: uuid.UUID) -> str:
    url: str = client.state(session_id)["callback_url"]
    return url


def _count(db: Database, sql: str, *params: object) -> int:
    with db.connection() as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    value = next(iter(row.values()))
    assert isinstance(value, int)
    return value


def test_two_hundred_suspended_sessions_on_one_thread_each_resumed_by_a_signed_post(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    deployment.web()
    deployment.worker(RESUMABLE_WORKER_THREADS="1")
    ids = [client.start("approval", {"n": i}) for i in range(200)]
    # One thread suspended all 200: none holds it while waiting.
    wait_until(
        lambda: client.count_by_status() == {"suspended": 200}, timeout=60, what="200 suspended"
    )

    with httpx.Client(timeout=10) as http:
        for i, session_id in enumerate(ids):
            body, headers = signed({"approved": True, "n": i})
            answer = http.post(_callback_url(client, session_id), content=body, headers=headers)
            assert answer.status_code == 202, answer.text
    wait_until(
        lambda: client.count_by_status() == {"completed": 200}, timeout=60, what="200 completed"
    )
    for i, session_id in enumerate(ids[:10]):
        assert client.get(session_id).result == {
            "kind": "callback",
            "payload": {"approved": True, "n": i},
        }
    assert _count(db, "SELECT count(*) FROM deliveries WHERE status = 'consumed'") == 200


def test_ten_identical_concurrent_deliveries_resume_once(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    deployment.web()
    deployment.worker()
    session_id = client.start("approval", {})
    wait_until(lambda: _status(client, session_id) == "suspended", what="suspension")
    url = _callback_url(client, session_id)
    body, headers = signed({"approved": "once"}, msg_id="msg_same_delivery")
    barrier = threading.Barrier(10)

    def deliver(_: int) -> int:
        with httpx.Client(timeout=10) as http:
            barrier.wait()
            return http.post(url, content=body, headers=headers).status_code

    with ThreadPoolExecutor(10) as pool:
        codes = Counter(pool.map(deliver, range(10)))
    assert codes == {202: 1, 200: 9}
    wait_until(lambda: _status(client, session_id) == "completed", what="completion")
    events = [e.type for e in client.events(session_id)]
    assert events.count("resumed") == 1
    assert events.count("callback_received") == 1
    assert _count(db, "SELECT count(*) FROM deliveries") == 1


def test_callback_posted_while_its_step_is_still_running_is_consumed_once(
    client: Client, db: Database, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.web()
    deployment.worker()
    (tmp_path / "hold").touch()
    session_id = client.start("approval", {"gate_dir": str(tmp_path)})
    wait_until((tmp_path / "callback_url").exists, what="the callback URL")
    url = (tmp_path / "callback_url").read_text()

    body, headers = signed({"early": True})
    answer = httpx.post(url, content=body, headers=headers, timeout=10)
    assert answer.status_code == 202
    assert _status(client, session_id) == "running"  # the step has not returned yet

    (tmp_path / "hold").unlink()
    wait_until(lambda: _status(client, session_id) == "completed", what="completion")
    assert client.get(session_id).result == {"kind": "callback", "payload": {"early": True}}
    events = [e.type for e in client.events(session_id)]
    assert events.count("resumed") == 1
    assert events.count("step_completed") == 2
    assert _count(db, "SELECT count(*) FROM deliveries WHERE status = 'consumed'") == 1


def test_late_callback_after_timeout_is_refused_and_audited(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.web()
    deployment.worker()
    deployment.scheduler()
    session_id = client.start("approval", {"timeout": 1})
    wait_until(lambda: _status(client, session_id) == "completed", what="timeout")
    finished = client.get(session_id)
    assert finished.result == {"kind": "timeout", "payload": None}

    body, headers = signed({"approved": "too late"})
    answer = httpx.post(client.state(session_id)["callback_url"], content=body, headers=headers)
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "wait_closed"
    after = client.get(session_id)
    assert (after.state, after.status, after.seq) == (
        finished.state,
        "completed",
        finished.seq,
    )
    rejected = [e for e in client.events(session_id) if e.type == "callback_rejected"]
    assert len(rejected) == 1
    assert "completed" in rejected[0].payload["reason"]


def test_signal_sent_before_the_wait_is_kept_and_consumed(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.web()
    session_id = client.start("signalled", {"topic": "approve"})
    web_url = deployment.url
    answer = httpx.post(
        f"{web_url}/v1/sessions/{session_id}/signals/approve",
        json={"approved_by": "alice"},
        headers={**AUTH, "Idempotency-Key": "sig-1"},
    )
    assert answer.status_code == 202
    again = httpx.post(
        f"{web_url}/v1/sessions/{session_id}/signals/approve",
        json={"approved_by": "alice"},
        headers={**AUTH, "Idempotency-Key": "sig-1"},
    )
    assert again.status_code == 200
    deployment.worker()
    wait_until(lambda: _status(client, session_id) == "completed", what="completion")
    assert client.get(session_id).result == {
        "kind": "signal",
        "topic": "approve",
        "payload": {"approved_by": "alice"},
    }


def test_timer_and_poll_fire_within_the_poller_interval(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    deployment.worker()
    deployment.scheduler()
    sleeper = client.start("sleeper", {"seconds": 1.0})
    flag = tmp_path / "ready"
    polled = client.start("poller", {"path": str(flag), "every": 0.3})
    timed_out = client.start("signalled", {"topic": "never", "timeout": 1.0})

    wait_until(lambda: _status(client, sleeper) == "completed", timeout=10, what="timer")
    result = client.get(sleeper).result
    assert result["kind"] == "timer"
    # Interval 0.25 s plus a second.
    assert 1.0 <= result["late_by"] < 1.0 + 0.25 + 1.0

    # Not done before the flag exists. Its status at one instant may be
    # suspended, or pending/running while a check runs: only the outcome counts.
    assert _status(client, polled) not in ("completed", "failed")
    assert client.get(polled).result is None
    flag.write_text("done")
    wait_until(lambda: _status(client, polled) == "completed", timeout=5, what="poll")
    assert client.get(polled).result == {"kind": "poll", "payload": "done"}

    wait_until(lambda: _status(client, timed_out) == "completed", timeout=5, what="timeout")
    assert client.get(timed_out).result == {"kind": "timeout", "topic": None, "payload": None}


def test_a_poll_checks_resumed_event_commits_with_the_step_it_wakes(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    # It had a transaction of its own, before the step: a commit more per
    # poll resume than a timer's (benchmarks/bursts.py).
    deployment.worker()
    deployment.scheduler()
    flag = tmp_path / "ready"
    polled = client.start("poller", {"path": str(flag), "every": 0.3})
    wait_until(lambda: _status(client, polled) == "suspended", timeout=10, what="suspension")
    flag.write_text("done")
    wait_until(lambda: _status(client, polled) == "completed", timeout=10, what="poll")
    events = client.events(polled)
    [resumed] = [e for e in events if e.type == "resumed"]
    # Where the scheduler and the receivers put theirs: the position it woke from.
    assert (resumed.seq, resumed.step) == (1, "polled")
    assert resumed.payload == {"by": "poll", "check": "file_ready"}
    [completed] = [e for e in events if e.type == "step_completed" and e.step == "polled"]
    assert completed.seq == 2
    # One transaction: the same now(), and the resumed event first.
    assert resumed.at == completed.at
    assert resumed.event_id < completed.event_id


def test_poll_checks_keep_their_cadence_whatever_the_scheduler_interval(
    client: Client, tmp_path: Path, deployment: LocalDeployment
) -> None:
    # every=1 with a 1 s scheduler interval: each next check used to be due
    # `every` after the check ran, just after the tick that would run it, so
    # checks came every 2 s (found by an outside-in probe).
    deployment.worker()
    deployment.scheduler(RESUMABLE_SCHEDULER_INTERVAL_SECONDS="1")
    polled = client.start("poller", {"path": str(tmp_path / "never"), "every": 1.0})

    def checks() -> int:
        return int((client.session_row(polled).wait or {}).get("polls", 0))

    wait_until(lambda: checks() >= 1, timeout=10, what="the first check")
    first = time.monotonic()
    wait_until(lambda: checks() >= 6, timeout=20, what="five more checks")
    # About 5 s now; 10 s before. A late tick costs one interval once, not
    # every check after it.
    assert time.monotonic() - first < 7.5
    assert _status(client, polled) == "suspended"


def test_two_schedulers_resume_each_due_session_once(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    deployment.scheduler()
    deployment.scheduler()
    deployment.worker()
    ids = [client.start("sleeper", {"seconds": 0.5}) for _ in range(60)]
    wait_until(lambda: client.count_by_status() == {"completed": 60}, timeout=30, what="60 timers")
    resumed = _count(db, "SELECT count(*) FROM audit_events WHERE event_type = 'resumed'")
    assert resumed == 60
    for session_id in ids[:5]:
        assert [c.seq for c in client.checkpoints(session_id)] == [1, 2]


def test_redis_flushed_while_sessions_wait_and_others_are_pending(
    client: Client, redis_client: redis.Redis, deployment: LocalDeployment
) -> None:
    deployment.web()
    worker = deployment.worker()
    waiting = [client.start("approval", {}) for _ in range(10)]
    wait_until(lambda: client.count_by_status() == {"suspended": 10}, what="suspension")
    worker.stop()
    pending = [client.start("five") for _ in range(10)]
    redis_client.flushdb()

    deployment.worker()
    deployment.scheduler()
    with httpx.Client(timeout=10) as http:
        for session_id in waiting:
            body, headers = signed({"ok": True})
            assert (
                http.post(
                    _callback_url(client, session_id), content=body, headers=headers
                ).status_code
                == 202
            )
    wait_until(lambda: client.count_by_status() == {"completed": 20}, timeout=30, what="all 20")
    assert all(
        client.get(s).result == {"kind": "callback", "payload": {"ok": True}} for s in waiting
    )
    assert all(client.get(s).seq == 5 for s in pending)


def test_a_callback_or_a_timer_whichever_comes_first(
    client: Client, deployment: LocalDeployment
) -> None:
    deployment.web()
    deployment.worker()
    deployment.scheduler()
    by_timer = client.start("either", {"timer": 0.5})
    by_callback = client.start("either", {"timer": 3600})
    by_timeout = client.start("either", {"timer": 3600, "callback_timeout": 0.5})
    wait_until(lambda: _status(client, by_callback) == "suspended", what="suspension")
    body, headers = signed({"answer": 42})
    assert (
        httpx.post(_callback_url(client, by_callback), content=body, headers=headers).status_code
        == 202
    )

    def all_completed() -> bool:
        return all(_status(client, s) == "completed" for s in (by_timer, by_callback, by_timeout))

    wait_until(all_completed, what="completion")
    assert client.get(by_timer).result == {"kind": "timer", "payload": None}
    assert client.get(by_callback).result == {"kind": "callback", "payload": {"answer": 42}}
    assert client.get(by_timeout).result == {"kind": "timeout", "payload": None}
    # The timer won: its callback is closed.
    late = httpx.post(_callback_url(client, by_timer), content=body, headers=signed_headers(body))
    assert late.status_code == 409
    assert (
        "ended" in late.json()["error"]["message"] or "completed" in late.json()["error"]["message"]
    )
