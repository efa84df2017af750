"""The scheduler's pass and the code's schedules against the real database,
without processes: what a pass selects and leaves alone, what it does with a
row it cannot handle, and how workers of several versions record the
schedule their code defines."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from resumable import Agent, AgentRegistry, Complete, Schedule, StepContext
from resumable.client import Client
from resumable.errors import AgentDefinitionError
from resumable.models import agent_queries, schedule_queries
from resumable.models.database import Database
from resumable.services.schedules import DUE_BATCH, Schedules
from resumable.settings import Settings


@pytest.fixture
def schedules(settings: Settings, db: Database) -> Schedules:
    with db.connection() as conn:
        agent_queries.register_agent(conn, "five", steps=["one"], checks=[])
    return Schedules(settings, db, None)


def _session(client: Client, status: str) -> uuid.UUID:
    session_id = client.start("five", {})
    with client.db.connection() as conn:
        conn.execute("UPDATE sessions SET status = %s WHERE id = %s", (status, session_id))
    return session_id


def test_queued_runs_behind_live_sessions_are_not_picked_up_pass_after_pass(
    schedules: Schedules, client: Client, db: Database
) -> None:
    """More than a batch of `overlap="queue"` schedules whose sessions wait
    for people: a pass selected them all again and again and never ended."""
    live = _session(client, "suspended")
    for n in range(DUE_BATCH + 10):
        schedules.create(Schedule(f"q{n:03}", "five", every=3600, overlap="queue"), actor="t")
    with db.connection() as conn:
        conn.execute(
            "UPDATE schedules SET last_session_id = %s, queued_due_at = now() - interval '1 s'",
            (live,),
        )
    done = schedules.start_due()
    assert (done.schedules, done.started) == (0, [])
    # Once the live session ends, the queued runs start, all of them, in one pass.
    with db.connection() as conn:
        conn.execute("UPDATE sessions SET status = 'completed' WHERE id = %s", (live,))
    done = schedules.start_due()
    assert len(done.started) == DUE_BATCH + 10
    assert schedules.start_due().schedules == 0


def test_a_row_that_cannot_be_handled_is_paused_and_the_others_go_on(
    schedules: Schedules, db: Database
) -> None:
    for name in ("broken", "fine"):
        schedules.create(Schedule(name, "five", every=60, overlap="allow"), actor="t")
    with db.connection() as conn:  # a hand edit: a time zone that is a directory
        conn.execute(
            "UPDATE schedules SET timezone = 'America', cron = '* * * * *', every_seconds = NULL,"
            " next_due_at = now() - interval '1 s' WHERE name = 'broken'"
        )
        conn.execute("UPDATE schedules SET next_due_at = now() WHERE name = 'fine'")
    done = schedules.start_due()
    assert len(done.started) == 1
    broken = schedules.get("broken")
    assert broken.paused and broken.paused_by == "scheduler"
    assert "unknown time zone 'America'" in (broken.paused_reason or "")
    assert schedules.get("fine").started_runs == 1


def test_the_same_definition_again_is_no_change_whatever_its_input_s_key_order(
    schedules: Schedules,
) -> None:
    first = Schedule("ordered", "five", every=60, input={"inbox": "support", "max": 3, "n": 1e20})
    row, created = schedules.create(first, actor="t")
    again = Schedule("ordered", "five", every=60, input={"n": 1e20, "max": 3, "inbox": "support"})
    assert schedules.create(again, actor="t") == (row, False)
    assert created


def _versioned(version: int, every: int) -> Agent:
    agent = Agent("report", version=version)
    agent.schedule("report-often", every=every)

    @agent.step
    def run(ctx: StepContext) -> Complete:
        return Complete()

    return agent


def test_an_older_version_s_worker_does_not_put_its_definition_back(
    schedules: Schedules, db: Database
) -> None:
    schedules.sync_from_code([_versioned(1, 60)], worker="old")
    schedules.sync_from_code([_versioned(2, 120)], worker="new")
    assert schedules.get("report-often").every_seconds == 120
    before = schedules.get("report-often")
    schedules.sync_from_code([_versioned(1, 60)], worker="old-restarted")
    after = schedules.get("report-often")
    assert (after.every_seconds, after.agent_version) == (120, 2)
    assert after.next_due_at == before.next_due_at and after.updated_at == before.updated_at


def test_a_changed_definition_keeps_a_paused_schedule_paused(
    schedules: Schedules, db: Database
) -> None:
    schedules.sync_from_code([_versioned(1, 60)], worker="w")
    schedules.pause("report-often", actor="ops", reason="quiet")
    schedules.sync_from_code([_versioned(1, 90)], worker="w")
    row = schedules.get("report-often")
    assert (row.every_seconds, row.paused, row.paused_reason) == (90, True, "quiet")


def test_two_agents_may_not_define_schedules_of_one_name() -> None:
    first, second = _versioned(1, 60), Agent("other")
    second.schedule("report-often", every=30)

    @second.step
    def run(ctx: StepContext) -> Complete:
        return Complete()

    with pytest.raises(AgentDefinitionError, match="both define a schedule named"):
        AgentRegistry([first, second])


def test_the_grace_is_never_shorter_than_two_scheduler_intervals(
    settings: Settings, db: Database
) -> None:
    slow = settings.model_copy(update={"scheduler_interval_seconds": 300})
    assert Schedules(slow, db, None).grace == timedelta(seconds=601)
    assert Schedules(settings, db, None).grace == timedelta(seconds=60)


def test_a_retried_trigger_with_its_key_starts_nothing_more(
    schedules: Schedules, client: Client, db: Database
) -> None:
    schedules.create(Schedule("manual", "five", every=3600), actor="t")
    first = client.trigger_schedule("manual", idempotency_key="retry-1")
    assert client.trigger_schedule("manual", idempotency_key="retry-1") == first
    other = client.trigger_schedule("manual", idempotency_key="retry-2")
    assert other != first
    assert schedules.get("manual").started_runs == 2
    with db.connection() as conn:
        rows = schedule_queries.page(conn, limit=10)
    assert [row.name for row in rows] == ["manual"]
