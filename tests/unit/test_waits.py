"""Wait.spec: the JSON a suspended session stores, and the instant it wakes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from resumable.errors import WaitDefinitionError
from resumable.waits import Poll, Signal, Timer, Wait

NOW = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
INDIA = timezone(timedelta(hours=5, minutes=30))
NEW_YORK = timezone(timedelta(hours=-5))


def test_the_earliest_timer_wins_whatever_the_utc_offsets() -> None:
    # 01:00 UTC sorts before "05:00+05:30" as text, but 05:00+05:30 is 23:30 UTC the
    # day before: the earlier instant, and the one the session must wake for.
    later = Timer(at=datetime(2026, 1, 1, 1, 0, tzinfo=UTC))
    earlier = Timer(at=datetime(2026, 1, 1, 5, 0, tzinfo=INDIA))
    for conditions in ((later, earlier), (earlier, later)):
        spec = Wait(conditions=conditions, then="next").spec(NOW)
        timer_at = datetime.fromisoformat(spec["timer_at"])
        wake_at = datetime.fromisoformat(spec["wake_at"])
        assert timer_at == earlier.at
        assert wake_at == timer_at


def test_a_timer_in_another_offset_against_a_poll_and_a_deadline() -> None:
    timer = Timer(at=datetime(2025, 12, 31, 19, 10, tzinfo=NEW_YORK))  # 00:10 UTC
    spec = Wait(
        conditions=(timer, Poll("ready", every=3600), Signal("go", timeout=1800)), then="next"
    ).spec(NOW)
    assert datetime.fromisoformat(spec["timer_at"]) == NOW + timedelta(minutes=10)
    assert datetime.fromisoformat(spec["deadline"]) == NOW + timedelta(minutes=30)
    assert datetime.fromisoformat(spec["wake_at"]) == NOW + timedelta(minutes=10)


def test_relative_timers_and_the_deadline() -> None:
    spec = Wait(conditions=(Timer(seconds=90), Timer(seconds=30)), then="next", timeout=10).spec(
        NOW
    )
    assert datetime.fromisoformat(spec["timer_at"]) == NOW + timedelta(seconds=30)
    assert datetime.fromisoformat(spec["wake_at"]) == NOW + timedelta(seconds=10)


def test_a_naive_timer_is_refused() -> None:
    with pytest.raises(WaitDefinitionError):
        Wait(conditions=(Timer(at=datetime(2026, 1, 1)),), then="next").spec(NOW)
