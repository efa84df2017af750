"""The scheduler through a database outage: one line when PostgreSQL stops
answering, quiet backoff, one line when it answers again, and work resumes.

The scheduler is a real process; PostgreSQL is the test server, reached
through a TCP relay (tests/relay.py) the test opens and cuts (a closed port first).
"""

from __future__ import annotations

import time

import pytest
import redis

from resumable.broker.redis import REDIS_TIMEOUT_SECONDS
from resumable.client import Client
from resumable.settings import Settings
from tests.conftest import LocalDeployment, ManagedProcess, wait_until
from tests.relay import Relay, database_target, database_url_via, redis_target, redis_url_via


def _log_lines(process: ManagedProcess) -> list[str]:
    return [line for line in process.output().splitlines() if line.strip()]


@pytest.mark.redis_broker
def test_scheduler_reports_an_outage_once_backs_off_and_resumes(
    settings: Settings,
    client: Client,
    redis_client: redis.Redis,
    deployment: LocalDeployment,
) -> None:
    relay = Relay(database_target(settings.database_url or ""))
    relayed = settings.model_copy(
        update={"database_url": database_url_via(settings.database_url or "", relay)}
    )
    scheduler = deployment.start(
        ["scheduler"],
        "scheduler started",
        DATABASE_URL=relayed.database_url or "",
        REDIS_URL=relayed.redis_url or "",
    )
    try:
        wait_until(
            lambda: "database unreachable at 127.0.0.1" in scheduler.output(),
            timeout=15,
            what="the outage line",
        )
        # A few seconds of outage at a 0.25 s interval: without backoff every
        # job would fail (and log a traceback) four times a second.
        time.sleep(4)
        lines = _log_lines(scheduler)
        assert len(lines) == 2, "\n".join(lines)
        assert "Connection refused; retrying" in lines[1]

        session_id = client.start("five")
        redis_client.flushdb()  # its message is lost: only the reconciler can bring it back
        relay.open()
        wait_until(
            lambda: "database reachable again" in scheduler.output(),
            timeout=20,
            what="the recovery line",
        )
        wait_until(
            lambda: redis_client.keys("resumable:*"),
            timeout=20,
            what="the reconciler to re-enqueue the session",
        )
        assert client.get(session_id).status == "pending"
        lines = _log_lines(scheduler)
        assert "reachable again at 127.0.0.1" in lines[2], "\n".join(lines)
        assert not [line for line in lines if "Traceback" in line or "ERROR" in line], lines
    finally:
        scheduler.stop()
        relay.cut()


@pytest.mark.redis_broker
def test_scheduler_reports_a_redis_outage_once_and_resumes(
    settings: Settings,
    client: Client,
    redis_client: redis.Redis,
    deployment: LocalDeployment,
) -> None:
    relay = Relay(redis_target(settings.redis_url or ""))
    relayed = settings.model_copy(
        update={"redis_url": redis_url_via(settings.redis_url or "", relay)}
    )
    # A pending session whose message is lost: the reconciler must send one, on Redis.
    session_id = client.start("five")
    redis_client.flushdb()
    scheduler = deployment.start(
        ["scheduler"],
        "scheduler started",
        DATABASE_URL=relayed.database_url or "",
        REDIS_URL=relayed.redis_url or "",
    )
    try:
        wait_until(
            lambda: "redis unreachable at 127.0.0.1" in scheduler.output(),
            timeout=15,
            what="the outage line",
        )
        time.sleep(3)  # the measurement window: nothing more is said while it is down
        lines = _log_lines(scheduler)
        assert len(lines) == 2, "\n".join(lines)
        assert "Connection refused" in lines[1] and "retrying" in lines[1]

        relay.open()
        wait_until(
            lambda: "redis reachable again" in scheduler.output(),
            timeout=20,
            what="the recovery line",
        )
        wait_until(
            lambda: redis_client.keys("resumable:*"),
            timeout=20,
            what="the reconciler to re-enqueue the session",
        )
        assert client.get(session_id).status == "pending"
        lines = _log_lines(scheduler)
        assert not [line for line in lines if "Traceback" in line or "ERROR" in line], lines
    finally:
        scheduler.stop()
        relay.cut()


@pytest.mark.redis_broker
def test_a_worker_says_a_stalled_redis_in_one_line_and_runs_again_once_it_answers(
    settings: Settings, client: Client, deployment: LocalDeployment
) -> None:
    """Redis takes connections and answers nothing: the consumer's fetch times
    out, which is said as a lost connection (one line, no traceback, where
    dramatiq logged its "unexpected error" with one), and it fetches again once
    Redis answers."""
    relay = Relay(redis_target(settings.redis_url or "")).open()
    worker = deployment.worker(REDIS_URL=redis_url_via(settings.redis_url or "", relay))
    try:
        relay.stall()
        wait_until(
            lambda: "Consumer encountered a connection error" in worker.output(),
            timeout=REDIS_TIMEOUT_SECONDS * 4,
            what="the stall to be said",
        )
        relay.flow()
        session_id = client.start("five")
        wait_until(
            lambda: client.get(session_id).status == "completed",
            timeout=30,
            what="the session to run once Redis answers",
        )
        assert "Traceback" not in worker.output(), worker.output()
    finally:
        relay.flow()
        worker.stop()
        relay.cut()
