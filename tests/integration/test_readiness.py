"""A real `resumable web` while PostgreSQL is unreachable: readiness says so
within a second or two, requests fail fast with 503 and Retry-After, and all
comes back when the database does.

The database is cut with a TCP relay this test owns (tests/relay.py) (the shared server is
never stopped): closing the proxy drops every connection and refuses new ones.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from resumable.client import Client
from resumable.settings import Settings
from resumable.webhooks.database_calls import DATABASE_DEADLINE_SECONDS
from tests.conftest import (
    API_TOKEN,
    LocalDeployment,
    ManagedProcess,
    exit_status,
    free_port,
    wait_until,
)
from tests.relay import Relay, database_target, database_url_via, redis_target, redis_url_via
from tests.signing import signed

AUTH = {"authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture
def start_web_on(deployment: LocalDeployment, web_port: int) -> Callable[..., ManagedProcess]:
    """Start `resumable web` with its own DATABASE_URL (the deployment's pins it)."""

    def start(database_url: str, **env: str) -> ManagedProcess:
        return deployment.start(
            ["web", "--port", str(web_port)],
            "Uvicorn running",
            DATABASE_URL=database_url,
            RESUMABLE_AGENTS="tests.agents",
            **env,
        )

    return start


def _signed_body() -> dict[str, Any]:
    body, headers = signed({"approved": True})
    return {"content": body, "headers": headers}


def _timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = call()
    return answer, time.monotonic() - started


def test_readiness_and_writes_fail_fast_while_the_database_is_down(
    settings: Settings, start_web_on: Callable[..., ManagedProcess], web_port: int
) -> None:
    proxy = Relay(database_target(settings.database_url or "")).open()
    start_web_on(database_url_via(settings.database_url or "", proxy))
    base = f"http://127.0.0.1:{web_port}"
    with httpx.Client(base_url=base, headers=AUTH, timeout=40) as http:
        assert http.get("/readyz").status_code == 200
        created = http.post("/v1/sessions", json={"agent": "five"})
        assert created.status_code == 201, created.text
        session_id = created.json()["session_id"]

        proxy.cut()
        ready, took = _timed(lambda: http.get("/readyz"))
        assert ready.status_code == 503 and took < 2.0, (ready.text, took)
        assert ready.json()["checks"]["database"].startswith("error")
        assert ready.json()["checks"]["broker"] == "ok"
        for request in (
            lambda: http.post("/v1/sessions", json={"agent": "five"}),
            lambda: http.get(f"/v1/sessions/{session_id}"),
            lambda: http.get("/v1/sessions"),
            lambda: http.get("/metrics"),
        ):
            answer, took = _timed(request)
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"] == "5"
            assert answer.json()["error"]["code"] == "database_unavailable"
            assert took < 4.0, took
        ready, took = _timed(lambda: http.get("/readyz"))
        assert ready.status_code == 503 and took < 2.0, took

        proxy.open()
        wait_until(lambda: http.get("/readyz").status_code == 200, what="readiness again")
        again = http.post("/v1/sessions", json={"agent": "five"})
        assert again.status_code == 201, again.text
        assert http.get(f"/v1/sessions/{session_id}").status_code == 200
    proxy.cut()


def test_a_web_started_without_its_database_answers_503_at_once(
    start_web_on: Callable[..., ManagedProcess], web_port: int
) -> None:
    closed = free_port()  # nothing listens there
    start_web_on(f"postgresql://postgres@127.0.0.1:{closed}/resumable")
    with httpx.Client(base_url=f"http://127.0.0.1:{web_port}", headers=AUTH, timeout=40) as http:
        assert http.get("/healthz").status_code == 200
        ready, took = _timed(lambda: http.get("/readyz"))
        assert ready.status_code == 503 and took < 2.0, (ready.text, took)
        created, took = _timed(lambda: http.post("/v1/sessions", json={"agent": "five"}))
        assert created.status_code == 503 and took < 4.0, (created.text, took)
        assert created.headers["retry-after"] == "5"


def test_readiness_answers_in_time_while_the_database_hangs(
    settings: Settings, start_web_on: Callable[..., ManagedProcess], web_port: int
) -> None:
    """A database that takes connections and statements but never answers
    (hung, or behind a stalled proxy): readiness still answers 503 within about
    a second and a half, instead of waiting on the statement for ever."""
    proxy = Relay(database_target(settings.database_url or "")).open()
    start_web_on(database_url_via(settings.database_url or "", proxy))
    base = f"http://127.0.0.1:{web_port}"
    with httpx.Client(base_url=base, headers=AUTH, timeout=40) as http:
        assert http.get("/readyz").status_code == 200
        proxy.stall()
        for _ in range(3):  # each probe on another pooled connection, or a new one
            ready, took = _timed(lambda: http.get("/readyz"))
            assert ready.status_code == 503 and took < 2.5, (ready.text, took)
            checks = ready.json()["checks"]
            assert checks["database"].startswith("error: "), checks  # timed out, or no free
            assert checks["broker"] == "ok"  # connection left (the others hang): PoolTimeout
        proxy.flow()
        wait_until(lambda: http.get("/readyz").status_code == 200, what="readiness again")
    proxy.cut()


def test_requests_answer_503_in_time_while_the_database_hangs(
    settings: Settings, start_web_on: Callable[..., ManagedProcess], web_port: int
) -> None:
    """The README's promise for every route, not only readiness: a database
    that takes statements and never answers makes a request answer 503
    `database_unavailable` within the web process's deadline (10 s), not hang
    until the client gives up; all works again once the database answers."""
    proxy = Relay(database_target(settings.database_url or "")).open()
    # One connection per pool: the callback abandoned at the deadline holds
    # the async pool's only one, so the callback after it proves it let go.
    start_web_on(database_url_via(settings.database_url or "", proxy), RESUMABLE_DB_POOL_SIZE="1")
    base = f"http://127.0.0.1:{web_port}"
    with httpx.Client(base_url=base, headers=AUTH, timeout=40) as http:
        created = http.post("/v1/sessions", json={"agent": "five"})
        assert created.status_code == 201, created.text
        session_id = created.json()["session_id"]
        assert http.get("/v1/sessions").status_code == 200

        body, headers = signed({"approved": True})
        callback = f"/v1/callbacks/{session_id}-no-such-callback"  # on the async pool
        assert http.post(callback, content=body, headers=headers).status_code == 404

        proxy.stall()
        for request in (
            lambda: http.get(f"/v1/sessions/{session_id}"),
            lambda: http.post("/v1/sessions", json={"agent": "five"}),
            lambda: http.get("/metrics"),
            lambda: http.post(callback, content=body, headers=headers),
        ):
            answer, took = _timed(request)
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "database_unavailable"
            assert answer.headers["retry-after"] == "5"
            assert took < DATABASE_DEADLINE_SECONDS + 2, took

        proxy.flow()
        wait_until(lambda: http.get("/readyz").status_code == 200, what="readiness again")
        assert http.get(f"/v1/sessions/{session_id}").status_code == 200
        again = http.post("/v1/sessions", json={"agent": "five"})
        assert again.status_code == 201, again.text
        # The async pool let go of the connections the hung server held.
        assert http.post(callback, content=body, headers=headers).status_code == 404
    proxy.cut()


def test_sigterm_stops_a_web_whose_requests_the_hung_database_never_answered(
    settings: Settings, start_web_on: Callable[..., ManagedProcess], web_port: int
) -> None:
    """A request abandoned at the deadline leaves a thread waiting on the hung
    database; a SIGTERM must still stop the web process (in one line), not
    leave it running for as long as the database hangs."""
    proxy = Relay(database_target(settings.database_url or "")).open()
    web = start_web_on(database_url_via(settings.database_url or "", proxy))
    with httpx.Client(base_url=f"http://127.0.0.1:{web_port}", headers=AUTH, timeout=40) as http:
        assert http.get("/v1/sessions").status_code == 200
        proxy.stall()
        assert http.get("/v1/sessions").status_code == 503
        # And a callback's query on the async pool, cancelled in the background.
        assert http.post("/v1/callbacks/tok-none", **_signed_body()).status_code == 503
    web.signal(signal.SIGTERM)
    try:
        assert exit_status(web, timeout=15) == 0
        assert "exiting without 1 database call(s) the database never answered" in web.output()
    finally:
        proxy.cut()


@pytest.mark.redis_broker
def test_callbacks_and_signals_answer_202_at_once_while_redis_stalls_and_all_still_run(
    settings: Settings,
    client: Client,
    deployment: LocalDeployment,
    start_web_on: Callable[..., ManagedProcess],
    web_port: int,
) -> None:
    """The callback route runs on the event loop and hands the woken session's
    message to a sender, and the signal route's database thread hands it to
    the same sender: a Redis that takes commands and never answers holds
    neither route's 202 nor any other request of the process (nor a session
    row). The deliveries commit, their sessions are pending, and the
    scheduler's reconciler sends the messages the stalled sends lost."""
    deployment.worker()
    sessions = [client.start("approval", {}) for _ in range(3)]
    signalled = [client.start("signalled", {"topic": "go"}) for _ in range(2)]
    wait_until(
        lambda: all(client.get(s).status == "suspended" for s in signalled), what="suspensions"
    )
    wait_until(
        lambda: all(client.get(s).status == "suspended" for s in sessions), what="suspensions"
    )
    paths = [urlsplit(client.state(s)["callback_url"]).path for s in sessions]
    relay = Relay(redis_target(settings.redis_url or "")).open()
    start_web_on(
        settings.database_url or "", REDIS_URL=redis_url_via(settings.redis_url or "", relay)
    )
    base = f"http://127.0.0.1:{web_port}"
    with httpx.Client(base_url=base, timeout=40) as http:
        assert http.get("/readyz").status_code == 200  # the web's Redis connection is open
        relay.stall()
        for path in paths:  # the first send stalls the sender; the others queue behind it
            answer, took = _timed(functools.partial(http.post, path, **_signed_body()))
            assert answer.status_code == 202, answer.text
            assert took < 2.0, took
        for session_id in signalled:
            signal = f"/v1/sessions/{session_id}/signals/go"
            answer, took = _timed(
                functools.partial(http.post, signal, json={"ok": 1}, headers=AUTH)
            )
            assert answer.status_code == 202, answer.text
            assert took < 2.0, took
        healthy, took = _timed(lambda: http.get("/healthz"))
        assert healthy.status_code == 200 and took < 1.0, took
        for session_id in [*sessions, *signalled]:  # stored and woken; messages lost
            assert client.get(session_id).status == "pending"
    relay.cut()  # not flow(): the stalled sends are dropped, never delivered late
    deployment.scheduler()
    wait_until(
        lambda: all(client.get(s).status == "completed" for s in [*sessions, *signalled]),
        timeout=60,
        what="the reconciler's re-sends and the resumed runs",
    )
