"""A failed child whose parent handles the failure pages no one.

Under ``Children(..., on_failure="inform")`` a child that fails for good is
reported to its waiting parent; the parent's wake discards the child's dead
letter (by ``session:<parent>``) and cancels its alert, which is held back
until then. A parent that does not handle it (``on_failure="wait"``, or a
wait that ended otherwise) leaves the dead letter open, and the alert goes
out. Real worker and scheduler processes, a real alert receiver.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from resumable.client import Client
from resumable.models.database import Database
from resumable.webhooks.metrics import Metrics
from tests.conftest import LocalDeployment, wait_until
from tests.integration.test_failures import AlertReceiver

AGENTS = "tests.coordination_agents"


@pytest.fixture
def alerts() -> Iterator[AlertReceiver]:
    with AlertReceiver() as receiver:
        yield receiver


@pytest.fixture
def flag(tmp_path: Path) -> Path:
    """Child 0 (and a sentinel) fail while this file exists."""
    path = tmp_path / "fail"
    path.touch()
    return path


def _start(deployment: LocalDeployment, alerts: AlertReceiver) -> None:
    env = {"RESUMABLE_ALERT_WEBHOOK_URL": alerts.alerts_url}
    deployment.worker(AGENTS, **env)
    deployment.scheduler(**env)


def _alerted(alerts: AlertReceiver) -> set[str]:
    """The sessions an alert was received for."""
    return {json.loads(body)["data"]["session_id"] for _headers, body in alerts.received}


def _failed_child(client: Client, parent: uuid.UUID, children: int) -> uuid.UUID:
    def settled() -> list[uuid.UUID] | None:
        kids = client.page_sessions(parent=parent).items
        if len(kids) < children or {k.status for k in kids} - {"failed", "suspended", "completed"}:
            return None
        return [k.session_id for k in kids if k.status == "failed"] or None

    failed: list[uuid.UUID] = wait_until(settled, what="child 0 failed and the others settled")
    [child] = failed
    return child


def _alerts_after_everything_before(client: Client, alerts: AlertReceiver, flag: Path) -> uuid.UUID:
    """A parentless session that fails now: once its alert arrives, every
    alert written before it that was not held back arrived too (they are
    taken and sent in the order they were written)."""
    sentinel = client.start("researcher", {"i": 0, "fail_while": str(flag)})
    wait_until(lambda: str(sentinel) in _alerted(alerts), what="the sentinel's alert")
    return sentinel


def _alert_statuses(db: Database, session_id: uuid.UUID) -> list[str]:
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT status FROM alerts WHERE session_id = %s ORDER BY id", [session_id]
        ).fetchall()
    return [str(row["status"]) for row in rows]


def test_a_failure_the_parent_handles_discards_the_dead_letter_and_pages_no_one(
    client: Client,
    db: Database,
    alerts: AlertReceiver,
    flag: Path,
    deployment: LocalDeployment,
) -> None:
    _start(deployment, alerts)
    parent = client.start(
        "planner", {"children": 3, "child": {"fail_while": str(flag), "wait_signal": True}}
    )
    child = _failed_child(client, parent, 3)
    [letter] = [d for d in client.dead_letters().items if d.session_id == child]

    # Failed and dead-lettered, its alert due, its parent not yet woken (the
    # others wait for a signal): the alert is held, not sent.
    _alerts_after_everything_before(client, alerts, flag)
    assert str(child) not in _alerted(alerts)
    assert _alert_statuses(db, child) == ["pending"]
    assert client.dead_letter(letter.dead_letter_id).status == "open"
    # Held, not undelivered: the "alerts not reaching the webhook" rule stays
    # quiet (once the sentinel's alert, received, is marked sent).
    wait_until(
        lambda: "resumable_alerts_pending 0.0" in generate_latest(Metrics(db).registry).decode(),
        what="no undelivered alert",
    )

    for kid in client.page_sessions(parent=parent).items:
        if kid.status == "suspended":
            client.signal(kid.session_id, "go")
    wait_until(lambda: client.get(parent).status == "completed", what="the parent")
    assert client.get(parent).result == {"results": 2, "failures": ["failed"], "sum": 3}

    handled = client.dead_letter(letter.dead_letter_id)
    assert handled.status == "discarded"
    assert handled.resolved_by == f"session:{parent}"
    assert handled.resolution == f'handled by its parent session {parent} (on_failure="inform")'
    [event] = [e for e in client.events(child) if e.type == "dead_letter_discarded"]
    assert event.payload["by"] == f"session:{parent}"
    assert event.payload["parent_id"] == str(parent)
    assert _alert_statuses(db, child) == ["cancelled"]

    _alerts_after_everything_before(client, alerts, flag)
    assert str(child) not in _alerted(alerts)
    assert child not in {d.session_id for d in client.dead_letters().items}


def test_a_failure_the_parent_leaves_to_operators_stays_open_and_pages(
    client: Client,
    db: Database,
    alerts: AlertReceiver,
    flag: Path,
    deployment: LocalDeployment,
) -> None:
    _start(deployment, alerts)
    parent = client.start(
        "planner", {"children": 2, "on_failure": "wait", "child": {"fail_while": str(flag)}}
    )
    child = _failed_child(client, parent, 2)
    wait_until(lambda: str(child) in _alerted(alerts), what="the child's alert")
    # The scheduler marks the alert sent once the receiver's answer is back,
    # a moment after the receiver has it.
    wait_until(lambda: _alert_statuses(db, child) == ["sent"], what="the alert marked sent")
    [letter] = [d for d in client.dead_letters().items if d.session_id == child]
    assert letter.status == "open"
    assert client.get(parent).status == "suspended"  # it waits for an operator's retry


def test_a_held_alert_goes_out_once_the_parent_stops_waiting_without_it(
    client: Client,
    db: Database,
    alerts: AlertReceiver,
    flag: Path,
    deployment: LocalDeployment,
) -> None:
    """The parent's wait times out before child 0's failure reached it: no
    one handled the failure, so its dead letter stays open and pages."""
    _start(deployment, alerts)
    parent = client.start(
        "planner",
        {"children": 2, "timeout": 2, "child": {"fail_while": str(flag), "wait_signal": True}},
    )
    child = _failed_child(client, parent, 2)
    wait_until(lambda: client.get(parent).status == "completed", what="the parent's timeout")
    assert client.get(parent).result == {"timed_out": True}
    wait_until(lambda: str(child) in _alerted(alerts), what="the child's alert")
    [letter] = [d for d in client.dead_letters().items if d.session_id == child]
    assert letter.status == "open"
    wait_until(lambda: _alert_statuses(db, child) == ["sent"], what="the alert marked sent")
