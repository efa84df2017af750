"""Retries, sagas and the dead-letter queue on real worker processes."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.dev.fake_server import FakeServer, Reply, Request
from resumable.errors import SessionStateError
from resumable.models.database import Database
from tests.conftest import API_TOKEN, ManagedProcess, run_cli, wait_until
from tests.fake_api import FakeAPI

ALERT_SECRET = "whsec_" + "YWxlcnQtc2VjcmV0LWZvci10ZXN0cy0xMjM0NTY="


def _finished(client: Client, session_id: uuid.UUID) -> str:
    status = client.get(session_id).status
    return status if status in {"completed", "failed"} else ""


def _events(client: Client, session_id: uuid.UUID, kind: str) -> list[Any]:
    return [e for e in client.events(session_id) if e.type == kind]


def _dead_letters(db: Database, session_id: uuid.UUID) -> list[dict[str, Any]]:
    with db.connection() as conn:
        return conn.execute(
            "SELECT * FROM dead_letters WHERE session_id = %s ORDER BY id", (session_id,)
        ).fetchall()


def test_transient_failures_are_retried_with_backoff_then_succeed(
    client: Client,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
) -> None:
    start_worker()
    start_scheduler()
    with FakeAPI() as api:
        session_id = client.start(
            "flaky", {"api": api.url, "counter": str(tmp_path / "n"), "fail_times": 2}
        )
        assert wait_until(lambda: _finished(client, session_id)) == "completed"
    assert client.get(session_id).result["tries"] == 3
    events = client.events(session_id)
    retries = [e for e in events if e.type == "retry_scheduled"]
    # Each retry starts with a fresh claim (by its delayed message or the scheduler).
    starts = [e for e in events if e.type in {"retry_started", "run_started"}][1:]
    assert [r.payload["attempt"] for r in retries] == [1, 2]
    for scheduled, started in zip(retries, starts, strict=True):
        delay = scheduled.payload["delay"]
        assert 0.3 <= delay <= 0.6
        waited = (started.at - scheduled.at).total_seconds()
        assert delay - 0.05 <= waited <= delay + 1.5, (delay, waited)
        assert "Traceback" in scheduled.payload["traceback"]
    # The charge was made on the first attempt and replayed from the cache after.
    assert api.total_calls() == 1


def test_permanent_error_goes_straight_to_the_dead_letter_queue(
    client: Client, db: Database, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    with FakeAPI() as api:
        session_id = client.start(
            "flaky", {"api": api.url, "counter": str(tmp_path / "n"), "permanent": True}
        )
        assert wait_until(lambda: _finished(client, session_id)) == "failed"
    assert _events(client, session_id, "retry_scheduled") == []
    [letter] = _dead_letters(db, session_id)
    assert (letter["error_type"], letter["error_message"]) == ("PermanentError", "card declined")
    assert (letter["attempts"], letter["compensation"], letter["status"]) == (1, "none", "open")


def test_exhausted_attempts_are_dead_lettered_with_the_last_error(
    client: Client, db: Database, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    with FakeAPI() as api:
        session_id = client.start(
            "flaky", {"api": api.url, "counter": str(tmp_path / "n"), "always": True}
        )
        assert wait_until(lambda: _finished(client, session_id), timeout=30) == "failed"
        assert api.total_calls() == 1
    assert len(_events(client, session_id, "retry_scheduled")) == 4
    [letter] = _dead_letters(db, session_id)
    assert letter["attempts"] == 5
    assert letter["error_message"] == "upstream down"
    assert "raise TransientError" in letter["traceback"]
    error = client.get(session_id).error
    assert error is not None and error.type == "TransientError"


def test_retry_after_from_a_rate_limited_api_is_honoured(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    with FakeAPI(rate_limited=1, retry_after=2) as api:
        session_id = client.start("rate_limits", {"api": api.url})
        assert wait_until(lambda: _finished(client, session_id), timeout=20) == "completed"
        first, second = api.arrivals
    # The policy alone would retry within 0.2 s; the server asked for 2 s.
    assert second - first >= 2.0
    [scheduled] = _events(client, session_id, "retry_scheduled")
    assert scheduled.payload["delay"] >= 2.0


def test_a_step_past_its_time_limit_is_retried(
    client: Client, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    session_id = client.start("slow", {"counter": str(tmp_path / "n")})
    assert wait_until(lambda: _finished(client, session_id), timeout=20) == "completed"
    assert client.get(session_id).result == {"tries": 2}
    [scheduled] = _events(client, session_id, "retry_scheduled")
    assert scheduled.payload["type"] == "StepTimeoutError"


def test_saga_compensates_in_reverse_order_once_each(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    with FakeAPI() as api:
        session_id = client.start("saga", {"api": api.url})
        assert wait_until(lambda: _finished(client, session_id)) == "failed"
        order = [(path, body["what"]) for path, body in api.order]
    assert order == [
        ("/book", "flight"),
        ("/book", "hotel"),
        ("/book", "card"),
        ("/undo", "card"),
        ("/undo", "hotel"),
        ("/undo", "flight"),
    ]
    [letter] = _dead_letters(db, session_id)
    assert (letter["compensation"], letter["error_type"]) == ("completed", "PermanentError")
    assert len(_events(client, session_id, "compensation_completed")) == 3


def test_saga_survives_a_worker_killed_while_compensating(
    client: Client,
    db: Database,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
    reconciler: None,
) -> None:
    (tmp_path / "hold").touch()
    victim = start_worker()
    with FakeAPI() as api:
        session_id = client.start("saga", {"api": api.url, "gate_dir": str(tmp_path)})
        wait_until((tmp_path / "entered-undo-hotel").exists, what="the hotel compensation")
        assert client.get(session_id).status == "compensating"
        victim.kill()
        (tmp_path / "hold").unlink()
        start_worker()
        assert wait_until(lambda: _finished(client, session_id), timeout=30) == "failed"
        undone = [body["what"] for path, body in api.order if path == "/undo"]
        undo_calls = {key: n for key, n in api.calls.items() if key.endswith(":compensate")}
    assert undone == ["card", "hotel", "flight"]
    # The hotel's undo ran again after the kill with the same key (deduped by the
    # API); the card's, recorded before the kill, did not run again.
    assert sorted(undo_calls.values()) == [1, 1, 2]
    assert _events(client, session_id, "compensation_resumed")
    [letter] = _dead_letters(db, session_id)
    assert letter["compensation"] == "completed"


def test_a_compensating_session_cannot_be_cancelled_and_its_saga_runs_to_the_end(
    client: Client,
    db: Database,
    app: Starlette,
    tmp_path: Path,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """A cancel mid-saga ended the session `cancelled`: the older calls were
    never undone, the one in flight stayed `started`, and no dead letter told
    anyone. It failed for good already; the saga finishes what it began."""
    (tmp_path / "hold").touch()
    start_worker()
    with FakeAPI() as api, TestClient(app) as web:
        session_id = client.start("saga", {"api": api.url, "gate_dir": str(tmp_path)})
        wait_until((tmp_path / "entered-undo-hotel").exists, what="the hotel compensation")
        assert client.get(session_id).status == "compensating"
        with pytest.raises(SessionStateError, match="compensating"):
            client.cancel(session_id, actor="ops", reason="changed my mind")
        answer = web.post(
            f"/v1/sessions/{session_id}/cancel",
            json={"reason": "changed my mind"},
            headers={"authorization": f"Bearer {API_TOKEN}"},
        )
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "invalid_session_state"
        assert client.get(session_id).status == "compensating"
        (tmp_path / "hold").unlink()
        assert wait_until(lambda: _finished(client, session_id), timeout=30) == "failed"
        undone = [body["what"] for path, body in api.order if path == "/undo"]
    assert undone == ["card", "hotel", "flight"]
    assert not _events(client, session_id, "session_cancelled")
    [letter] = _dead_letters(db, session_id)
    assert letter["compensation"] == "completed"


class AlertReceiver(FakeServer):
    """A real HTTP server standing in for the operator's alert webhook."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.alerts_url = f"{self.url}/alerts"

    def handle(self, request: Request) -> Reply:
        self.received.append((request.headers, request.body))
        return Reply(204)


