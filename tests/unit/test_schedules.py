"""Schedules without a database: when each is due (cron across daylight-saving
changes, intervals), what a bad definition says, and what one pass of the
scheduler decides for a due schedule (``services.schedules.plan``)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from resumable import Agent
from resumable.errors import AgentDefinitionError, ScheduleDefinitionError
from resumable.models.schedule_queries import DueSchedule
from resumable.schedules import Schedule, due_key
from resumable.services.schedules import plan

BERLIN = ZoneInfo("Europe/Berlin")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _walk(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    times, moment = [], start
    for _ in range(count):
        moment = schedule.next_due(moment, start)
        times.append(moment)
    return times


def _local(times: list[datetime]) -> list[str]:
    return [t.astimezone(BERLIN).strftime("%m-%d %H:%M%z") for t in times]


def test_a_daily_time_the_clocks_skip_runs_once_just_after_the_jump() -> None:
    daily = Schedule("nightly", "report", cron="30 2 * * *", timezone="Europe/Berlin")
    start = datetime(2026, 3, 27, 12, tzinfo=BERLIN)
    assert _local(_walk(daily, start, 4)) == [
        "03-28 02:30+0100",
        "03-29 03:00+0200",  # 02:30 does not exist that night
        "03-30 02:30+0200",
        "03-31 02:30+0200",
    ]


def test_a_daily_time_the_clocks_repeat_runs_once() -> None:
    daily = Schedule("nightly", "report", cron="30 2 * * *", timezone="Europe/Berlin")
    start = datetime(2026, 10, 23, 12, tzinfo=BERLIN)
    times = _walk(daily, start, 4)
    assert _local(times) == [
        "10-24 02:30+0200",
        "10-25 02:30+0200",  # not again at 02:30+0100
        "10-26 02:30+0100",
        "10-27 02:30+0100",
    ]
    assert times == sorted(set(times))


def test_a_half_hourly_schedule_keeps_elapsed_time_across_the_repeated_hour() -> None:
    half_hourly = Schedule("tick", "report", cron="*/30 * * * *", timezone="Europe/Berlin")
    start = datetime(2026, 10, 25, 1, 50, tzinfo=BERLIN)
    times = _walk(half_hourly, start, 6)
    gaps = {later - earlier for earlier, later in itertools.pairwise(times)}
    assert gaps == {timedelta(minutes=30)}, _local(times)


def test_an_interval_counts_from_its_anchor_and_never_repeats_a_due_time() -> None:
    every = Schedule("poll", "report", every=timedelta(minutes=15))
    assert every.every_seconds == 900
    assert every.next_due(T0, T0) == T0 + timedelta(minutes=15)
    assert every.next_due(T0 + timedelta(minutes=15), T0) == T0 + timedelta(minutes=30)
    assert every.next_due(T0 + timedelta(minutes=29, seconds=59), T0) == T0 + timedelta(minutes=30)
    assert every.last_due(T0 + timedelta(minutes=44), T0) == T0 + timedelta(minutes=30)
    assert every.last_due(T0 + timedelta(minutes=45), T0) == T0 + timedelta(minutes=45)


@pytest.mark.parametrize("every", [100 / 7, 3.333333333333333, 1.0000005])
def test_an_interval_that_is_no_whole_microsecond_walks_evenly(every: float) -> None:
    """Rounded two ways, one due time came back 1 us later as another."""
    schedule = Schedule("odd", "report", every=every)
    anchor = datetime(2026, 1, 2, 20, 13, 14, 217333, tzinfo=UTC)
    times, moment = [], anchor
    for _ in range(5000):
        moment = schedule.next_due(moment, anchor)
        times.append(moment)
    assert len({b - a for a, b in itertools.pairwise(times)}) == 1
    assert len({due_key("odd", t) for t in times}) == len(times)
    assert schedule.last_due(times[7] + timedelta(microseconds=1), anchor) == times[7]


def test_the_latest_cron_due_time_at_or_before_a_moment() -> None:
    hourly = Schedule("hourly", "report", cron="0 * * * *")
    at = datetime(2026, 1, 1, 5, tzinfo=UTC)
    assert hourly.last_due(at, T0) == at
    assert hourly.last_due(at + timedelta(minutes=59), T0) == at


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"cron": "61 * * * *"}, "not valid"),
        ({"cron": "0 0 30 2 *"}, "not valid"),
        ({"cron": "* * * *"}, "five fields"),
        ({"cron": "0 8 * * *", "every": 60}, "not both"),
        ({}, "neither"),
        ({"every": 0.5}, "every must be"),
        ({"every": float("nan")}, "every must be"),
        ({"every": True}, "seconds or a timedelta"),
        ({"every": 60, "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"every": 60, "timezone": "America"}, "unknown time zone"),  # a directory
        ({"every": 60, "timezone": "../../etc/passwd"}, "unknown time zone"),
        ({"every": 60, "timezone": "Europe/\x00"}, "unknown time zone"),
        ({"every": 60, "catch_up": "some"}, "catch_up must be one of skip, latest, all"),
        ({"every": 60, "overlap": "never"}, "overlap must be one of skip, allow, queue"),
        ({"every": 60, "input": {"x": {1, 2}}}, "input"),
        ({"every": 60, "input": "\ud800"}, "input"),
    ],
)
def test_a_bad_definition_says_what_is_wrong(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(ScheduleDefinitionError, match=says):
        Schedule("nightly", "report", **fields)


@pytest.mark.parametrize("name", ["", "a b", "-x", "x/y", "a" * 129, "caf\u00e9", "a\x00"])
def test_a_schedule_name_is_a_short_identifier(name: str) -> None:
    with pytest.raises(ScheduleDefinitionError, match="schedule name"):
        Schedule(name, "report", every=60)


def test_an_agent_defines_its_schedules_and_refuses_a_bad_or_repeated_one() -> None:
    agent = Agent("report")

    @agent.step
    def start(ctx: Any) -> Any:
        return None

    weekday = agent.schedule("weekdays", cron="0 8 * * 1-5", timezone="Europe/Paris")
    agent.schedule("often", every=60, input={"scope": "all"}, overlap="queue")
    assert [s.name for s in agent.schedules] == ["weekdays", "often"]
    assert weekday.agent == "report"
    assert "Monday through Friday" in weekday.describe()
    with pytest.raises(AgentDefinitionError, match="already has a schedule"):
        agent.schedule("often", every=30)
    with pytest.raises(AgentDefinitionError, match=r"agent 'report'.*unknown time zone"):
        agent.schedule("elsewhere", cron="0 8 * * *", timezone="Nowhere/Here")


def test_a_due_time_s_key_names_the_schedule_and_the_moment() -> None:
    assert due_key("nightly", T0) == "schedule:nightly@2026-01-01T00:00:00.000+00:00"
    assert len(due_key("n" * 128, T0).encode()) <= 256


# -- one pass's decision -------------------------------------------------------------


def _row(schedule: Schedule, *, next_due: datetime, now: datetime, **more: Any) -> DueSchedule:
    values: dict[str, Any] = {
        "name": schedule.name,
        "agent": schedule.agent,
        "cron": schedule.cron,
        "every_seconds": schedule.every_seconds,
        "timezone": schedule.timezone,
        "input": schedule.input,
        "catch_up": schedule.catch_up,
        "overlap": schedule.overlap,
        "source": "api",
        "paused": False,
        "paused_by": None,
        "paused_reason": None,
        "anchor_at": T0,
        "next_due_at": next_due,
        "queued_due_at": None,
        "last_due_at": None,
        "last_session_id": uuid.uuid4(),
        "last_started_at": None,
        "started_runs": 0,
        "skipped_runs": 0,
        "created_at": T0,
        "created_by": "test",
        "updated_at": T0,
        "now": now,
    }
    values.update(more)
    return DueSchedule(**values)


GRACE = timedelta(seconds=60)
MINUTE = timedelta(minutes=1)


def _minutely(**fields: Any) -> Schedule:
    return Schedule("tick", "report", every=60, **fields)


def test_a_due_time_on_time_starts_one_session_and_moves_on() -> None:
    schedule = _minutely()
    decided = plan(
        schedule, _row(schedule, next_due=T0 + MINUTE, now=T0 + MINUTE), live=False, grace=GRACE
    )
    assert decided.start == [T0 + MINUTE]
    assert decided.next_due_at == T0 + 2 * MINUTE
    assert decided.skipped == 0


@pytest.mark.parametrize(
    ("catch_up", "starts", "skipped"),
    [("skip", 0, 10), ("latest", 1, 9), ("all", 10, 0)],
)
def test_due_times_missed_for_ten_minutes_follow_the_catch_up_policy(
    catch_up: str, starts: int, skipped: int
) -> None:
    schedule = _minutely(catch_up=catch_up, overlap="allow")
    now = T0 + 10 * MINUTE + timedelta(seconds=30)  # the last one due 30 s ago
    row = _row(schedule, next_due=T0 + MINUTE, now=now)
    decided = plan(schedule, row, live=False, grace=timedelta(seconds=10))
    assert len(decided.start) == starts
    assert decided.skipped == skipped
    assert decided.next_due_at == T0 + 11 * MINUTE
    if catch_up == "latest":
        assert decided.start == [T0 + 10 * MINUTE]


def test_an_outage_longer_than_a_pass_walks_jumps_to_now_unless_catching_up_all() -> None:
    skip = _minutely(catch_up="latest", overlap="allow")
    now = T0 + timedelta(days=3, seconds=30)
    decided = plan(skip, _row(skip, next_due=T0 + MINUTE, now=now), live=False, grace=GRACE)
    # The latest missed one (a minute before), and the one on time.
    assert decided.start == [T0 + timedelta(days=3) - MINUTE, T0 + timedelta(days=3)]
    assert decided.next_due_at == T0 + timedelta(days=3, minutes=1)
    every = _minutely(catch_up="all", overlap="allow")
    decided = plan(every, _row(every, next_due=T0 + MINUTE, now=now), live=False, grace=GRACE)
    assert len(decided.start) == 100  # one pass's share; the next pass goes on
    assert decided.next_due_at == T0 + 101 * MINUTE


def test_overlap_skip_starts_nothing_while_the_last_session_is_live() -> None:
    schedule = _minutely(overlap="skip")
    row = _row(schedule, next_due=T0 + MINUTE, now=T0 + MINUTE)
    assert plan(schedule, row, live=True, grace=GRACE).start == []
    assert plan(schedule, row, live=True, grace=GRACE).skipped == 1
    assert plan(schedule, row, live=False, grace=GRACE).start == [T0 + MINUTE]


def test_overlap_queue_keeps_one_due_time_until_the_live_session_ends() -> None:
    schedule = _minutely(overlap="queue")
    row = _row(schedule, next_due=T0 + MINUTE, now=T0 + MINUTE)
    queued = plan(schedule, row, live=True, grace=GRACE)
    assert (queued.start, queued.queued, queued.skipped) == ([], T0 + MINUTE, 0)
    # A later due time replaces the queued one (one run buffered, as Temporal's).
    later = _row(schedule, next_due=T0 + 2 * MINUTE, now=T0 + 2 * MINUTE, queued_due_at=T0 + MINUTE)
    replaced = plan(schedule, later, live=True, grace=GRACE)
    assert (replaced.start, replaced.queued, replaced.skipped) == ([], T0 + 2 * MINUTE, 1)
    # The live session ended: the queued due time starts, before the next one is due.
    ended = _row(
        schedule,
        next_due=T0 + 3 * MINUTE,
        now=T0 + 2 * MINUTE + timedelta(seconds=5),
        queued_due_at=T0 + 2 * MINUTE,
    )
    started = plan(schedule, ended, live=False, grace=GRACE)
    assert (started.start, started.queued, started.next_due_at) == (
        [T0 + 2 * MINUTE],
        None,
        T0 + 3 * MINUTE,
    )


def test_overlap_allow_starts_every_chosen_due_time() -> None:
    schedule = _minutely(overlap="allow", catch_up="all")
    row = _row(schedule, next_due=T0 + MINUTE, now=T0 + 3 * MINUTE)
    assert plan(schedule, row, live=True, grace=GRACE).start == [
        T0 + MINUTE,
        T0 + 2 * MINUTE,
        T0 + 3 * MINUTE,
    ]
