"""Priority lanes and the order a worker takes what it holds
(resumable/broker/lanes.py, resumable/queue/lane_order.py)."""

from __future__ import annotations

import dramatiq
import pytest
from dramatiq.worker import _WorkQueueItem  # the item dramatiq's consumers put

from resumable.broker.lanes import base_of, lane, lanes, level_of
from resumable.errors import InvalidArgumentError
from resumable.priorities import PRIORITIES, priority
from resumable.queue.lane_order import LaneOrder
from resumable.settings import Settings


def _message(queue: str, sent_ms: int) -> dramatiq.Message[None]:
    return dramatiq.Message(
        queue_name=queue,
        actor_name="a",
        args=(),
        kwargs={},
        options={},
        message_timestamp=sent_ms,
    )


def _order(queue: LaneOrder, sent: list[tuple[str, int]]) -> list[tuple[str, int]]:
    for name, ms in sent:
        queue.put(_WorkQueueItem(0, _message(name, ms)))  # type: ignore[arg-type]
    taken = []
    while not queue.empty():
        message = queue.get_nowait().message
        taken.append((message.queue_name, message.message_timestamp))
    return taken


def test_each_priority_has_its_lane_and_a_lane_names_its_priority() -> None:
    assert lanes("work") == ["work.high", "work", "work.low"]
    for level in PRIORITIES:
        assert level_of(lane("work", level)) == level
        assert base_of(lane("work", level)) == "work"
    assert level_of("work.DQ") == "normal"


def test_a_priority_is_one_of_three_words_or_a_clear_error() -> None:
    assert priority("low") == "low"
    for bad in ("LOW", "", None, 1, "high ", "x" * 100):
        with pytest.raises(InvalidArgumentError, match="one of high, normal, low"):
            priority(bad)


def test_a_queue_name_may_not_look_like_a_lane() -> None:
    for name in ("jobs.high", "jobs.low"):
        with pytest.raises(ValueError, match="priority lanes"):
            Settings(queue_name=name)


def test_earliest_sent_first_less_each_prioritys_head_start() -> None:
    """A head start of 60 s: high goes before normal sent up to 60 s earlier,
    low after normal sent up to 60 s later; beyond that, waiting wins."""
    order = _order(
        LaneOrder(60.0),
        [
            ("q", 100_000),
            ("q.low", 50_000),  # counts as 110,000
            ("q.high", 150_000),  # counts as 90,000
            ("q.low", 0),  # counts as 60,000: waited long enough
            ("q", 105_000),
        ],
    )
    assert order == [
        ("q.low", 0),
        ("q.high", 150_000),
        ("q", 100_000),
        ("q", 105_000),
        ("q.low", 50_000),
    ]


def test_equal_keys_keep_their_arrival_order() -> None:
    assert _order(LaneOrder(1.0), [("q", 5), ("q", 5), ("q.high", 1005)]) == [
        ("q", 5),
        ("q", 5),
        ("q.high", 1005),
    ]
