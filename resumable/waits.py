"""What a step can wait for, and what it finds when it wakes.

A step that must wait ends with ``return ctx.wait(*conditions, then="step")``.
The session is committed as ``suspended`` and the worker lets go of it; the
first condition to fire (or the deadline) makes it ``pending`` again, and the
``then`` step runs with ``ctx.wake`` telling which condition fired and what
arrived with it.

Conditions:

- ``ctx.callback(topic)``: an external system POSTs to a single-use URL.
- ``Signal(topic)``: an internal system or a human posts a named signal.
- ``Timer(seconds=...)`` / ``Timer(at=...)``: a durable sleep.
- ``Poll(check, args, every=...)``: a registered check function is run every
  interval, on a worker, until it returns something other than ``None``.

``timeout`` bounds the whole wait, and a callback, signal or poll may carry
its own ``timeout`` too; the earliest one is the wait's deadline. When it
passes first, the ``then`` step runs with ``ctx.wake.kind == "timeout"``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from resumable._internal import serialization
from resumable.errors import WaitDefinitionError

WakeKind = Literal[
    "callback", "signal", "timer", "poll", "timeout", "poll_check", "lock", "children"
]


# A wait longer than this is a mistake (and past what a datetime can hold).
MAX_WAIT_SECONDS = 100 * 366 * 86_400


def check_seconds(value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    else:
        raise WaitDefinitionError(f"a wait duration must be seconds or a timedelta, got {value!r}")
    if math.isnan(seconds):
        raise WaitDefinitionError("a wait duration cannot be NaN")
    if seconds < 0:
        raise WaitDefinitionError(f"a wait duration cannot be negative ({seconds} s)")
    if seconds > MAX_WAIT_SECONDS:
        raise WaitDefinitionError(
            f"a wait duration must be at most {MAX_WAIT_SECONDS} s (100 years), got {seconds} s"
        )
    return seconds


def check_name(value: object, what: str) -> str:
    """A topic, check or lock name: non-empty text PostgreSQL can store."""
    if not isinstance(value, str) or not value:
        raise WaitDefinitionError(f"{what} must be a non-empty string, got {value!r}")
    problem = serialization.unstorable_text(value)
    if problem:
        raise WaitDefinitionError(f"{what} {value!r} contains {problem}")
    return value


def _child_id(value: object) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise WaitDefinitionError(
            f"Children(...) takes session ids (from ctx.spawn), got {value!r}"
        ) from None


@dataclass(frozen=True)
class Callback:
    """A single-use callback URL created by ``ctx.callback``; hand ``url`` to
    the external system, then wait on this object."""

    token: str
    topic: str
    url: str
    timeout: float | timedelta | None = None


@dataclass(frozen=True)
class Signal:
    """Wait for a signal posted to ``/v1/sessions/{id}/signals/{topic}``.

    A signal posted before the session waits for it is kept and consumed by
    the first wait that names its topic.
    """

    topic: str
    timeout: float | timedelta | None = None


@dataclass(frozen=True)
class Timer:
    """Fire after ``seconds`` (from when the session suspends) or at ``at``."""

    seconds: float | timedelta | None = None
    at: datetime | None = None

    def due(self, now: datetime) -> datetime:
        if self.at is not None:
            if not isinstance(self.at, datetime):
                raise WaitDefinitionError(f"Timer(at=...) needs a datetime, got {self.at!r}")
            if self.at.tzinfo is None:
                raise WaitDefinitionError("Timer(at=...) needs a timezone-aware datetime")
            return self.at
        seconds = check_seconds(self.seconds)
        if seconds is None:
            raise WaitDefinitionError("Timer needs seconds= or at=")
        return now + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Poll:
    """Run the agent's check function ``check`` with ``args`` every ``every``
    seconds until it returns a value other than ``None``."""

    check: str
    args: dict[str, Any] = field(default_factory=dict)
    every: float | timedelta = 5.0
    timeout: float | timedelta | None = None

    def spec(self) -> dict[str, Any]:
        every = check_seconds(self.every) or 0.0
        if every <= 0:
            raise WaitDefinitionError("Poll(every=...) must be positive")
        if not isinstance(self.args, dict):
            raise WaitDefinitionError("Poll(args=...) must be a dict")
        return {"check": check_name(self.check, "a Poll check"), "args": self.args, "every": every}


@dataclass(frozen=True)
class Lock:
    """Wait until this session holds the lock `name` (a semaphore when
    ``permits`` > 1: that many sessions may hold it at once). Requests are
    granted in FIFO order; the ``then`` step finds ``ctx.wake.kind == "lock"``
    and gets its fencing token from ``ctx.fence(name)``. See
    ``resumable/coordination/locks.py``."""

    name: str
    permits: int = 1
    timeout: float | timedelta | None = None

    def spec(self) -> dict[str, Any]:
        permits = self.permits
        if not isinstance(permits, int) or isinstance(permits, bool) or not 1 <= permits < 2**31:
            raise WaitDefinitionError(
                f"Lock(permits=...) must be an integer from 1 to {2**31 - 1}, got {permits!r}"
            )
        return {"name": check_name(self.name, "a Lock name"), "permits": permits}


@dataclass(frozen=True)
class Children:
    """Wait until child sessions (ids from ``ctx.spawn``) finish: ``need`` is
    ``"all"``, ``"any"`` or a number. The ``then`` step finds
    ``ctx.wake.kind == "children"`` and ``ctx.wake.payload`` as
    ``{"results": {id: result}, "failures": {id: {"status", "error"}}}``.

    ``on_failure``: ``"inform"`` (default) counts a dead-lettered child as
    finished and reports it in ``failures``; ``"wait"`` keeps the parent
    waiting while the child's dead letter is open, so retrying the child from
    the dead-letter queue lets the parent continue with its result (a
    discarded dead letter then counts as a failure)."""

    ids: Sequence[uuid.UUID | str]
    need: int | Literal["all", "any"] = "all"
    on_failure: Literal["inform", "wait"] = "inform"
    timeout: float | timedelta | None = None

    def spec(self) -> dict[str, Any]:
        if isinstance(self.ids, str | bytes):
            raise WaitDefinitionError("Children(...) takes a list of session ids, not one string")
        ids = [_child_id(i) for i in self.ids]
        if not ids:
            raise WaitDefinitionError("Children(...) needs at least one child id")
        need = len(ids) if self.need == "all" else 1 if self.need == "any" else self.need
        if not isinstance(need, int) or isinstance(need, bool) or not 1 <= need <= len(ids):
            raise WaitDefinitionError(
                f"Children(need=...) must be 'all', 'any' or 1..{len(ids)}, got {self.need!r}"
            )
        if self.on_failure not in ("inform", "wait"):
            raise WaitDefinitionError("Children(on_failure=...) must be 'inform' or 'wait'")
        return {"ids": ids, "need": need, "on_failure": self.on_failure}


@dataclass(frozen=True)
class Wait:
    """A step's outcome: suspend until one condition fires, then run ``then``."""

    conditions: tuple[Callback | Signal | Timer | Poll | Lock | Children, ...]
    then: str
    timeout: float | timedelta | None = None

    def spec(self, now: datetime | None = None) -> dict[str, Any]:
        """The JSON stored on the session while it waits."""
        now = now or datetime.now(UTC)
        spec: dict[str, Any] = {
            "then": self.then,
            "callbacks": [],
            "signals": [],
            "since": now.isoformat(),
        }
        due: list[datetime] = []
        timers: list[datetime] = []
        for condition in self.conditions:
            if isinstance(condition, Callback):
                spec["callbacks"].append(condition.token)
            elif isinstance(condition, Signal):
                spec["signals"].append(check_name(condition.topic, "a Signal topic"))
            elif isinstance(condition, Timer):
                # Compared as datetimes: ISO strings in different UTC offsets
                # do not sort by the instant they name.
                timers.append(condition.due(now))
            elif isinstance(condition, Poll):
                if "poll" in spec:
                    raise WaitDefinitionError("a wait can hold at most one Poll")
                spec["poll"] = condition.spec()
                due.append(now + timedelta(seconds=spec["poll"]["every"]))
            elif isinstance(condition, Lock):
                if "lock" in spec:
                    raise WaitDefinitionError("a wait can hold at most one Lock")
                spec["lock"] = condition.spec()
            elif isinstance(condition, Children):
                if "children" in spec:
                    raise WaitDefinitionError("a wait can hold at most one Children")
                spec["children"] = condition.spec()
            else:
                raise WaitDefinitionError(f"cannot wait on {condition!r}")
        if timers:
            spec["timer_at"] = min(timers).isoformat()
            due.append(min(timers))
        timeouts = [check_seconds(self.timeout)] + [
            check_seconds(c.timeout) for c in self.conditions if not isinstance(c, Timer)
        ]
        given = [t for t in timeouts if t is not None]
        timeout = min(given) if given else None
        if timeout is not None:
            deadline = now + timedelta(seconds=timeout)
            spec["deadline"] = deadline.isoformat()
            due.append(deadline)
        if not self.conditions and timeout is None:
            raise WaitDefinitionError("a wait needs at least one condition or a timeout")
        spec["wake_at"] = min(due).isoformat() if due else None
        # Everything stored must be storable (a poll's args, say): refused
        # here, as the step's own permanent error, not at the commit.
        serialization.dumps(spec, "wait")
        return spec


@dataclass(frozen=True)
class Wake:
    """Why the session woke up, as the ``then`` step sees it in ``ctx.wake``."""

    kind: WakeKind
    topic: str | None = None
    payload: Any = None
    delivery_id: int | None = None

    @property
    def timed_out(self) -> bool:
        return self.kind == "timeout"

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Wake | None:
        if not data:
            return None
        return cls(
            kind=data["kind"],
            topic=data.get("topic"),
            payload=data.get("payload"),
            delivery_id=data.get("delivery_id"),
        )