@pytest.fixture
def alerts() -> Iterator[AlertReceiver]:
    with AlertReceiver() as receiver:
        yield receiver


def test_a_compensation_that_always_fails_stops_the_saga_and_alerts(
    client: Client,
    db: Database,
    alerts: AlertReceiver,
    start_worker: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
) -> None:
    env = {
        "RESUMABLE_ALERT_WEBHOOK_URL": alerts.alerts_url,
        "RESUMABLE_ALERT_WEBHOOK_SECRET": ALERT_SECRET,
    }
    start_worker(**env)
    start_scheduler(**env)
    with FakeAPI() as api:
        session_id = client.start("saga", {"api": api.url, "undo_fails": True})
        assert wait_until(lambda: _finished(client, session_id), timeout=30) == "failed"
        undone = [body["what"] for path, body in api.order if path == "/undo"]
    assert undone == ["card", "hotel"]
    [letter] = _dead_letters(db, session_id)
    assert letter["compensation"] == "failed"
    assert "manual intervention" in letter["compensation_error"]["message"]
    assert len(_events(client, session_id, "compensation_retry_scheduled")) == 2
    assert len(_events(client, session_id, "compensation_gave_up")) == 1

    wait_until(lambda: alerts.received, timeout=10, what="the alert")
    headers, body = alerts.received[0]
    Webhook(ALERT_SECRET).verify(body, headers)  # raises if the signature is wrong
    alert = json.loads(body)
    assert alert["type"] == "resumable.compensation_failed"
    assert alert["data"]["session_id"] == str(session_id)
    assert alert["data"]["dead_letter_id"] == letter["id"]


