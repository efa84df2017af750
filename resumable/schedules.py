"""Schedules: start a session of an agent on a cron expression or an interval.

A schedule is defined in code, on its agent (``agent.schedule(...)``: each
worker that loads the agent records it when it starts), or at run time
through the client, the CLI, the HTTP API or the console. The scheduler
process starts its sessions: each due time starts at most one session
however many schedulers run (the schedule's row is locked while a due time
is handled, and the session's idempotency key is the schedule and the due
time).

When each due time falls:

- ``cron="0 8 * * 1-5", timezone="Europe/Paris"``: a five-field cron
  expression read in that time zone (cronsim, which follows Debian's cron
  across daylight-saving changes: a time the clocks skip runs once just
  after the jump, a time they repeat runs once);
- ``every=900`` (seconds, or a timedelta): from the moment the schedule was
  defined, at fixed intervals of elapsed time.

A due time a scheduler sees later than ``schedule_grace_seconds`` after it
(no scheduler ran, or the database was down) is *missed*; ``catch_up``
says what happens to missed ones: ``skip`` them (the default), start only
the ``latest`` of them (one run for the whole outage), or start ``all``
(oldest first). Due times on time start as usual whichever it is. ``overlap`` says what a
due time does while the session the schedule started last is still live:
``skip`` it (the default), ``allow`` another session beside it, or
``queue`` one run that starts when the live one finishes (as Temporal's
buffer-one: a later due time replaces a queued one).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

from resumable._internal import serialization
from resumable.errors import NotSerializableError, ScheduleDefinitionError

CatchUp = Literal["skip", "latest", "all"]
Overlap = Literal["skip", "allow", "queue"]
CATCH_UPS: tuple[CatchUp, ...] = get_args(CatchUp)
OVERLAPS: tuple[Overlap, ...] = get_args(Overlap)

# A schedule's name is part of URLs and of its sessions' idempotency keys
# (at most 256 bytes), so it is a short identifier.
MAX_SCHEDULE_NAME_LENGTH = 128
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
# The shortest and longest interval: a second (the scheduler's own pace is
# about that) and ten years.
MIN_EVERY_SECONDS = 1.0
MAX_EVERY_SECONDS = 10 * 366 * 86_400.0
# The longest cron expression (five fields of lists and ranges fit easily).
MAX_CRON_LENGTH = 200
# Missed due times a schedule with catch_up="all" starts in one pass; the
# next pass goes on from the last one started.
MAX_CATCH_UP_PER_PASS = 100
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Schedule:
    """When to start sessions of `agent` with `input`; see the module's docstring."""

    name: str
    agent: str
    cron: str | None = None
    every: float | timedelta | None = None
    timezone: str = "UTC"
    input: Any = None
    catch_up: CatchUp = "skip"
    overlap: Overlap = "skip"

    def __post_init__(self) -> None:
        check_schedule_name(self.name)
        if not isinstance(self.agent, str) or not self.agent:
            raise ScheduleDefinitionError(f"schedule {self.name!r}: agent must be a name")
        if (self.cron is None) == (self.every is None):
            raise ScheduleDefinitionError(
                f"schedule {self.name!r}: give either cron=... or every=..., not "
                + ("both" if self.cron is not None else "neither")
            )
        if self.every is not None:
            object.__setattr__(self, "every", _interval_seconds(self.name, self.every))
        zone = _zone(self.name, self.timezone)
        if self.cron is not None:
            _check_cron(self.name, self.cron, zone)
        if self.catch_up not in CATCH_UPS:
            raise ScheduleDefinitionError(
                f"schedule {self.name!r}: catch_up must be one of {', '.join(CATCH_UPS)}, "
                f"not {self.catch_up!r}"
            )
        if self.overlap not in OVERLAPS:
            raise ScheduleDefinitionError(
                f"schedule {self.name!r}: overlap must be one of {', '.join(OVERLAPS)}, "
                f"not {self.overlap!r}"
            )
        try:
            serialization.dumps(self.input, "input")
        except NotSerializableError as exc:
            raise ScheduleDefinitionError(f"schedule {self.name!r}: {exc.message}") from None

    @property
    def every_seconds(self) -> float | None:
        return None if self.every is None else float(self.every)  # type: ignore[arg-type]

    def next_due(self, after: datetime, anchor: datetime) -> datetime:
        """The first due time strictly after `after` (UTC). An interval counts
        from `anchor`, the moment the schedule was defined, in whole
        microseconds (so no due time comes back rounded another way)."""
        if self.cron is not None:
            local = after.astimezone(ZoneInfo(self.timezone))
            return next(CronSim(self.cron, local)).astimezone(UTC)
        every = self._every_us
        if after < anchor:
            return anchor
        periods = (after - anchor) // _MICROSECOND // every + 1
        return anchor + periods * every * _MICROSECOND

    def last_due(self, at: datetime, anchor: datetime) -> datetime:
        """The latest due time at or before `at` (UTC); for an interval, never
        before `anchor`."""
        if self.cron is not None:
            # cronsim's reverse walk starts strictly before a whole second.
            local = (at + _MICROSECOND).astimezone(ZoneInfo(self.timezone))
            return next(CronSim(self.cron, local, reverse=True)).astimezone(UTC)
        periods = max(0, (at - anchor) // _MICROSECOND // self._every_us)
        return anchor + periods * self._every_us * _MICROSECOND

    @property
    def _every_us(self) -> int:
        seconds = self.every_seconds
        assert seconds is not None
        return round(seconds * 1_000_000)

    def describe(self) -> str:
        """When it starts sessions, in words ("At 08:00 on Monday through
        Friday (Europe/Paris)", "every 15 min")."""
        return describe(self.cron, self.every_seconds, self.timezone)


def describe(cron: str | None, every_seconds: float | None, timezone: str) -> str:
    """A schedule's times in words, from its stored fields."""
    if cron is not None:
        try:
            words = CronSim(cron, datetime.now(UTC)).explain()
        except Exception:  # explain() covers most, not every, expression
            words = f"cron {cron}"
        return f"{words} ({timezone})"
    return f"every {_duration(every_seconds or 0)}"


def check_schedule_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ScheduleDefinitionError(
            f"a schedule name is 1 to {MAX_SCHEDULE_NAME_LENGTH} letters, digits and . _ : - "
            f"(starting with a letter or digit), not {str(name)[:60]!r}"
        )
    if len(name) > MAX_SCHEDULE_NAME_LENGTH:
        raise ScheduleDefinitionError(
            f"schedule name {name[:40]!r}... is {len(name)} characters; "
            f"at most {MAX_SCHEDULE_NAME_LENGTH}"
        )
    return name


def due_key(name: str, due: datetime) -> str:
    """The idempotency key of the session a due time starts."""
    return f"schedule:{name}@{due.astimezone(UTC).isoformat(timespec='milliseconds')}"


def _interval_seconds(name: str, every: object) -> float:
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, int | float) and not isinstance(every, bool):
        seconds = float(every)
    else:
        raise ScheduleDefinitionError(
            f"schedule {name!r}: every is seconds or a timedelta, not {every!r}"
        )
    if not math.isfinite(seconds) or not MIN_EVERY_SECONDS <= seconds <= MAX_EVERY_SECONDS:
        raise ScheduleDefinitionError(
            f"schedule {name!r}: every must be {MIN_EVERY_SECONDS:g} s to "
            f"{MAX_EVERY_SECONDS:g} s, not {seconds:g}"
        )
    # Whole microseconds, as datetimes count: 100/7 s stored and read back
    # walks the same due times.
    return round(seconds * 1_000_000) / 1_000_000


