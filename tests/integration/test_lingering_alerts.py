"""Alerts for lingering sessions through the operator webhook: once per
session and condition, and a "resolved" alert when it clears; real scheduler
and worker processes, a real alert receiver."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from resumable.client import Client
from resumable.models.database import Database
from resumable.scheduler.jobs import SchedulerJobs
from resumable.settings import Settings
from resumable.webhooks.metrics import Metrics
from tests.conftest import ManagedProcess, wait_until
from tests.integration.test_failures import AlertReceiver


@pytest.fixture
def alerts() -> Iterator[AlertReceiver]:
    with AlertReceiver() as receiver:
        yield receiver


def _lingering(alerts: AlertReceiver, session_id: object) -> list[dict[str, Any]]:
    bodies = [json.loads(body) for _headers, body in alerts.received]
    return [
        body
        for body in bodies
        if body["type"].startswith("resumable.session_lingering")
        and body["data"]["session_id"] == str(session_id)
    ]


def test_an_unserved_session_alerts_once_then_resolves_when_a_worker_serves_it(
    client: Client,
    db: Database,
    alerts: AlertReceiver,
    start_worker: Callable[..., ManagedProcess],
    start_scheduler: Callable[..., ManagedProcess],
) -> None:
    env = {
        "RESUMABLE_ALERT_WEBHOOK_URL": alerts.alerts_url,
        "RESUMABLE_ALERT_UNSERVED_SECONDS": "0",
    }
    session_id = client.start("five")  # no worker loads `five` yet
    start_scheduler(**env)
    wait_until(lambda: _lingering(alerts, session_id), what="the unserved alert")
    [opened] = _lingering(alerts, session_id)
    assert opened["type"] == "resumable.session_lingering"
    assert opened["data"]["condition"] == "unserved"
    assert opened["data"]["agent"] == "five"
    text = generate_latest(Metrics(db).registry).decode()
    assert 'resumable_sessions_lingering{condition="unserved"} 1.0' in text

    start_worker()
    wait_until(lambda: client.get(session_id).status == "completed", what="the session")
    wait_until(lambda: len(_lingering(alerts, session_id)) == 2, what="the resolved alert")
    # The scheduler passed many times (every 0.25 s) while it lingered: one alert.
    opened_again, resolved = _lingering(alerts, session_id)
    assert opened_again == opened
    assert resolved["type"] == "resumable.session_lingering_resolved"
    assert resolved["data"]["condition"] == "unserved"
    assert resolved["data"]["resolved_at"] is not None
    text = generate_latest(Metrics(db).registry).decode()
    assert 'resumable_sessions_lingering{condition="unserved"}' not in text


def test_an_overdue_sleep_alerts_and_resolves_once_the_scheduler_wakes_it(
    client: Client,
    db: Database,
    settings: Settings,
    alerts: AlertReceiver,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    start_worker()
    session_id = client.start("sleeper", {"seconds": 0.2})
    wait_until(lambda: client.get(session_id).status == "suspended", what="the sleep")
    # No scheduler runs: the timer passes and no one wakes the session.
    jobs = SchedulerJobs(
        settings.model_copy(
            update={"alert_webhook_url": alerts.alerts_url, "alert_overdue_seconds": 0.5}
        ),
        db,
        client.broker,
    )
    wait_until(lambda: jobs.lingering() == {"session_lingering": 1}, what="the overdue condition")
    assert jobs.lingering() == {}  # still overdue: nothing new
    assert _alert_kinds(db) == ["session_lingering"]

    jobs.wake_due()
    wait_until(lambda: client.get(session_id).status == "completed", what="the session")
    assert jobs.lingering() == {"session_lingering_resolved": 1}
    assert jobs.lingering() == {}
    assert _alert_kinds(db) == ["session_lingering", "session_lingering_resolved"]
    jobs.deliver_alerts()
    sent = _lingering(alerts, session_id)
    assert [a["data"]["condition"] for a in sent] == ["overdue", "overdue"]
    assert sent[0]["data"]["detail"]["step"] == "woke"


def _alert_kinds(db: Database) -> list[str]:
    with db.connection() as conn:
        rows = conn.execute("SELECT kind FROM alerts ORDER BY id").fetchall()
    return [str(row["kind"]) for row in rows]
