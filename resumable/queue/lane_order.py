"""The order a worker process takes the messages it holds: by priority, aged.

dramatiq's worker threads take messages from one in-memory priority queue
that its consumers fill, ordered by the actor's priority (one actor here:
all equal) and then by arrival. With a consumer per priority lane
(``broker/lanes.py``), this queue orders them instead by the time each was
sent, less its priority's head start (``resumable/priorities.py``): the
earliest goes first. A message sent long ago (a backlog, a redelivery)
outranks a newer one of a higher priority, so no priority waits for ever.
"""

from __future__ import annotations

import dataclasses
from queue import PriorityQueue
from typing import Any

from resumable.broker.lanes import level_of
from resumable.priorities import head_start


class LaneOrder(PriorityQueue[Any]):
    """dramatiq's work queue, its items re-keyed by aged priority."""

    def __init__(self, aging_seconds: float) -> None:
        super().__init__()
        self._head_start_ms = round(aging_seconds * 1000)

    def key(self, message: Any) -> int:
        """When the message counts as sent (ms since the epoch): earliest first."""
        level = level_of(message.queue_name)
        return int(message.message_timestamp) - head_start(level) * self._head_start_ms

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(dataclasses.replace(item, priority=self.key(item.message)), block, timeout)
