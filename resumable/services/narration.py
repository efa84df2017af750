"""What a session is doing, in words: the CLI's ``sessions list`` and the
console's session page say it the same way.

An operator asked "what is this session doing?" had to read the status, the
cursor, a JSON wait and a JSON block reason, and work it out. One sentence
answers instead: "running `charge` for 3 s", "waiting for signal `approval`
until 14:00 UTC (in 4 h)", "blocked: asks for other arguments than
recorded ...", "retrying `charge` (attempt 3) after TimeoutError".
"""

from __future__ import annotations

from datetime import UTC, datetime

from resumable.models.status import SessionStatus
from resumable.schemas import Session, WaitingFor


def duration(seconds: float) -> str:
    """`seconds` as a person says it: "0.2 ms", "850 ms", "12 s", "3 min", "2 h 5 min"."""
    seconds = max(seconds, 0.0)
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"  # a step's own time is often under a millisecond
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min"
    if seconds < 86_400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours:.0f} h {minutes:.0f} min" if minutes else f"{hours:.0f} h"
    return f"{seconds // 86_400:.0f} d"


def ago(then: datetime, now: datetime | None = None) -> str:
    """How long before `now` `then` was ("12 s ago"; "just now" under a
    second), or how long after ("in 12 s") for a moment to come."""
    seconds = ((now or datetime.now(UTC)) - then).total_seconds()
    if seconds <= -1:
        return f"in {duration(-seconds)}"
    return "just now" if seconds < 1 else f"{duration(seconds)} ago"


def _when(at: datetime, now: datetime) -> str:
    """A moment to come, absolute and relative: "14:00 UTC (in 4 h)"; the date
    too when it is not today."""
    at = at.astimezone(UTC)
    clock = at.strftime("%H:%M UTC" if at.date() == now.date() else "%Y-%m-%d %H:%M UTC")
    seconds = (at - now).total_seconds()
    relative = f"in {duration(seconds)}" if seconds >= 0 else f"{duration(-seconds)} overdue"
    return f"{clock} ({relative})"


def waits(wait: WaitingFor, now: datetime) -> str:
    """What a suspended session waits for: the first of them to fire resumes it."""
    things: list[str] = []
    if wait.signals:
        topics = ", ".join(f"`{topic}`" for topic in wait.signals)
        things.append(f"signal {topics}" if len(wait.signals) == 1 else f"one of signals {topics}")
    if wait.callbacks:
        things.append("a callback" if wait.callbacks == 1 else f"{wait.callbacks} callbacks")
    if wait.poll:
        things.append(f"check `{wait.poll}` to pass")
    if wait.lock:
        things.append(f"lock `{wait.lock}`")
    if wait.children:
        things.append(f"{wait.children} of its children to finish")
    if wait.timer_at is not None:
        things.append(f"its timer at {_when(wait.timer_at, now)}")
    sentence = "waiting for " + (" or ".join(things) if things else "nothing it names")
    if wait.deadline is not None:
        sentence += f", until {_when(wait.deadline, now)}"
    return sentence


def doing_now(
    session: Session,
    now: datetime | None = None,
    *,
    worker: str | None = None,
    retry_at: datetime | None = None,
) -> str:
    """One sentence: what `session` is doing at `now` (default: now).
    `worker` (the lease's owner) and `retry_at` (when a retry is due) are
    said where given; the page of a list does not carry them."""
    now = now or datetime.now(UTC)
    step = f"`{session.step}`" if session.step else "its first step"
    error = session.error
    failure = f"{error.type}: {error.message}" if error and error.type else ""
    status = session.status
    since = session.updated_at
    if status == SessionStatus.RUNNING:
        on = f" on {worker}" if worker else ""
        return f"running {step} for {duration((now - since).total_seconds())}{on}"
    if status == SessionStatus.PENDING and session.slot_wait is not None:
        slot = session.slot_wait
        at_once = f", {slot.limit} at a time" if slot.limit is not None else ""
        waited = duration((now - slot.since).total_seconds())
        return f"waiting for a slot of {slot.key}{at_once}: {waited} so far"
    if status == SessionStatus.PENDING:
        return f"queued for {step}, {duration((now - since).total_seconds())} so far"
    if status == SessionStatus.SUSPENDED:
        return waits(session.waiting_for, now) if session.waiting_for else "waiting"
    if status == SessionStatus.RETRYING and error is not None and error.code == "rate_limited":
        due = f" at {_when(retry_at, now)}" if retry_at else ""
        return f"{error.message}: {step} runs again{due} (no attempt counted)"
    if status == SessionStatus.RETRYING:
        due = f" at {_when(retry_at, now)}" if retry_at else ""
        after = f" after {error.type}" if error and error.type else ""
        return f"retrying {step}{due} (attempt {session.attempts + 1}){after}"
    if status == SessionStatus.BLOCKED:
        reason = session.blocked_reason or {}
        return f"blocked: {reason.get('message') or reason.get('kind') or 'its replay diverged'}"
    if status == SessionStatus.COMPENSATING:
        return "undoing its completed steps (its saga)" + (f" after {failure}" if failure else "")
    finished = session.finished_at or since
    if status == SessionStatus.COMPLETED:
        return f"completed {ago(finished, now)}"
    if status == SessionStatus.FAILED:
        return f"failed {ago(finished, now)}" + (f": {failure}" if failure else "")
    return f"cancelled {ago(finished, now)}"
