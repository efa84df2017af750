"""How a suspended session wakes, by the worker's rules (``waits.py``,
``models/wait_queries.py``, ``queue/wakes.py``, ``coordination/``).

A callback or signal is kept until a wait names it, and the oldest one named
wakes the wait (one that arrived before the session suspended, too); a due
timer wins over a passed deadline, which wins over a poll check; a check
that finds nothing is due again ``every`` seconds after it fell due; a lock
grant and enough finished children wake their waiters. Whatever wakes a
session closes its open callbacks and takes it out of any lock queue.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from resumable.errors import InvalidArgumentError, SessionStateError
from resumable.models.status import SessionStatus
from resumable.testing._records import CallbackRow
from resumable.testing._stubs import MISSING, invoke, resolve
from resumable.testing._values import error_record, parse_time, stored
from resumable.waits import Callback, Wake, WakeKind

if TYPE_CHECKING:
    from resumable.testing._session import TestSession


@dataclass(frozen=True)
class Delivery:
    """A callback or signal received, kept until a wait consumes it."""

    id: int
    kind: WakeKind
    topic: str
    token: str | None
    payload: Any


def deliver(
    session: TestSession, kind: WakeKind, topic: str, token: str | None, payload: Any
) -> None:
    if session.status.is_terminal:
        raise SessionStateError(
            f"{session!r} has finished: a {kind} now is refused (and audited), as over HTTP"
        )
    value = stored(payload, "payload")
    session._deliveries.append(Delivery(session._world.delivery_id(), kind, topic, token, value))
    wake_from_deliveries(session)


def wake_from_deliveries(session: TestSession) -> None:
    spec = session._spec
    if session.status is not SessionStatus.SUSPENDED or spec is None:
        return
    for delivery in session._deliveries:
        if delivery.kind == "callback":
            named = delivery.token in spec["callbacks"]
        else:
            named = delivery.topic in spec["signals"]
        if named:
            session._deliveries.remove(delivery)
            wake(session, Wake(delivery.kind, delivery.topic, delivery.payload, delivery.id))
            return


def wake(session: TestSession, woken_by: Wake) -> None:
    """The session is pending again, for the ``then`` step, in a new run."""
    session.status, session.wake = SessionStatus.PENDING, woken_by
    session.wait, session._spec, session._wake_at = None, None, None
    session._epoch += 1  # a new run: a new lease epoch
    for row in session._records.callbacks.values():
        row.open = False
    session._world.leave_queues(session.session_id)


def fire_due(session: TestSession) -> None:
    """Whatever of the session fell due: a retry, a timer, a deadline, a poll check."""
    now = session._world.now
    if session.status is SessionStatus.RETRYING:
        session.status, session._wake_at = SessionStatus.PENDING, None
        session._epoch += 1
        return
    spec = session._spec or {}
    timer_at, deadline = parse_time(spec.get("timer_at")), parse_time(spec.get("deadline"))
    if timer_at is not None and timer_at <= now:
        wake(session, Wake("timer"))
    elif deadline is not None and deadline <= now:
        wake(session, Wake("timeout"))
    elif "poll" in spec:
        poll = spec["poll"]
        stub = session._checks.get(poll["check"], MISSING)
        check = session.agent.get_check(poll["check"]) if stub is MISSING else stub
        value = resolve(invoke(check, (copy.deepcopy(poll["args"]),), {}))
        if value is not None:
            wake(
                session,
                Wake("poll", poll["check"], stored(value, f"value of check {poll['check']!r}")),
            )
            return
        every = timedelta(seconds=float(poll["every"]))
        due = session._wake_at + every if session._wake_at else now + every
        later = [due if due > now else now + every, deadline, timer_at]
        session._wake_at = min(t for t in later if t is not None)
    else:
        session._wake_at = None


def check_children(session: TestSession) -> None:
    """Wake the session if enough of the children it waits for finished."""
    spec = (session._spec or {}).get("children")
    if session.status is not SessionStatus.SUSPENDED or spec is None:
        return
    done: dict[str, TestSession] = {}
    for child_id in spec["ids"]:
        child = session._world.sessions.get(uuid.UUID(child_id))
        if child is not None and (
            child.status in (SessionStatus.COMPLETED, SessionStatus.CANCELLED)
            or (child.status is SessionStatus.FAILED and spec["on_failure"] == "inform")
        ):
            done[child_id] = child
    if len(done) < spec["need"]:
        return
    completed = SessionStatus.COMPLETED
    payload = {
        "results": {i: c.result for i, c in done.items() if c.status is completed},
        "failures": {
            i: {"status": c.status.value, "error": error_record(c.error, c.step)}
            for i, c in done.items()
            if c.status is not completed
        },
    }
    wake(session, Wake("children", payload=stored(payload, "children")))


def waits_for_lock(session: TestSession, name: str) -> bool:
    lock = (session._spec or {}).get("lock") or {}
    return session.status is SessionStatus.SUSPENDED and lock.get("name") == name


def find_callback(session: TestSession, callback: Callback | str) -> CallbackRow:
    """A callback of the session: the ``Callback``, its URL, its token or the
    topic of an open one."""
    rows = session._records.callbacks
    wanted = callback.token if isinstance(callback, Callback) else str(callback)
    wanted = wanted.rsplit("/v1/callbacks/", 1)[-1]
    if wanted in rows:
        return rows[wanted]
    by_topic = [row for row in rows.values() if row.callback.topic == wanted and row.open]
    if by_topic:
        return by_topic[-1]
    topics = ", ".join(repr(row.callback.topic) for row in rows.values()) or "none"
    raise InvalidArgumentError(
        f"{session!r} has no callback {wanted!r} (its callbacks' topics: {topics})"
    )


def stuck(session: TestSession) -> str:
    """Why nothing can happen: who waits for what only the test can deliver."""
    lines = []
    for other in session._world.sessions.values():
        if other.status is SessionStatus.SUSPENDED and other._spec is not None:
            lines.append(f"{other!r} waits for {describe(other._spec)}")
        elif other.status is SessionStatus.PENDING and not other.agent.step_names:
            lines.append(
                f"{other!r} (child {other.session_id}) is of an agent not run here: pass "
                "agents=[...] to TestSession, or end it with .complete() or .fail()"
            )
    return "; ".join(lines) or f"{session!r} cannot go on"


def describe(spec: dict[str, Any]) -> str:
    """A wait, in words, saying how a test delivers what it waits for."""
    parts = [f"signal {topic!r} (session.signal)" for topic in spec["signals"]]
    if spec["callbacks"]:
        parts.append(f"{len(spec['callbacks'])} callback(s) (session.deliver)")
    if "lock" in spec:
        parts.append(f"lock {spec['lock']['name']!r}")
    if "children" in spec:
        children = spec["children"]
        parts.append(f"{children['need']} of {len(children['ids'])} children")
    if "poll" in spec:
        parts.append(f"poll check {spec['poll']['check']!r}")
    parts += [
        f"{what} at {spec[key]}"
        for what, key in (("timer", "timer_at"), ("deadline", "deadline"))
        if spec.get(key)
    ]
    return " or ".join(parts) + f", then step {spec['then']!r}"
