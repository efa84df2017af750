"""The dramatiq Redis broker, configured for fast recovery.

Redis only says "run session X"; PostgreSQL holds everything else. With
dramatiq's defaults a SIGKILLed worker's unacked messages come back after the
60 s heartbeat timeout plus a 0.1 % maintenance lottery (measured: minutes).
We shorten both (settings ``heartbeat_timeout_ms``, ``maintenance_chance``),
and the reconciler re-enqueues from PostgreSQL whatever Redis loses anyway.
Idle consumers block on a wake-up list instead of polling (``broker/redis.py``).
Every send that follows a commit goes through ``enqueue_after_commit``, so an
unreachable Redis fails them all the same way.

dramatiq and redis-py load on the first send, not on import: the services
that may send (the inbox, the dead-letter drain, a fork) are also what a
one-shot read such as ``resumable sessions list`` imports, and those two
libraries are a seventh of its start-up.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from resumable._internal.reachability import reason
from resumable.broker.lanes import lane
from resumable.broker.send_gate import gate_of
from resumable.priorities import DEFAULT_PRIORITY, Routed
from resumable.settings import Settings

if TYPE_CHECKING:
    import dramatiq
    import redis.asyncio

    from resumable.broker.redis import WakingRedisBroker

logger = logging.getLogger(__name__)

SESSION_ACTOR = "resumable_run_session"

#: A broker, or a function that builds one when a send first needs it (a
#: command that only reads never loads dramatiq and redis-py).
BrokerSource: TypeAlias = "dramatiq.Broker | Callable[[], dramatiq.Broker]"


def broker_of(source: BrokerSource) -> dramatiq.Broker:
    """The broker a source names, built now if it is a function."""
    return source() if callable(source) else source


#: What the senders take: a session's id, or its id and priority.
SessionRef: TypeAlias = "uuid.UUID | str | Routed"


def session_message(settings: Settings, ref: SessionRef) -> dramatiq.Message[None]:
    """A "run this session" message, on its priority's lane. Senders need no
    actor object, so the web process and the CLI can enqueue without
    importing any agent code."""
    import dramatiq

    session_id, level = (ref.session_id, ref.priority) if isinstance(ref, Routed) else (ref, None)
    return dramatiq.Message(
        queue_name=lane(settings.queue_name, level or DEFAULT_PRIORITY),
        actor_name=SESSION_ACTOR,
        args=(str(session_id),),
        kwargs={},
        options={},
    )


def enqueue_session(broker: dramatiq.Broker, settings: Settings, session_id: SessionRef) -> None:
    """A bare send that raises what the broker raises; after a commit, use
    ``enqueue_after_commit``."""
    broker.enqueue(session_message(settings, session_id))


# Sessions per Redis pipeline: large enough that a burst of due timers costs a
# round trip per few hundred sessions, small enough to keep each request short.
ENQUEUE_CHUNK = 500


def enqueue_sessions(
    broker: dramatiq.Broker, settings: Settings, session_ids: Iterable[SessionRef]
) -> int:
    """Enqueue a "run" message for each session, a Redis round trip per
    ``ENQUEUE_CHUNK`` sessions (one per session on other brokers); return how
    many were sent."""
    messages = [session_message(settings, session_id) for session_id in session_ids]
    enqueue_many = getattr(broker, "enqueue_many", None)
    if enqueue_many is None:  # a plain dramatiq broker (a test's)
        for message in messages:
            broker.enqueue(message)
        return len(messages)
    for start in range(0, len(messages), ENQUEUE_CHUNK):
        enqueue_many(messages[start : start + ENQUEUE_CHUNK])
    return len(messages)


def unreachable_broker_errors() -> tuple[type[Exception], ...]:
    """What a send raises when the broker cannot be reached in time: redis-py's
    errors (connection refused or dropped, a timeout), dramatiq's broker errors
    (its other brokers wrap theirs so), and a socket error that escaped both."""
    import redis
    from dramatiq.errors import BrokerError

    return (redis.RedisError, BrokerError, OSError)


# Sessions a failed send's log line names in its text, and in its
# ``session_ids`` field (a worker's backlog can be ten thousand; the line
# stays one line a log shipper takes). ``sessions`` counts them all.
_NAMED_IN_TEXT = 10
_NAMED_IN_FIELD = ENQUEUE_CHUNK


def enqueue_after_commit(
    broker: dramatiq.Broker,
    settings: Settings,
    session_ids: Iterable[SessionRef],
    *,
    why: str,
    delay: float = 0.0,
) -> bool:
    """Send "run" messages for sessions whose change is committed (or, for a
    receiver that holds the session row, about to be); whether they went.

    The one policy for every such send. The change is the truth and the
    message only a wake-up: when the broker cannot be reached, one warning
    (``action=enqueue_failed``) names the sessions and the scheduler's
    reconciler sends them once it can, so the caller still reports its
    success. A 5xx after a commit would invite a retry of what was done.
    Anything else raised is a bug and propagates. `delay` (seconds) sends
    delayed messages (a retry's backoff), one round trip per session."""
    refs = list(session_ids)
    ids = _ids(refs)
    if not ids:
        return True
    if not _worth_trying(broker, ids, why):
        return False
    try:
        if delay > 0:
            for ref in refs:
                broker.enqueue(session_message(settings, ref), delay=int(delay * 1000))
        else:
            enqueue_sessions(broker, settings, refs)
    except unreachable_broker_errors() as exc:
        _not_sent(broker, ids, why, exc)
        return False
    return True


async def aenqueue_after_commit(
    broker: WakingRedisBroker,
    client: redis.asyncio.Redis,
    settings: Settings,
    session_ids: Sequence[Routed],
    *,
    why: str,
) -> bool:
    """``enqueue_after_commit``, awaited on an asyncio client of the broker's
    Redis: the same gate, the same warning, the same reconciler."""
    ids = _ids(session_ids)
    if not ids:
        return True
    if not _worth_trying(broker, ids, why):
        return False
    messages = [session_message(settings, ref) for ref in session_ids]
    try:
        await broker.aenqueue_many(client, messages)
    except unreachable_broker_errors() as exc:
        _not_sent(broker, ids, why, exc)
        return False
    return True


def _ids(refs: Sequence[SessionRef]) -> list[str]:
    return [str(ref.session_id if isinstance(ref, Routed) else ref) for ref in refs]


def _worth_trying(broker: dramatiq.Broker, ids: Sequence[str], why: str) -> bool:
    shut_because = gate_of(broker).shut_because()
    if shut_because is not None:  # out of reach a moment ago: not tried (send_gate.py)
        _log_not_enqueued(ids, why, f"{shut_because}; not tried while it does not answer")
        return False
    return True


def _not_sent(broker: dramatiq.Broker, ids: Sequence[str], why: str, exc: Exception) -> None:
    failure = f"{type(exc).__name__}: {reason(exc)}"
    gate_of(broker).shut(failure)
    _log_not_enqueued(ids, why, failure)


def log_not_enqueued(refs: Sequence[SessionRef], why: str, failure: str) -> None:
    """The one warning of sends that did not happen (a sender stopped with
    messages still queued): the reconciler sends them."""
    if refs:
        _log_not_enqueued(_ids(refs), why, failure)


def _log_not_enqueued(ids: Sequence[str], why: str, failure: str) -> None:
    named = ", ".join(ids[:_NAMED_IN_TEXT])
    more = f" and {len(ids) - _NAMED_IN_TEXT} more" if len(ids) > _NAMED_IN_TEXT else ""
    # One session: the line names it as its session; several: the ids field.
    own = {"session_id": ids[0]} if len(ids) == 1 else {}
    logger.warning(
        "%s: %d session(s) committed but not enqueued (%s); the scheduler's"
        " reconciler will re-enqueue them: %s%s",
        why,
        len(ids),
        failure,
        named,
        more,
        extra={
            "action": "enqueue_failed",
            "why": why,
            "sessions": len(ids),
            "session_ids": list(ids[:_NAMED_IN_FIELD]),
            **own,
        },
    )
