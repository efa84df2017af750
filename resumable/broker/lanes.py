"""Priority lanes: one Redis queue per priority (``resumable/priorities.py``).

A normal session's messages go on the configured queue itself, so nothing
changes for a deployment that never sets a priority; a high or low one's on
``<queue>.high`` or ``<queue>.low``. The lanes have no delay queues of
their own: a delayed message (a retry's backoff) waits on the configured
queue's, carrying its lane in an option, and goes to its lane when due
(``WakingRedisBroker.enqueue``), so a worker runs four consumers, not six.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from resumable.priorities import DEFAULT_PRIORITY, PRIORITIES, Priority

if TYPE_CHECKING:
    from dramatiq.message import Message

#: The option a delayed message carries its lane in.
LANE_OPTION = "lane"


def lane(queue_name: str, level: Priority) -> str:
    """The queue a session of this priority is sent on."""
    return queue_name if level == DEFAULT_PRIORITY else f"{queue_name}.{level}"


def lanes(queue_name: str) -> list[str]:
    """Every lane of the configured queue, highest first."""
    return [lane(queue_name, level) for level in PRIORITIES]


def level_of(queue_name: str) -> Priority:
    """The priority a lane's messages have (the normal lane's: any other queue)."""
    for level in PRIORITIES:
        if level != DEFAULT_PRIORITY and queue_name.endswith(f".{level}"):
            return level
    return DEFAULT_PRIORITY


def base_of(queue_name: str) -> str:
    """The configured queue a lane belongs to."""
    level = level_of(queue_name)
    return queue_name if level == DEFAULT_PRIORITY else queue_name[: -len(level) - 1]


def delayed_on_base(message: Message[Any]) -> Message[Any]:
    """A message to delay, as it goes on its base queue's delay queue (its
    lane has none), carrying its lane to go back to when due."""
    base = base_of(message.queue_name)
    if base == message.queue_name:
        return message
    return message.copy(queue_name=base, options={LANE_OPTION: message.queue_name})
