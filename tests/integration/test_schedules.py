"""Schedules on real processes: two schedulers start each due time once, a
scheduler down across due times follows the schedule's catch-up policy,
overlap policies hold while the last session is live, a schedule defined in
code is recorded by the worker that loads its agent, and the run-time
actions (pause, resume, trigger, delete) do what they say."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from resumable import Schedule
from resumable.client import Client
from resumable.errors import (
    ScheduleDefinitionError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    UnknownAgentError,
)
from resumable.models.database import Database
from resumable.schedules import CatchUp
from tests.conftest import LocalDeployment, wait_until

# A scheduler that looks often, so due times every second are handled on time.
FAST = {"RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "0.1"}


def _started(db: Database, name: str) -> list[dict[str, Any]]:
    """The sessions a schedule started for its due times, oldest due first:
    each with its due time and the time of the pass that started it (from
    its `scheduled` event, written in the pass's transaction) and status."""
    with db.connection() as conn:
        rows = conn.execute(
            """
            SELECT s.id, s.status, s.idempotency_key, (e.payload ->> 'due_at')::timestamptz AS due,
                   e.created_at AS pass_at
            FROM sessions s JOIN audit_events e
              ON e.session_id = s.id AND e.event_type = 'scheduled'
            WHERE e.payload ->> 'schedule' = %s AND e.payload ? 'due_at'
            ORDER BY due
            """,
            (name,),
        ).fetchall()
    return [dict(row) for row in rows]


def _announced(deployment: LocalDeployment, db: Database, *modules: str) -> None:
    """A worker that has announced its agents (a schedule needs its agent known)."""
    deployment.worker(*modules)

    def known() -> bool:
        with db.connection() as conn:
            return conn.execute("SELECT 1 FROM agents WHERE name = 'five'").fetchone() is not None

    wait_until(known, what="the worker to announce its agents")


def _consecutive(dues: list[datetime], every: float) -> bool:
    gaps = {round((b - a).total_seconds(), 3) for a, b in itertools.pairwise(dues)}
    return gaps <= {every}


def test_two_schedulers_start_each_due_time_once(
    deployment: LocalDeployment, client: Client, db: Database
) -> None:
    _announced(deployment, db, "tests.agents")
    client.create_schedule(Schedule("every-second", "five", every=1, overlap="allow"))
    deployment.scheduler(**FAST)
    deployment.scheduler(**FAST)
    wait_until(lambda: len(_started(db, "every-second")) >= 4, timeout=30, what="four due times")
    client.pause_schedule("every-second", reason="enough")
    started = _started(db, "every-second")
    dues = [row["due"] for row in started]
    assert len(set(dues)) == len(dues), "a due time started twice"
    assert _consecutive(dues, 1.0), f"a due time was skipped: {dues}"
    keys = {row["idempotency_key"] for row in started}
    assert all(key.startswith("schedule:every-second@") for key in keys)
    wait_until(
        lambda: all(client.get(row["id"]).status == "completed" for row in started),
        what="the scheduled sessions to run",
    )
    info = client.schedule("every-second")
    assert info.paused and info.paused_reason == "enough"
    assert info.started_runs == len(started) and info.skipped_runs == 0


def test_a_scheduler_down_across_due_times_follows_each_catch_up_policy(
    deployment: LocalDeployment, client: Client, db: Database
) -> None:
    _announced(deployment, db, "tests.agents")
    policies: tuple[CatchUp, ...] = ("skip", "latest", "all")
    for catch_up in policies:
        schedule = Schedule(f"catch-up-{catch_up}", "five", every=1, catch_up=catch_up)
        client.create_schedule(dataclasses.replace(schedule, overlap="allow"))
    env = {**FAST, "RESUMABLE_SCHEDULE_GRACE_SECONDS": "2"}
    scheduler = deployment.scheduler(**env)
    for catch_up in policies:
        name = f"catch-up-{catch_up}"
        wait_until(functools.partial(_has_started, db, name, 2), what=f"{name}: two due times")
    scheduler.stop()
    # The first due time nobody handles, of each.
    down_at = {c: client.schedule(f"catch-up-{c}").next_due_at for c in policies}
    # The outage: seven due times pass with no scheduler, so that at least
    # four of them are more than the 2 s grace old when one starts again.
    latest = max(down_at.values())
    wait_until(
        lambda: _database_now(db) > latest + timedelta(seconds=7), timeout=20, what="an outage"
    )
    back_at = _database_now(db)
    deployment.scheduler(**env)
    for catch_up in policies:
        name = f"catch-up-{catch_up}"
        passed = functools.partial(_moved_past, client, name, back_at)
        wait_until(passed, what=f"{name}: a pass")
        # Missed, as the scheduler judges it: due more than the 2 s grace
        # before its first pass after the outage (not before this test's
        # own clock reading, which a busy machine puts seconds earlier).
        first_pass = min(row["pass_at"] for row in _started(db, name) if row["pass_at"] >= back_at)
        missed = [
            row["due"]
            for row in _started(db, name)
            if down_at[catch_up] <= row["due"] < first_pass - timedelta(seconds=2)
        ]
        info = client.schedule(name)
        if catch_up == "skip":
            assert missed == [] and info.skipped_runs >= 4
        elif catch_up == "latest":
            assert len(missed) == 1 and info.skipped_runs >= 3
        else:
            assert len(missed) >= 4 and info.skipped_runs == 0
            assert _consecutive([row["due"] for row in _started(db, name)], 1.0)


def _has_started(db: Database, name: str, count: int) -> bool:
    return len(_started(db, name)) >= count


def _moved_past(client: Client, name: str, moment: datetime) -> bool:
    return client.schedule(name).next_due_at > moment


def _database_now(db: Database) -> datetime:
    with db.connection() as conn:
        row = conn.execute("SELECT now() AS now").fetchone()
    assert row is not None and isinstance(row["now"], datetime)
    return row["now"]


def test_overlap_skip_waits_for_the_live_session_and_queue_starts_one_after_it(
    deployment: LocalDeployment, client: Client, db: Database
) -> None:
    _announced(deployment, db, "tests.agents")
    for overlap in ("skip", "queue"):
        client.create_schedule(
            Schedule(f"one-at-a-time-{overlap}", "signalled", every=1, input={}, overlap=overlap)
        )
    deployment.scheduler(**FAST)
    for overlap in ("skip", "queue"):
        _one_at_a_time(client, db, f"one-at-a-time-{overlap}", queues=overlap == "queue")


def _one_at_a_time(client: Client, db: Database, name: str, *, queues: bool) -> None:
    wait_until(lambda: len(_started(db, name)) == 1, what=f"{name}'s first session")
    first = _started(db, name)[0]["id"]
    wait_until(lambda: client.get(first).status == "suspended", what="it to wait")
    # While it waits, due times come and start nothing (skip counts them;
    # queue keeps the latest).
    wait_until(lambda: _passed_due_times(client, name) >= 2, what=f"{name}'s due times")
    assert len(_started(db, name)) == 1
    queued = client.schedule(name).queued_due_at
    assert (queued is not None) == queues
    client.signal(first, "approve", {"ok": True})
    wait_until(lambda: len(_started(db, name)) >= 2, what=f"{name}'s next session")
    second = _started(db, name)[1]
    if queues:
        assert queued is not None and second["due"] >= queued
    client.pause_schedule(name)


def _passed_due_times(client: Client, name: str) -> int:
    info = client.schedule(name)
    queued = 0
    if info.queued_due_at is not None:
        queued = int((info.next_due_at - info.queued_due_at).total_seconds())
    return info.skipped_runs + queued


def test_a_schedule_in_code_is_recorded_by_its_worker_and_runs(
    deployment: LocalDeployment, client: Client, db: Database
) -> None:
    deployment.worker("tests.scheduled_agents")
    wait_until(lambda: _exists(client, "heartbeat-every-second"), what="the code's schedule")
    info = client.schedule("heartbeat-every-second")
    assert (info.source, info.agent, info.every_seconds, info.overlap) == (
        "code",
        "heartbeat",
        1.0,
        "allow",
    )
    assert info.when == "every 1 s"
    deployment.scheduler(**FAST)
    wait_until(
        lambda: (
            sum(
                client.get(row["id"]).status == "completed"
                for row in _started(db, "heartbeat-every-second")
            )
            >= 2
        ),
        what="two heartbeats run",
    )
    result = client.get(_started(db, "heartbeat-every-second")[0]["id"]).result
    assert result == {"beat": True}
    # Another worker of the same code changes nothing (no churn per start).
    before = client.schedule("heartbeat-every-second")
    deployment.worker("tests.scheduled_agents")
    assert client.schedule("heartbeat-every-second").updated_at == before.updated_at


def _exists(client: Client, name: str) -> bool:
    try:
        client.schedule(name)
    except ScheduleNotFoundError:
        return False
    return True


def test_run_time_actions_and_their_refusals(
    deployment: LocalDeployment, client: Client, db: Database
) -> None:
    with pytest.raises(UnknownAgentError, match="no worker has announced"):
        client.create_schedule(Schedule("early", "five", every=60))
    _announced(deployment, db, "tests.agents")
    hourly = Schedule("hourly", "five", cron="0 * * * *", timezone="Europe/Paris", input={"n": 1})
    created = client.create_schedule(hourly, actor="ops@example.com")
    assert created.created_by == "ops@example.com" and created.source == "api"
    assert created.next_due_at.minute == 0 and created.next_due_at.second == 0
    assert client.create_schedule(hourly) == created  # the same definition: no change
    with pytest.raises(ScheduleExistsError, match="another definition"):
        client.create_schedule(Schedule("hourly", "five", cron="30 * * * *"))
    with pytest.raises(ScheduleDefinitionError, match="not valid"):
        client.create_schedule(Schedule("bad", "five", cron="99 * * * *"))
    with pytest.raises(ScheduleNotFoundError):
        client.schedule("no-such-schedule")
    with pytest.raises(ScheduleNotFoundError):
        client.schedule("a name with spaces")  # no schedule can have it: not found
    for bad in ("", "\x00", "x" * 5000):
        with pytest.raises(ScheduleDefinitionError):
            client.schedule(bad)

    # Trigger: a session now, the due times as they were; even while paused.
    deployment.scheduler(**FAST)
    paused = client.pause_schedule("hourly", reason="holiday", actor="ops@example.com")
    assert paused.paused and paused.paused_by == "ops@example.com"
    session_id = client.trigger_schedule("hourly", actor="ops@example.com")
    assert client.wait(session_id, timeout=30).result is not None
    after = client.schedule("hourly")
    assert after.last_session_id == session_id and after.started_runs == 1
    assert after.next_due_at == created.next_due_at
    events = [e.type for e in client.events(session_id)]
    assert "scheduled" in events

    resumed = client.resume_schedule("hourly", actor="ops@example.com")
    assert not resumed.paused and resumed.paused_reason is None
    assert [s.name for s in client.schedules()] == ["hourly"]
    assert client.schedules(agent="other") == []
    client.delete_schedule("hourly", actor="ops@example.com")
    with pytest.raises(ScheduleNotFoundError):
        client.delete_schedule("hourly")
    assert client.get(session_id).status == "completed"  # its sessions go on


def test_a_due_time_is_started_once_even_when_its_session_key_is_taken(
    deployment: LocalDeployment, client: Client, db: Database
) -> None:
    """The idempotency key refuses a second session for one due time even
    if the schedule's row said otherwise (a restored backup, a hand edit)."""
    _announced(deployment, db, "tests.agents")
    client.create_schedule(Schedule("keyed", "five", every=1, overlap="allow"))
    deployment.scheduler(**FAST)
    wait_until(lambda: len(_started(db, "keyed")) >= 2, what="two due times")
    client.pause_schedule("keyed")
    first_due = _started(db, "keyed")[0]["due"]
    with db.connection() as conn:  # rewind: the first due time is due again
        conn.execute(
            "UPDATE schedules SET next_due_at = %s, paused = false WHERE name = 'keyed'",
            (first_due,),
        )
    wait_until(lambda: client.schedule("keyed").next_due_at > _database_now(db), what="a pass")
    client.pause_schedule("keyed")
    dues = [row["due"] for row in _started(db, "keyed")]
    assert len(dues) == len(set(dues))
    assert all(isinstance(row["id"], uuid.UUID) for row in _started(db, "keyed"))