def _zone(name: str, timezone: object) -> ZoneInfo:
    if not isinstance(timezone, str) or timezone not in _zone_names():
        shown = timezone[:64] if isinstance(timezone, str) else timezone
        raise ScheduleDefinitionError(
            f"schedule {name!r}: unknown time zone {shown!r} (an IANA name such as "
            "'Europe/Paris' or 'UTC')"
        )
    return ZoneInfo(timezone)


@functools.cache
def _zone_names() -> frozenset[str]:
    """The IANA zones this machine knows (a directory such as 'America', or a
    path, is none: ZoneInfo would raise OSError for those)."""
    return frozenset(available_timezones())


def _check_cron(name: str, cron: object, zone: ZoneInfo) -> None:
    if not isinstance(cron, str) or not cron.strip() or len(cron) > MAX_CRON_LENGTH:
        raise ScheduleDefinitionError(
            f"schedule {name!r}: cron must be an expression of at most {MAX_CRON_LENGTH} characters"
        )
    if len(cron.split()) != 5:
        raise ScheduleDefinitionError(
            f"schedule {name!r}: cron {cron[:60]!r} must have five fields "
            "(minute hour day-of-month month day-of-week)"
        )
    try:
        next(CronSim(cron, datetime.now(zone)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise ScheduleDefinitionError(
            f"schedule {name!r}: cron {cron[:60]!r} is not valid ({exc or 'never due'})"
        ) from None


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"