def _dlq(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(client.settings, "dlq", *args)


def test_drain_retries_fifty_fixed_sessions_and_discard_records_the_reason(
    client: Client, db: Database, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()
    flag = tmp_path / "flag"
    ids = [client.start("fragile", {"flag": str(flag)}) for _ in range(52)]
    wait_until(lambda: client.count_by_status() == {"failed": 52}, timeout=60, what="52 failed")

    listed = json.loads(_dlq(client, "list", "--json", "--limit", "100").stdout)["items"]
    assert len(listed) == 52
    to_discard = [d["dead_letter_id"] for d in listed[:2]]
    for dead_letter_id in to_discard:
        out = _dlq(client, "discard", str(dead_letter_id), "--reason", "duplicate order")
        assert out.returncode == 0, out.stdout + out.stderr
    again = _dlq(client, "discard", str(to_discard[0]), "--reason", "twice")
    assert again.returncode == 1 and "already discarded" in again.stderr

    dry = json.loads(_dlq(client, "drain", "--action", "retry", "--dry-run", "--json").stdout)
    assert len(dry["matched"]) == 50 and dry["done"] == []
    assert client.count_by_status() == {"failed": 52}

    flag.touch()  # the cause is fixed
    started = time.monotonic()
    out = _dlq(client, "drain", "--action", "retry", "--rate", "100", "--reason", "flag fixed")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "retry: 50 done, 0 failed" in out.stdout
    assert time.monotonic() - started >= 49 / 100  # the rate limit held
    wait_until(
        lambda: client.count_by_status() == {"completed": 50, "failed": 2},
        timeout=60,
        what="50 retried sessions",
    )
    with db.connection() as conn:
        statuses = conn.execute(
            "SELECT status, count(*) AS n FROM dead_letters GROUP BY status ORDER BY status"
        ).fetchall()
        discarded = conn.execute(
            "SELECT resolution, resolved_by FROM dead_letters WHERE status = 'discarded'"
        ).fetchall()
    assert [(r["status"], r["n"]) for r in statuses] == [("discarded", 2), ("retried", 50)]
    assert {r["resolution"] for r in discarded} == {"duplicate order"}
    assert all(str(r["resolved_by"]).startswith("cli:") for r in discarded)
    retried = [e for s in ids for e in _events(client, s, "dead_letter_retried")]
    assert len(retried) == 50 and retried[0].payload["reason"] == "flag fixed"


def test_a_poison_session_does_not_delay_healthy_ones(
    client: Client, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker(RESUMABLE_WORKER_THREADS="2")
    with FakeAPI() as api:
        poison = client.start(
            "flaky", {"api": api.url, "counter": str(tmp_path / "n"), "always": True}
        )
        wait_until(lambda: _events(client, poison, "retry_scheduled"), what="the first retry")
        started = time.monotonic()
        healthy = [client.start("five") for _ in range(30)]
        wait_until(
            lambda: all(client.get(s).status == "completed" for s in healthy),
            timeout=20,
            what="the healthy sessions",
        )
        elapsed = time.monotonic() - started
        assert client.get(poison).status in {"retrying", "pending", "running"}
    # Thirty 5-step sessions on two threads while the poison session keeps failing.
    assert elapsed < 10


def test_a_step_failing_after_its_session_was_cancelled_is_not_reported_as_a_dead_letter(
    client: Client, db: Database, tmp_path: Path, start_worker: Callable[..., ManagedProcess]
) -> None:
    """`step_failed_permanently` means a new dead letter: a step that fails
    once its session was cancelled makes none, so it must not say so."""
    worker = start_worker()
    (tmp_path / "hold").touch()
    session_id = client.start("late_failer", {"gate_dir": str(tmp_path)})
    wait_until(lambda: any(tmp_path.glob("entered-*")), what="the step to start")
    client.cancel(session_id, actor="test", reason="changed my mind")
    (tmp_path / "hold").unlink()
    wait_until(lambda: "the failure is not recorded" in worker.output(), what="the refused failure")
    assert "failed for good" not in worker.output()
    assert client.get(session_id).status == "cancelled"
    assert _dead_letters(db, session_id) == []


UNRULY = {
    # how the step fails -> (attempts made, the message recorded)
    "nul": (2, "broke at \\u0000 with \\ud800 in its text"),
    "unprintable": (2, "<_UnprintableError whose str() raised>"),
    "exit": (1, "3"),
    "interrupt": (1, ""),
    "custom": (1, "not an Exception"),
}


def test_a_step_failing_in_any_way_python_allows_is_dead_lettered_once(
    client: Client, db: Database, start_worker: Callable[..., ManagedProcess]
) -> None:
    """A message PostgreSQL cannot store, a ``__str__`` that raises, and the
    BaseExceptions (SystemExit, KeyboardInterrupt, one of the step's own)
    are failures like any other, in sync and async steps: retried or dead
    lettered, each tool call made once, the worker and its loop unharmed."""
    worker = start_worker()
    with FakeAPI() as api:
        ids = {
            (how, is_async): client.start("unruly", {"api": api.url, "how": how, "async": is_async})
            for how in UNRULY
            for is_async in (False, True)
        }
        wait_until(
            lambda: all(_finished(client, s) == "failed" for s in ids.values()),
            timeout=30,
            what="every unruly session to fail for good",
        )
        # One charge per session: a retry replays the recorded call.
        assert api.total_calls() == api.effect_count() == len(ids)
        for (how, _), session_id in ids.items():
            attempts, message = UNRULY[how]
            [letter] = _dead_letters(db, session_id)
            assert (letter["attempts"], letter["error_message"]) == (attempts, message), how
        # The worker survived them all, its event loop included.
        assert not worker.exited(), worker.tail(40)
        after = client.start("unruly", {"api": api.url, "how": "exit", "async": True})
        assert wait_until(lambda: _finished(client, after), timeout=15) == "failed"
