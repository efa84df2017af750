"""A session's priority: which pending session a free worker takes next.

Three levels, ``high``, ``normal`` (the default) and ``low``, each with its
own queue in Redis (a *lane*: ``broker/lanes.py``), so a session started
high is not stuck behind a backlog of thousands in the normal lane. A
worker consumes every lane and takes, of the messages it holds, the one
whose send time minus its priority's head start is earliest: a high message
goes before normal ones sent up to ``priority_aging_seconds`` before it, a
low one after normal ones sent up to that much after it. Waiting therefore
counts as much as rank, and a low session is never starved: once it has
waited twice the head start, nothing sent later goes before it.
"""

from __future__ import annotations

import uuid
from typing import Literal, NamedTuple, TypeAlias, get_args

from resumable.errors import InvalidArgumentError

Priority: TypeAlias = Literal["high", "normal", "low"]

#: Highest first.
PRIORITIES: tuple[Priority, ...] = get_args(Priority)
DEFAULT_PRIORITY: Priority = "normal"


def priority(value: object, name: str = "priority") -> Priority:
    """`value` as a priority; InvalidArgumentError naming the levels if it is none."""
    if isinstance(value, str) and value in PRIORITIES:
        return value
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise InvalidArgumentError(f"{name} must be one of {', '.join(PRIORITIES)}; got {shown}")


def head_start(level: Priority) -> int:
    """How many head starts (of ``priority_aging_seconds``) a level has: 1, 0, -1."""
    return 1 - PRIORITIES.index(level)


class Routed(NamedTuple):
    """A session to send, with the priority that picks its lane (a bare id
    goes on the normal lane)."""

    session_id: uuid.UUID | str
    priority: Priority
